//! Keeping the store under `storage.max_size`: a background task that writes
//! batched access times and evicts least-recently-used entries.
//!
//! Hits only touch an atomic in their in-memory entry; every `FLUSH_INTERVAL`
//! (and before each eviction round) the touched times go to the database in
//! one transaction. Each round re-derives the committed size from the
//! database (see [`crate::store::budget`]). Eviction counts committed bytes plus the
//! bytes of fills in progress: when they exceed the limit it deletes rows
//! oldest-access first, then each blob no row references any more, and stops
//! as soon as they are back under 90% of the limit (the low-water mark), so
//! a round never frees more than the last blob below it. A blob being read is
//! never cut short: on local disk readers hold an open file, and Unix frees a
//! deleted file's data only on its last close; on S3 the object is deleted
//! `delete_delay` later ([`crate::store::blobs`]). A packed blob's range
//! is dead once its last row goes, still counted until its pack, more than
//! half dead, is compacted: each round compacts such packs first, and again
//! after each packed blob it evicts (so a round may end further below the
//! low-water mark, by the dead bytes of the pack it compacted last).

use std::sync::Weak;
use std::time::Duration;

use super::facade::Cache;
use crate::error::ProxyError;

/// How often access times are written and the size is checked.
const FLUSH_INTERVAL: Duration = Duration::from_secs(30);
/// Rows fetched per eviction query.
const BATCH: i64 = 256;

/// Runs until the cache is dropped.
pub async fn run(cache: Weak<Cache>) {
    loop {
        let Some(c) = cache.upgrade() else { return };
        let wake = c.evictor.budget.wake();
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

/// The low-water mark eviction stops at: 90% of `max`.
pub(crate) fn low_water(max: u64) -> u64 {
    max / 10 * 9
}

/// Flushes access times and re-derives the committed size, then, when the
/// store (committed plus in progress) is over the limit, evicts until it is
/// under the low-water mark.
pub(crate) async fn evict(cache: &Cache) -> Result<(), ProxyError> {
    let _one_round = cache.evictor.round.lock().await;
    // Blob files held for hits that no longer serve (unlinked behind the
    // server, or past their minute) keep no disk space past this round.
    cache.blobs.let_go_stale();
    // Each eviction asks whether its blob is still referenced: the entry
    // index answers once loaded, where the database would read every row
    // (waited for a minute at most: loads follow each other while another
    // process writes).
    let _ = tokio::time::timeout(Duration::from_secs(60), cache.meta.memory.index.loaded()).await;
    cache.meta.flush_access_times().await?;
    cache.rederive_size().await?;
    // Packs more than half dead first: that frees room without losing an
    // entry.
    cache.compact_packs().await;
    let budget = &cache.evictor.budget;
    let max = budget.max();
    if budget.total() <= max {
        return Ok(());
    }
    let target = low_water(max);
    let (mut entries, mut bytes) = (0u64, 0u64);
    'rounds: while budget.total() > target {
        let rows = cache.meta.db.least_recently_used(BATCH).await?;
        if rows.is_empty() {
            break;
        }
        for row in rows {
            // Releases the digest the delete removed, not the one listed:
            // the row may have been replaced in between.
            let freed = cache.forget_row(&row.remote, &row.path).await?;
            bytes += freed;
            entries += 1;
            // A packed blob's range stays until its pack is compacted.
            if freed == 0 && cache.blobs.dead_bytes() > 0 {
                cache.compact_packs().await;
            }
            if budget.total() <= target {
                break 'rounds;
            }
        }
    }
    cache.metrics.evictions.inc_by(entries);
    cache.metrics.evicted_bytes.inc_by(bytes);
    tracing::info!(
        entries,
        bytes,
        store = budget.committed(),
        in_progress = budget.in_progress(),
        max,
        "evicted"
    );
    Ok(())
}

impl Cache {
    /// Compacts the store's packs that are more than half dead (see
    /// `crate::store::pack`), holding the size count shared: no
    /// re-derivation falls between a pack's copies and its removal.
    pub async fn compact_packs(&self) {
        let _counting = self.locks.accounting.read().await;
        if let Err(error) = self.blobs.compact().await {
            tracing::warn!(%error, "could not compact the packs");
        }
    }
}
