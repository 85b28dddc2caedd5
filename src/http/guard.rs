//! The remote's guard at the front end: a direct request for a refused
//! artifact is answered 403 with the reason, and index documents are
//! filtered (each ecosystem's `Packages::filter`) on every response, from the bytes as stored, so
//! a config reload or a release coming of age applies without a refetch.
//!
//! Publish times a document lacks are read from its sibling, fetched and
//! cached through the proxy's own cache like any request: npm's full
//! packument for an abbreviated one (and for a tarball), pypi's PEP 691 JSON
//! page for an HTML one (and for a file), a crate's index file for a crate.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::HeaderMap;

use crate::cache::Blob;
use crate::cache::Entry;
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::fill::{self, FillState};
use crate::kind::advisory::Quarantined;
use crate::kind::guard::{ArtifactCheck, DocumentFilter, Filtered, Judge, Standing};
use crate::kind::package::Artifact;
use crate::kind::{Packages, TimeKey, Variant};
use crate::path::ArtifactPath;
use crate::proxy::Proxy;
use crate::upstream::Remote;

/// `body` with the refused versions taken out, or the refusal.
pub(super) async fn filter_document(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    filter: &DocumentFilter,
    body: Vec<u8>,
) -> Result<Vec<u8>, ProxyError> {
    let Some(packages) = remote.config.kind.packages() else {
        return Ok(body);
    };
    if filter.index {
        return Ok(Box::pin(filter_index(proxy, remote, packages, filter, body)).await);
    }
    let times = match (&filter.times_from, filter.cooldown) {
        (Some((path, variant)), _) => match sibling_body(proxy, remote, path, *variant).await {
            Ok((_, sibling)) => packages.publish_times(&sibling),
            // Another document the upstream lacks gives no times (a
            // version without one passes); a variant's failure is the
            // document's.
            Err(ProxyError::NotFound { .. }) if variant.is_none() => HashMap::new(),
            Err(error) => return Err(error),
        },
        (None, Some(min_age)) => dated_times(proxy, remote, packages, filter, &body, min_age).await,
        (None, None) => HashMap::new(),
    };
    let remote = remote.clone();
    let advisories = proxy.advisories.current();
    let (name, suffix) = (filter.name.clone(), filter.suffix);
    // A linear pass or a JSON parse of up to max_document_size: off the async threads.
    tokio::task::spawn_blocking(move || {
        let judge =
            Judge::new(&remote.config.guard, packages, now_ms()).with_advisories(&advisories);
        match packages.filter(&judge, &name, &body, &times, suffix) {
            Filtered::Unchanged => Ok(body),
            Filtered::Changed(filtered) => Ok(filtered),
            Filtered::Refused(reason) => Err(refused(packages.reason_in_status_line(), reason)),
        }
    })
    .await
    .map_err(|e| ProxyError::Store(e.to_string()))?
}

/// The most packages of one index whose documents are read and filtered
/// for it: every one a rule names by version first, then those under a
/// cooldown, newest listed first (an index appends its updates). A package
/// beyond it keeps its line as the upstream wrote it: a client that compares
/// the digest refetches that document rather than keep a stale one.
const MAX_RESTATED: usize = 64;

/// `body`, an index of many packages, restated so each package a rule or
/// the cooldown changes lists what its filtered document serves, with that
/// document's digest; a package refused whole is left out without reading
/// its document.
async fn filter_index(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    packages: &dyn Packages,
    filter: &DocumentFilter,
    body: Vec<u8>,
) -> Vec<u8> {
    let listing = packages.index_listing(&filter.name, &body);
    let Some(listing) = listing.filter(|l| !l.is_empty()) else {
        return body;
    };
    let advisories = proxy.advisories.current();
    let judge = Judge::new(&remote.config.guard, packages, now_ms()).with_advisories(&advisories);
    let mut restated: HashMap<String, Option<Vec<u8>>> = HashMap::new();
    let (mut by_version, mut cooling) = (Vec::new(), Vec::new());
    let mut seen = std::collections::HashSet::new();
    for (name, _) in listing.iter().rev() {
        if !seen.insert(name.as_str()) {
            continue;
        }
        match judge.standing(name) {
            Standing::Refused => {
                restated.insert(name.clone(), None);
            }
            Standing::ByVersion => by_version.push(name.clone()),
            Standing::Cooling => cooling.push(name.clone()),
            Standing::Served => {}
        }
    }
    let read: Vec<String> = by_version
        .into_iter()
        .chain(cooling)
        .take(MAX_RESTATED)
        .collect();
    for name in read {
        if let Some(entry) = restate_one(proxy, remote, packages, &name).await {
            restated.insert(name, entry);
        }
    }
    if restated.is_empty() {
        return body;
    }
    packages.restate_index(body, &restated)
}

