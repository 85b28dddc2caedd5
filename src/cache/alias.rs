//! A second row for a blob already in the store: an OCI manifest fetched
//! by tag is also the entry of its digest, so a pull by digest (what
//! Kubernetes pins) is a hit, also with every mirror down.

use super::facade::Cache;
use crate::error::ProxyError;
use crate::meta::Entry;
use crate::path::ArtifactPath;
use crate::store::Digest;

/// Records `entry` as the entry for `path` too, when its blob is the
/// blob of a row already (so it is in the store and counted); returns
/// whether it did. Under the path's and the digest's locks, as a
/// commit: no release of the digest can fall between the check and the
/// row. A row it replaces has its blob released.
pub async fn link_entry(
    cache: &Cache,
    path: &ArtifactPath,
    entry: Entry,
) -> Result<bool, ProxyError> {
    let digest = entry.digest;
    let _counting = cache.locks.accounting.read().await;
    let _path = cache
        .locks
        .lock_paths(vec![cache.locks.path_stripe(path)])
        .await;
    let stored = cache
        .meta
        .db
        .stored_digest(path.remote(), path.stored_path())
        .await?
        .and_then(|hex| Digest::from_hex(&hex));
    if stored == Some(digest) {
        return Ok(true);
    }
    let _locked = cache
        .locks
        .lock_digests(std::iter::once(&digest).chain(stored.as_ref()))
        .await;
    if !cache.meta.digest_referenced(&digest.to_hex()).await? {
        return Ok(false);
    }
    cache.meta.record(path, entry).await?;
    if let Some(old) = stored {
        cache.release_held(&old).await;
    }
    Ok(true)
}
