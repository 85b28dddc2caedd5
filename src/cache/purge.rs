//! A purge's rows and blobs: the admin API's DELETE of a path or a remote
//! (see [`crate::meta::purge`] for the generations that make it win against
//! what is in flight).

use super::facade::Cache;
use crate::error::ProxyError;
use crate::meta::Scope;

/// What a purge removed from the store.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    /// Rows deleted.
    pub entries: u64,
    /// Distinct digests those rows referenced.
    pub blobs: u64,
    /// Bytes of blobs deleted (no other row referenced them).
    pub freed: u64,
}

/// A purge's first step: a generation for `scope` (fills and lookups
/// begun before it are stale from now on), what memory holds of it
/// forgotten, and every other instance told.
pub async fn purge_begin(cache: &Cache, scope: &Scope) {
    cache.meta.memory.purge_memory(scope);
    if let Some(cluster) = cache.meta.memory.cluster() {
        cluster.purge(scope).await;
    }
}

/// A purge's last step: the rows of `scope` deleted and their blobs
/// released, then a second generation (a lookup that read a row before
/// the deletion is not remembered after it).
pub async fn purge_rows(cache: &Cache, scope: &Scope) -> Result<Purged, ProxyError> {
    // The commit's order: `accounting`, the paths' locks, the digests'.
    // Holding the paths' locks waits out a batch committing one of them
    // (which undoes its row itself, having seen the generation).
    let _counting = cache.locks.accounting.read().await;
    let stripes: Vec<usize> = match scope {
        Scope::Key(key) => vec![cache.locks.key_stripe(key)],
        _ => (0..cache.locks.path_stripes()).collect(),
    };
    let _paths = cache.locks.lock_paths(stripes).await;
    let purged = match scope {
        Scope::Key(key) => {
            let (remote, path) = key.split_once('/').unwrap_or((key.as_str(), ""));
            match cache.forget_row_held(remote, path).await? {
                Some(freed) => Purged {
                    entries: 1,
                    blobs: 1,
                    freed,
                },
                None => Purged::default(),
            }
        }
        Scope::Remote(remote) => {
            let (entries, blobs, freed) = cache.forget_remote_held(remote).await?;
            Purged {
                entries,
                blobs: blobs as u64,
                freed,
            }
        }
        Scope::All => {
            return Err(ProxyError::Store(
                "a purge of everything is not offered".into(),
            ))
        }
    };
    cache.meta.memory.purge_memory(scope);
    Ok(purged)
}
