//! Declared digests on the fill's side: what a fill expects its body to hash
//! to (from the artifact's own path, or from what an index declared), and
//! learning those declarations from each index document a fill brings in.

use std::sync::Arc;
use std::time::Duration;

use super::{FillRegistry, FillState};
use crate::cache::{prune, Blob, Cache, Digest, Entry};
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::kind::declared::{canonical, Algo, Declared, Document};
use crate::kind::DigestRole;
use crate::meta::Pin;
use crate::path::ArtifactPath;
use crate::upstream::Remote;

/// How long a fill with no declared digest waits for documents still being
/// learned (a client asks for an artifact right after its index), and how
/// often it looks again meanwhile: declarations are stored in chunks, so the
/// one it needs may land long before a large index is done.
const LEARNING_WAIT: Duration = Duration::from_secs(10);
const LEARNING_POLL: Duration = Duration::from_millis(50);

/// What a fill knows of its body's digest, asked of the remote's ecosystem
/// once when the fill starts ([`digest_role`](crate::kind::Kind::digest_role)) and of the `declared`
/// table: the digest to check the body against, the key a declaration
/// learned meanwhile would be under, and whether the body is a document that
/// declares digests of others.
pub(super) struct FillDigests {
    /// The digest the body must have, if anything declares one.
    pub(super) expected: Option<Declared>,
    role: DigestRole,
    /// Whether the sha256 of this body, if nothing declares one, becomes
    /// its declared digest after the commit ([`pin_key`]).
    pins: bool,
}

/// The key the digest of the artifact at `path` is declared (or pinned)
/// under, when it is pinned on first use: an immutable artifact whose
/// address declares nothing, not a document, on a remote with
/// `pin_on_first_use`, whose ecosystem does not opt out
/// (`Digests::pins_on_first_use`). The ecosystem's artifact key where it has
/// one (an index may declare it later), else the path itself (generic, go).
pub fn pin_key(remote: &Remote, path: &ArtifactPath) -> Option<String> {
    let role = remote.config.kind.digest_role(path.path());
    pinned_under(remote, path, &role, remote.policy.is_immutable(path.path()))
}

/// [`pin_key`], given the path's digest `role` and whether the remote's
/// policy holds it `immutable`.
fn pinned_under(
    remote: &Remote,
    path: &ArtifactPath,
    role: &DigestRole,
    immutable: bool,
) -> Option<String> {
    let pins = remote.config.pin_on_first_use
        && role.in_path.is_none()
        && !role.declares
        && immutable
        && role.pins_on_first_use;
    pins.then(|| {
        role.artifact_key
            .clone()
            .unwrap_or_else(|| canonical(path.path()))
    })
}

impl FillDigests {
    /// `require_declared_hash` turns "nothing declared" into a refusal.
    pub(super) async fn of(
        fills: &Arc<FillRegistry>,
        remote: &Arc<Remote>,
        path: &ArtifactPath,
    ) -> Result<FillDigests, ProxyError> {
        // Asked once for the fill: the kind's digest role, the policy's
        // immutability.
        let mut role = remote.config.kind.digest_role(path.path());
        let immutable = remote.policy.is_immutable(path.path());
        let pin = pinned_under(remote, path, &role, immutable);
        let pins = pin.is_some();
        if role.artifact_key.is_none() {
            // Generic and go artifacts: nothing but a pin declares them.
            role.artifact_key = pin;
        }
        let expected = match (role.in_path.take(), &role.artifact_key) {
            (Some(declared), _) => Some(declared),
            (None, None) => None,
            (None, Some(artifact)) => {
                match declared_for(fills, remote, path, artifact, immutable).await? {
                    Some(declared) => Some(declared),
                    None => match fetch_declaring(fills, remote, path, artifact).await {
                        Some(declared) => Some(declared),
                        None if remote.config.require_declared_hash => {
                            return Err(ProxyError::Undeclared)
                        }
                        None => None,
                    },
                }
            }
        };
        Ok(FillDigests {
            expected,
            role,
            pins,
        })
    }

    /// For a body fetched with nothing declared (`digest` its sha256): the
    /// pin that records that digest as declared, written with the entry's
    /// row, when the artifact is pinned on first use ([`pin_key`]).
    pub(super) fn pin(&self, remote: &Remote, digest: &Digest) -> Option<Pin> {
        let (None, Some(artifact), true) = (&self.expected, &self.role.artifact_key, self.pins)
        else {
            return None;
        };
        Some(Pin {
            remote: remote.name.clone(),
            kind: remote.config.kind,
            artifact: artifact.clone(),
            declared: Declared::new(Algo::Sha256, digest.0.to_vec())?,
        })
    }

    /// Whether the body, nothing being declared for it, cannot be refused
    /// once received: no declaration can arrive during the fill either (an
    /// ecosystem without `Digests` has no document that declares anything,
    /// only a pin would, and this fill's is the one to come; nor can one
    /// without an artifact key). Its bytes may then reach the readers before
    /// they are written and hashed.
    pub(super) fn unrefusable(&self, remote: &Remote) -> bool {
        self.expected.is_none()
            && (remote.config.kind.digests().is_none() || self.role.artifact_key.is_none())
    }

