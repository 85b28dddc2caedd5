//! Keeping the store under `storage.max_size`: a background task that writes
//! batched access times and evicts least-recently-used entries.
//!
//! Hits only touch an atomic in their in-memory entry; every `FLUSH_INTERVAL`
//! (and before each eviction round) the touched times go to the database in
//! one transaction. Eviction deletes rows oldest-access first, then each blob
//! no row references any more, until the store is back under 90% of the
//! limit. On local disk a blob being read is never cut short: readers hold
//! an open file, and Unix frees a deleted file's data only on its last close
//! (with S3 blobs shared by instances this is not yet guaranteed).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::{Cache, Digest};
use crate::error::ProxyError;

/// How often access times are written and the size is checked.
const FLUSH_INTERVAL: Duration = Duration::from_secs(30);
/// Rows fetched per eviction query.
const BATCH: i64 = 256;

pub struct Evictor {
    max_size: u64,
    /// Shared so the evictor's task can wait without keeping the cache alive.
    wake: Arc<Notify>,
}

impl Evictor {
    pub fn new(max_size: u64) -> Evictor {
        Evictor {
            max_size,
            wake: Arc::new(Notify::new()),
        }
    }

    /// `storage.max_size`.
    pub fn max_size(&self) -> u64 {
        self.max_size
    }

    /// Wakes the evictor if the store has outgrown its limit.
    pub fn wake_if_over(&self, store_size: u64) {
        if store_size > self.max_size {
            self.wake.notify_one();
        }
    }

    /// Runs until the cache is dropped.
    pub async fn run(cache: Weak<Cache>) {
        loop {
            let Some(c) = cache.upgrade() else { return };
            let wake = c.evictor.wake.clone();
            drop(c);
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(FLUSH_INTERVAL) => {}
            }
            let Some(cache) = cache.upgrade() else { return };
            if let Err(error) = evict(&cache).await {
                cache.metrics.metadata_errors.inc();
                tracing::warn!(%error, "eviction round failed");
            }
        }
    }
}

/// Flushes access times, then evicts until the store is under 90% of the limit
/// (only when it is over the limit).
pub async fn evict(cache: &Cache) -> Result<(), ProxyError> {
    cache.meta.flush_access_times().await?;
    let max = cache.evictor.max_size;
    if cache.size() <= max {
        return Ok(());
    }
    let target = max / 10 * 9;
    let (mut entries, mut bytes) = (0u64, 0u64);
    'rounds: while cache.size() > target {
        let rows = cache.meta.least_recently_used(BATCH).await?;
        if rows.is_empty() {
            break;
        }
        for row in rows {
            cache.meta.forget_row(&row.remote, &row.path).await?;
            entries += 1;
            if let Some(digest) = Digest::from_hex(&row.digest) {
                bytes += cache.release_blob(&digest).await;
            }
            if cache.size() <= target {
                break 'rounds;
            }
        }
    }
    cache.metrics.evictions.inc_by(entries);
    cache.metrics.evicted_bytes.inc_by(bytes);
    tracing::info!(entries, bytes, store = cache.size(), max, "evicted");
    Ok(())
}