/// The document of package `name` as served, for its index: `Some(None)`
/// when it is refused whole, `None` when the filter leaves it as stored (or
/// it cannot be read: the index keeps what the upstream wrote).
async fn restate_one(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    packages: &dyn Packages,
    name: &str,
) -> Option<Option<Vec<u8>>> {
    let path = packages.document_of(name)?;
    // The document as the index lists it: no variant.
    let mut plan = remote.config.kind.plan(&path, &HeaderMap::new());
    plan.variant = None;
    let advisories = proxy.advisories.current();
    let checks = remote.config.kind.guard_checks(
        &remote.config.guard,
        &path,
        &plan,
        now_ms(),
        &advisories,
    )?;
    let filter = checks.document?;
    let (_, stored) = sibling_body(proxy, remote, &path, None).await.ok()?;
    let served = match filter_document(proxy, remote, &filter, stored.clone()).await {
        Ok(served) if served == stored => None,
        Ok(served) => Some(Some(served)),
        Err(ProxyError::Refused { .. }) => Some(None),
        Err(_) => None,
    };
    served
}

/// `base` qualified by a digest of the filtered `body`, for the ETag of a
/// filtered document (`respond::document` derives it from the base).
pub(super) fn qualified_base(base: &str, body: &[u8]) -> String {
    use sha2::Digest;
    let digest = hex::encode(&sha2::Sha256::digest(body)[..8]);
    format!("{base} {digest}")
}

/// Refuses a direct request for an artifact the guard refuses (403 with
/// the reason): `check`, as the rules judged it without a publish time. A
/// cooldown (and `quarantine_since`, for a version an advisory names)
/// needs the publish time, read from the package's document
/// through the cache once, then from memory (`Proxy::publish_times`) — and
/// not at all for an artifact cached at least `min_release_age` ago, which
/// was published before that.
pub(super) async fn check_artifact(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    path: &ArtifactPath,
    check: &ArtifactCheck,
    in_status_line: bool,
) -> Result<(), ProxyError> {
    if let Some(reason) = &check.refusal {
        if let Some(advisory) = &check.quarantined {
            quarantine_refused(proxy, &remote.name, &check.artifact, advisory);
        }
        return Err(refused(in_status_line, reason.clone()));
    }
    if check.cooldown.is_none() && !check.quarantine_dated {
        return Ok(());
    }
    let Some(packages) = remote.config.kind.packages() else {
        return Ok(());
    };
    let now = now_ms();
    let cached_long_ago = check.cooldown.is_some_and(|min_age| {
        !check.quarantine_dated
            && proxy
                .cache
                .meta
                .memory
                .lookup_in_memory(path)
                .is_some_and(|entry| entry.age(now) >= min_age)
    });
    if cached_long_ago {
        return Ok(());
    }
    let artifact = &check.artifact;
    let published = match proxy.publish_times.get(path.key()) {
        Some(published) => published,
        None => {
            let published = match publish_time(proxy, remote, packages, artifact).await {
                // The upstream has no such document: no time, so it passes.
                Err(ProxyError::NotFound { .. }) => None,
                other => other?,
            };
            proxy
                .publish_times
                .insert(path.key().to_string(), published);
            published
        }
    };
    let advisories = proxy.advisories.current();
    let judge = Judge::new(&remote.config.guard, packages, now).with_advisories(&advisories);
    match judge.verdict(&artifact.name, &artifact.version, published) {
        Some((reason, quarantined)) => {
            if let Some(advisory) = &quarantined {
                quarantine_refused(proxy, &remote.name, artifact, advisory);
            }
            Err(refused(in_status_line, reason))
        }
        None => Ok(()),
    }
}

/// Counts a quarantine refusal: by remote and class on `/-/metrics`, by
/// package, version and advisory on the dashboard.
fn quarantine_refused(proxy: &Proxy, remote: &str, artifact: &Artifact, advisory: &Quarantined) {
    proxy.metrics.quarantine_refusal(remote, advisory.class);
    proxy.advisories.refusals.record(
        remote,
        &artifact.name,
        &artifact.version,
        advisory,
        now_ms(),
    );
}

/// When `artifact` was published, read from its package's document through
/// the cache; `None` when the document gives no time.
async fn publish_time(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    packages: &dyn Packages,
    artifact: &Artifact,
) -> Result<Option<i64>, ProxyError> {
    let Some(source) = packages.time_source(artifact) else {
        return Ok(None);
    };
    let variant = remote
        .config
        .kind
        .variants(&source.document)
        .iter()
        .find(|v| v.suffix == source.suffix)
        .copied();
    let (entry, body) = sibling_body(proxy, remote, &source.document, variant).await?;
    Ok(match &source.key {
        TimeKey::Listed(key) => packages.publish_times(&body).get(key).copied(),
        TimeKey::LastModified => entry
            .upstream_last_modified
            .as_deref()
            .and_then(|date| httpdate::parse_http_date(date).ok())
            .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|since| since.as_millis() as i64),
    })
}