    /// For a body fetched with nothing declared (`digest` its sha256, its
    /// bytes `body`): the (declared, received) digests if a document
    /// learned since declared another one.
    pub(super) async fn declared_since(
        &self,
        fills: &FillRegistry,
        remote: &Remote,
        (digest, body, size): (&Digest, Blob, u64),
    ) -> Option<(Declared, Declared)> {
        if self.expected.is_some() || self.unrefusable(remote) {
            return None;
        }
        let artifact = self.role.artifact_key.as_deref()?;
        let late = fills
            .cache
            .meta
            .declarations()
            .declared(&remote.name, artifact)
            .await
            .ok()??;
        let received = if late.algo() == Algo::Sha256 {
            Declared::new(Algo::Sha256, digest.0.to_vec())?
        } else {
            crate::cache::learn::hash_blob(body, size, &late)
                .await
                .ok()?
        };
        (received != late).then_some((late, received))
    }

    /// The learning to do for the document at `path` whose body is
    /// `digest`: `None` when it is not a document that declares digests, or
    /// this process already learned these very bytes (a 304, or an
    /// unchanged body). A body not learned yet — also one cached before this
    /// process started, or whose learning failed — is learned again.
    pub(super) fn learning(
        &self,
        fills: &Arc<FillRegistry>,
        remote: &Remote,
        path: &ArtifactPath,
        digest: &Digest,
    ) -> Option<Learning> {
        let wanted =
            self.role.declares && fills.learned_docs.get(path.key()).as_ref() != Some(digest);
        wanted.then(|| Learning::start(fills, &remote.name))
    }
}

/// The digest the `declared` table holds for `artifact`, waiting for the
/// remote's documents being learned.
async fn declared_for(
    fills: &FillRegistry,
    remote: &Remote,
    path: &ArtifactPath,
    artifact: &str,
    immutable: bool,
) -> Result<Option<Declared>, ProxyError> {
    let meta = &fills.cache.meta;
    let deadline = tokio::time::Instant::now() + LEARNING_WAIT;
    let learning = || fills.learning_in(&remote.name) && tokio::time::Instant::now() < deadline;
    // A mutable file (apt's `Packages` under `dists/`) may be declared anew by
    // the `InRelease` being learned right now: its old digest is not the one
    // to check against, so wait for the remote's learning to end first.
    if !immutable {
        while learning() {
            tokio::time::sleep(LEARNING_POLL).await;
        }
    }
    let mut found = meta.declarations().declared(&remote.name, artifact).await;
    while matches!(found, Ok(None)) && learning() {
        tokio::time::sleep(LEARNING_POLL).await;
        found = meta.declarations().declared(&remote.name, artifact).await;
    }
    match found {
        Ok(found) => Ok(found),
        Err(error) => {
            tracing::warn!(key = path.key(), %error, "declared digests unavailable");
            // Fail closed only where the operator asked for declared digests.
            if remote.config.require_declared_hash {
                Err(error)
            } else {
                Ok(None)
            }
        }
    }
}

/// The largest declaring document read by [`fetch_declaring`] (a sidecar
/// holds one digest).
const MAX_DECLARING: u64 = 4096;

/// For an artifact whose declaring documents the proxy fetches itself
/// (`Digests::declared_by`: Maven's sidecars): fetches them through the
/// cache, the first two at once and the rest only when neither is there,
/// keeps the strongest digest they declare for `artifact` in the `declared`
/// table, and returns it; or, when none could be read here, what their own
/// fills learned.
async fn fetch_declaring(
    fills: &Arc<FillRegistry>,
    remote: &Arc<Remote>,
    path: &ArtifactPath,
    artifact: &str,
) -> Option<Declared> {
    let digests = remote.config.kind.digests()?;
    let sources = digests.declared_by(path.path());
    if sources.is_empty() {
        return None;
    }
    let config = &remote.config;
    // The first two at once (Maven: `.sha512`, which repositories publish
    // beside `.sha256`, and `.sha1`, which every file has), the rest only
    // when neither is there: each missing one costs a 404 per mirror.
    let (first, rest) = sources.split_at(sources.len().min(2));
    let mut strongest = None;
    for round in [first, rest] {
        let bodies =
            futures_util::future::join_all(round.iter().map(|s| fetch_whole(fills, remote, s)))
                .await;
        strongest = round
            .iter()
            .zip(bodies)
            .filter_map(|(source, body)| {
                let document = Document::new(&config.name, &config.mirrors, &config.files, source);
                let learned = digests.learn(&document, &body?);
                let mut learned = learned.into_iter();
                let mine = learned.find(|(key, _)| canonical(key) == artifact);
                mine.map(|(_, declared)| declared)
            })
            .max_by_key(|declared| declared.algo().len());
        if strongest.is_some() {
            break;
        }
    }
    let Some(strongest) = strongest else {
        // A declaring index too large to read here (CRAN's `PACKAGES.gz`)
        // was learned whole by its own fill.
        return declared_for(fills, remote, path, artifact, true)
            .await
            .ok()
            .flatten();
    };
    let items = [(artifact.to_string(), strongest.clone())];
    if let Err(error) = crate::cache::learn::learn_declared(
        &fills.cache,
        &remote.name,
        config.kind,
        &items,
        now_ms(),
    )
    .await
    {
        tracing::warn!(key = path.key(), %error, "could not keep a declared digest");
    }
    Some(strongest)
}

