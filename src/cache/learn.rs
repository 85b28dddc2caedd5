//! What a document declared, checked against the bytes already cached: a
//! newly learned digest that contradicts a cached artifact drops that entry
//! (row and blob, under the digest's lock), so the next request fetches it
//! again.

use std::collections::HashMap;

use futures_util::StreamExt as _;

use super::facade::Cache;
use crate::error::ProxyError;
use crate::kind::declared::{Algo, Declared, Hashers};
use crate::kind::{CachedAt, Kind};
use crate::store::{Blob, Digest};

/// What one document taught.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    /// Digests the document declared.
    pub declared: usize,
    /// Of those, new or different from what was known.
    pub changed: usize,
    /// Cached artifacts dropped because they contradict a new digest.
    pub evicted: usize,
}

/// The digest of `size` bytes of `blob` in the function `like` uses,
/// hashed on the blocking pool a chunk at a time.
pub async fn hash_blob(blob: Blob, size: u64, like: &Declared) -> std::io::Result<Declared> {
    let mut hashers = Hashers::new(Some(like));
    let mut stream = blob.stream(0, size);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        hashers = tokio::task::spawn_blocking(move || {
            hashers.update(&chunk);
            hashers
        })
        .await
        .map_err(std::io::Error::other)?;
    }
    Ok(hashers.finish().1)
}

/// Keeps what a document of `remote` declared, and drops cached
/// artifacts that contradict a digest new to it.
pub async fn learn_declared(
    cache: &Cache,
    remote: &str,
    kind: Kind,
    items: &[(String, Declared)],
    now_ms: i64,
) -> Result<Learned, ProxyError> {
    let changed = cache
        .meta
        .declarations()
        .record_declared(remote, items, now_ms)
        .await?;
    Ok(Learned {
        declared: items.len(),
        changed: changed.len(),
        evicted: evict_contradicting(cache, remote, kind, changed).await?,
    })
}

/// Drops the cached artifacts of `remote` that contradict a digest in
/// `changed` (new or different declarations); returns how many.
pub(crate) async fn evict_contradicting(
    cache: &Cache,
    remote: &str,
    kind: Kind,
    changed: Vec<&(String, Declared)>,
) -> Result<usize, ProxyError> {
    let mut evicted = 0;
    let Some(digests) = kind.digests() else {
        return Ok(evicted);
    };
    // Rows cached at patterns are looked up once per group (cargo: an
    // index file is one crate), every other artifact's by its path.
    let mut of_group: HashMap<String, Vec<(String, String, i64)>> = HashMap::new();
    for (artifact, declared) in changed {
        let at = digests.cached_at(artifact);
        let rows = match &at {
            CachedAt::Like { group, .. } => {
                if !of_group.contains_key(group) {
                    let rows = cache
                        .meta
                        .declarations()
                        .rows_for_artifact(remote, artifact, &at)
                        .await?;
                    of_group.insert(group.clone(), rows);
                }
                of_group[group].clone()
            }
            CachedAt::Path => {
                cache
                    .meta
                    .declarations()
                    .rows_for_artifact(remote, artifact, &at)
                    .await?
            }
        };
        let rows = rows
            .into_iter()
            .filter(|(path, _, _)| digests.artifact_key(path).as_deref() == Some(artifact));
        for (path, digest, size) in rows {
            let Some(digest) = Digest::from_hex(&digest) else {
                continue;
            };
            if blob_matches(cache, &digest, size as u64, declared).await {
                continue;
            }
            tracing::warn!(
                remote,
                path,
                expected = %declared,
                "cached artifact contradicts its declared digest; dropping it"
            );
            cache.metrics.integrity_failure(remote, "cache");
            cache.forget_row(remote, &path).await?;
            evicted += 1;
        }
    }
    Ok(evicted)
}

/// Whether the stored blob `digest` is what `declared` says (a missing
/// or unreadable blob is left to the hit path, which refetches it).
async fn blob_matches(cache: &Cache, digest: &Digest, size: u64, declared: &Declared) -> bool {
    if declared.algo() == Algo::Sha256 {
        return declared.matches(&digest.0);
    }
    let Ok(blob) = cache.blobs.open(digest).await else {
        return true;
    };
    hash_blob(blob, size, declared)
        .await
        .map_or(true, |received| &received == declared)
}
