//! Keeping the store under `storage.max_size`: a background task that writes
//! batched access times and evicts least-recently-used entries.
//!
//! Hits only touch an atomic in their in-memory entry; every `FLUSH_INTERVAL`
//! (and before each eviction round) the touched times go to the database in
//! one transaction. Eviction deletes rows oldest-access first, then each blob
//! no row references any more, until the store is back under 90% of the
//! limit. A blob being read is never cut short: readers hold an open file,
//! and Unix frees a deleted file's data only on its last close.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::proxy::Proxy;

/// How often access times are written and the size is checked.
const FLUSH_INTERVAL: Duration = Duration::from_secs(30);
/// Rows fetched per eviction query.
const BATCH: i64 = 256;

pub struct Evictor {
    max_size: u64,
    wake: Notify,
}

impl Evictor {
    pub fn new(max_size: u64) -> Evictor {
        Evictor {
            max_size,
            wake: Notify::new(),
        }
    }

    /// Wakes the evictor if the store has outgrown its limit.
    pub fn wake_if_over(&self, store_size: u64) {
        if store_size > self.max_size {
            self.wake.notify_one();
        }
    }

    /// Runs until the proxy is dropped.
    pub async fn run(proxy: Weak<Proxy>) {
        loop {
            let Some(p) = proxy.upgrade() else { return };
            let evictor = p.evictor.clone();
            drop(p);
            tokio::select! {
                () = evictor.wake.notified() => {}
                () = tokio::time::sleep(FLUSH_INTERVAL) => {}
            }
            let Some(proxy) = proxy.upgrade() else { return };
            if let Err(error) = evict(&proxy).await {
                proxy.metrics.metadata_errors.inc();
                tracing::warn!(%error, "eviction round failed");
            }
        }
    }
}

/// Flushes access times, then evicts until the store is under 90% of the limit
/// (only when it is over the limit). Also what tests and `verify` call.
pub async fn evict(proxy: &Arc<Proxy>) -> Result<(), crate::error::ProxyError> {
    proxy.meta.flush_access_times().await?;
    let max = proxy.evictor.max_size;
    if proxy.blobs.size() <= max {
        return Ok(());
    }
    let target = max / 10 * 9;
    let (mut entries, mut bytes) = (0u64, 0u64);
    'rounds: while proxy.blobs.size() > target {
        let rows = proxy.meta.least_recently_used(BATCH).await?;
        if rows.is_empty() {
            break;
        }
        for row in rows {
            proxy.meta.forget_row(&row.remote, &row.path).await?;
            entries += 1;
            if let Some(digest) = crate::store::Digest::from_hex(&row.digest) {
                bytes += proxy.release_blob(&digest).await;
            }
            if proxy.blobs.size() <= target {
                break 'rounds;
            }
        }
    }
    proxy.metrics.evictions.inc_by(entries);
    proxy.metrics.evicted_bytes.inc_by(bytes);
    tracing::info!(entries, bytes, store = proxy.blobs.size(), max, "evicted");
    Ok(())
}