/// The body of `path` (below the remote) through the cache: a cached copy,
/// else a fill joined or started; `None` when it cannot be had (a 404, a
/// failure) or is larger than [`MAX_DECLARING`].
async fn fetch_whole(
    fills: &Arc<FillRegistry>,
    remote: &Arc<Remote>,
    path: &str,
) -> Option<Vec<u8>> {
    let key = ArtifactPath::parse(&format!("/{}/{path}", remote.name)).ok()?;
    let cache = &fills.cache;
    let read = |entry: Arc<Entry>| async move {
        if entry.size > MAX_DECLARING {
            return None;
        }
        let blob = cache.open_blob(&entry.digest, entry.size).await.ok()?;
        blob.read_all(entry.size).await.ok()
    };
    if let Ok(Some(entry)) = cache.meta.lookup(&key).await {
        return read(entry).await;
    }
    if let Some((_, at)) = cache.meta.memory.absent(&key) {
        if now_ms() - at < remote.config.negative_ttl.as_millis() as i64 {
            return None;
        }
    }
    let (mut rx, _) = fills.join_or_start(remote, &key, None, None).ok()?;
    let state = rx
        .wait_for(|s| !matches!(s, FillState::Connecting | FillState::Streaming { .. }))
        .await
        .ok()?
        .clone();
    match state {
        FillState::Complete {
            entry,
            file,
            recent,
            ..
        } if entry.size <= MAX_DECLARING => super::complete_blob(file, recent.as_ref(), entry.size)
            .read_all(entry.size)
            .await
            .ok(),
        FillState::Shared(entry) | FillState::Revalidated(entry) => read(entry).await,
        _ => None,
    }
}

impl FillRegistry {
    /// Whether a document of `remote` is being learned now.
    fn learning_in(&self, remote: &str) -> bool {
        self.learning
            .lock()
            .expect("learning counts poisoned")
            .contains_key(remote)
    }
}

/// Counts a document of a remote being learned, until dropped (also when
/// the fill panics). Taken before the document is published, so a client
/// that asks for an artifact as soon as it has read the index finds its fill
/// waiting for the declarations.
pub(super) struct Learning {
    fills: Arc<FillRegistry>,
    remote: String,
}

impl Learning {
    fn start(fills: &Arc<FillRegistry>, remote: &str) -> Learning {
        *fills
            .learning
            .lock()
            .expect("learning counts poisoned")
            .entry(remote.to_string())
            .or_default() += 1;
        Learning {
            fills: fills.clone(),
            remote: remote.to_string(),
        }
    }
}

impl Drop for Learning {
    fn drop(&mut self) {
        let mut counts = self
            .fills
            .learning
            .lock()
            .expect("learning counts poisoned");
        if let Some(n) = counts.get_mut(&self.remote) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.remote);
            }
        }
    }
}

/// Reads the digests the document `blob` (`size` bytes, `digest`) at `path`
/// declares and keeps them. Errors cost only the learning; they are logged.
pub(super) async fn from_document(
    learning: Learning,
    remote: &Remote,
    path: &ArtifactPath,
    blob: Blob,
    (digest, size): (Digest, u64),
) {
    let fills = &learning.fills;
    match learn(&fills.cache, remote, path, blob, size).await {
        Ok(()) => fills.learned_docs.insert(path.key().to_string(), digest),
        Err(error) => {
            tracing::warn!(key = path.key(), %error, "could not learn the declared digests")
        }
    }
}

async fn learn(
    cache: &Cache,
    remote: &Remote,
    path: &ArtifactPath,
    blob: Blob,
    size: u64,
) -> Result<(), ProxyError> {
    if size > remote.config.max_document_size {
        return Ok(());
    }
    let body = blob
        .read_all(size)
        .await
        .map_err(|e| ProxyError::Store(e.to_string()))?;
    let (config, doc) = (remote.config.clone(), path.path().to_string());
    // Parsing is a pass over up to max_document_size: off the async threads.
    let items = tokio::task::spawn_blocking(move || prune::listed(&config, &doc, &body))
        .await
        .map_err(|e| ProxyError::Store(e.to_string()))?;
    if items.is_empty() {
        return Ok(());
    }
    let learned = crate::cache::learn::learn_declared(
        cache,
        &remote.name,
        remote.config.kind,
        &items,
        now_ms(),
    )
    .await?;
    tracing::debug!(key = path.key(), ?learned, "learned declared digests");
    Ok(())
}
