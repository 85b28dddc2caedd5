//! Declared digests on the fill's side: what a fill expects its body to hash
//! to (from the artifact's own path, or from what an index declared), and
//! learning those declarations from each index document a fill brings in.

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use super::FillRegistry;
use crate::cache::{Blob, Cache, Digest};
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::kind::declared::{self, Declared};
use crate::path::ArtifactPath;
use crate::upstream::Remote;

/// How long a fill with no declared digest waits for documents still being
/// learned (a client asks for an artifact right after its index), and how
/// often it looks again meanwhile: declarations are stored in chunks, so the
/// one it needs may land long before a large index is done.
const LEARNING_WAIT: Duration = Duration::from_secs(10);
const LEARNING_POLL: Duration = Duration::from_millis(50);

/// The digest the body of `path` must have, if anything declares one.
/// `require_declared_hash` turns "nothing declared" into a refusal.
pub(super) async fn expected_digest(
    fills: &FillRegistry,
    remote: &Remote,
    path: &ArtifactPath,
) -> Result<Option<Declared>, ProxyError> {
    let kind = remote.config.kind;
    if let Some(declared) = declared::in_path(kind, path.path()) {
        return Ok(Some(declared));
    }
    let Some(artifact) = declared::artifact_key(kind, path.path()) else {
        return Ok(None);
    };
    let meta = &fills.cache.meta;
    let deadline = tokio::time::Instant::now() + LEARNING_WAIT;
    let learning = || fills.learning_in(&remote.name) && tokio::time::Instant::now() < deadline;
    // A mutable file (apt's `Packages` under `dists/`) may be declared anew by
    // the `InRelease` being learned right now: its old digest is not the one
    // to check against, so wait for the remote's learning to end first.
    if !remote.policy.is_immutable(path.path()) {
        while learning() {
            tokio::time::sleep(LEARNING_POLL).await;
        }
    }
    let mut found = meta.declared(&remote.name, &artifact).await;
    while matches!(found, Ok(None)) && learning() {
        tokio::time::sleep(LEARNING_POLL).await;
        found = meta.declared(&remote.name, &artifact).await;
    }
    match found {
        Ok(Some(declared)) => Ok(Some(declared)),
        Ok(None) if remote.config.require_declared_hash => Err(ProxyError::Undeclared),
        Ok(None) => Ok(None),
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

/// For a body fetched with nothing declared (`digest` its sha256, in
/// `file`): the (declared, received) digests if a document learned since
/// declared another one.
pub(super) async fn declared_since(
    fills: &FillRegistry,
    remote: &Remote,
    path: &ArtifactPath,
    digest: &Digest,
    file: &Arc<File>,
    size: u64,
) -> Option<(Declared, Declared)> {
    let artifact = declared::artifact_key(remote.config.kind, path.path())?;
    let late = fills
        .cache
        .meta
        .declared(&remote.name, &artifact)
        .await
        .ok()??;
    let received = if late.algo() == declared::Algo::Sha256 {
        Declared::new(declared::Algo::Sha256, digest.0.to_vec())?
    } else {
        fills
            .cache
            .hash_blob(Blob::Local(file.clone()), size, &late)
            .await
            .ok()?
    };
    (received != late).then_some((late, received))
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
pub(super) struct Learning<'a> {
    fills: &'a FillRegistry,
    remote: String,
}

impl<'a> Learning<'a> {
    pub(super) fn start(fills: &'a FillRegistry, remote: &str) -> Learning<'a> {
        *fills
            .learning
            .lock()
            .expect("learning counts poisoned")
            .entry(remote.to_string())
            .or_default() += 1;
        Learning {
            fills,
            remote: remote.to_string(),
        }
    }
}

impl Drop for Learning<'_> {
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

/// The learning to do for the document at `path` whose body is `digest`:
/// `None` when it is not a document that declares digests, or this process
/// already learned these very bytes (a 304, or an unchanged body). A body
/// not learned yet — also one cached before this process started, or whose
/// learning failed — is learned again.
pub(super) fn needed<'a>(
    fills: &'a FillRegistry,
    remote: &Remote,
    path: &ArtifactPath,
    digest: &Digest,
) -> Option<Learning<'a>> {
    let wanted = declared::declares(remote.config.kind, path.path())
        && fills.learned_docs.get(path.key()).as_ref() != Some(digest);
    wanted.then(|| Learning::start(fills, &remote.name))
}

/// Reads the digests the document `blob` (`size` bytes, `digest`) at `path`
/// declares and keeps them. Errors cost only the learning; they are logged.
pub(super) async fn from_document(
    learning: Learning<'_>,
    remote: &Remote,
    path: &ArtifactPath,
    blob: Blob,
    (digest, size): (Digest, u64),
) {
    let fills = learning.fills;
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
    let items = tokio::task::spawn_blocking(move || {
        let name = config.name.clone();
        // Kept under the path a request for it normalises to, once each (a
        // JSON API page lists a file under `urls` and `releases`).
        let unique: std::collections::BTreeMap<String, Declared> =
            declared::learn(&config, &doc, &body)
                .into_iter()
                .filter_map(|(artifact, digest)| {
                    let parsed = ArtifactPath::parse(&format!("/{name}/{artifact}")).ok()?;
                    Some((declared::canonical(parsed.path()), digest))
                })
                .collect();
        unique.into_iter().collect::<Vec<_>>()
    })
    .await
    .map_err(|e| ProxyError::Store(e.to_string()))?;
    if items.is_empty() {
        return Ok(());
    }
    let learned = cache
        .learn_declared(&remote.name, remote.config.kind, &items, now_ms())
        .await?;
    tracing::debug!(key = path.key(), ?learned, "learned declared digests");
    Ok(())
}