/// The most versions of one document whose publish times are read one by
/// one (a Maven artifact's `.pom`s) before the rest are taken to be older.
const MAX_DATED_VERSIONS: usize = 32;

/// Publish times by version for a document that has none of its own: read
/// newest version first (each remembered in `Proxy::publish_times`) until
/// one is older than `min_age`, when the older versions are taken to be
/// older still. A version whose time cannot be read has none (the cooldown
/// lets it through, as for any version without a time; its files are
/// judged again when they are asked for).
async fn dated_times(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    packages: &dyn Packages,
    filter: &DocumentFilter,
    body: &[u8],
    min_age: std::time::Duration,
) -> HashMap<String, i64> {
    let mut times = HashMap::new();
    let now = now_ms();
    for artifact in packages
        .dated_versions(&filter.name, body)
        .into_iter()
        .take(MAX_DATED_VERSIONS)
    {
        let Some(source) = packages.time_source(&artifact) else {
            continue;
        };
        let key = format!("{}/{}", remote.name, source.document);
        let published = match proxy.publish_times.get(&key) {
            Some(published) => published,
            None => {
                let published = publish_time(proxy, remote, packages, &artifact)
                    .await
                    .unwrap_or(None);
                proxy.publish_times.insert(key, published);
                published
            }
        };
        if let Some(at) = published {
            times.insert(artifact.version.clone(), at);
            if now - at >= min_age.as_millis() as i64 {
                break;
            }
        }
    }
    times
}

/// The refusal as the ecosystem's client shows it: pip prints only the
/// status line of a failed download (`in_status_line`), npm and cargo the
/// body.
fn refused(in_status_line: bool, reason: String) -> ProxyError {
    ProxyError::Refused {
        reason,
        in_reason_phrase: in_status_line,
    }
}

/// Another path of the remote (one `variant` of it), its entry and stored
/// bytes, through the cache: fresh from the store, else from a fill (joined
/// or started), else a stale copy within `max_stale` when the mirrors fail.
pub(super) async fn sibling_body(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    path: &str,
    variant: Option<Variant>,
) -> Result<(Arc<Entry>, Vec<u8>), ProxyError> {
    let key = ArtifactPath::parse(&format!("/{}/{path}", remote.name))?;
    let key = variant.map_or_else(|| key.clone(), |v| key.with_variant(v.suffix));
    let now = now_ms();
    let read = |blob: Blob, size: u64| async move {
        blob.read_all(size)
            .await
            .map_err(|e| ProxyError::Store(e.to_string()))
    };
    let stale = match proxy.cache.meta.lookup(&key).await {
        Ok(Some(entry)) => {
            let fresh = remote.policy.is_fresh(key.path(), entry.age(now));
            match proxy.cache.open_blob(&entry.digest, entry.size).await {
                Ok(blob) if fresh => {
                    proxy.cache.meta.memory.touch(&key, &entry, now);
                    let body = read(blob, entry.size).await?;
                    return Ok((entry, body));
                }
                Ok(_) => Some(entry),
                Err(_) => None,
            }
        }
        _ => None,
    };
    let (mut rx, _) =
        proxy
            .fills
            .join_or_start(remote, &key, variant.map(|v| v.accept), stale.clone())?;
    let state = rx
        .wait_for(|s| !matches!(s, FillState::Connecting | FillState::Streaming { .. }))
        .await
        .map(|s| s.clone())
        .unwrap_or(FillState::Failed(ProxyError::FillAborted));
    let entry = match state {
        FillState::Complete {
            entry,
            file,
            recent,
            ..
        } => {
            let body = read(
                fill::complete_blob(file, recent.as_ref(), entry.size),
                entry.size,
            )
            .await?;
            return Ok((entry, body));
        }
        FillState::Shared(entry) | FillState::Revalidated(entry) => entry,
        FillState::Bypass { head, .. } => {
            return Err(ProxyError::TooLarge {
                size: head.content_length.unwrap_or(0),
                limit: proxy.cache.max_size(),
            })
        }
        FillState::Failed(error) => match stale {
            Some(entry) if entry.age(now) <= remote.config.max_stale => entry,
            _ => return Err(error),
        },
        FillState::Connecting | FillState::Streaming { .. } => unreachable!("waited past them"),
    };
    let blob = proxy
        .cache
        .open_blob(&entry.digest, entry.size)
        .await
        .map_err(|e| ProxyError::Store(e.to_string()))?;
    let body = read(blob, entry.size).await?;
    Ok((entry, body))
}
