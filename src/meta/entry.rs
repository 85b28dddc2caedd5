//! [`Entry`]: one cached artifact as the hit path needs it, and the
//! in-memory caches of entries and of "not found" answers.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::prepared::Prepared;
use crate::store::Digest;

/// One cached artifact as the hit path needs it.
#[derive(Debug)]
pub struct Entry {
    pub digest: Digest,
    pub size: u64,
    pub content_type: Option<String>,
    /// The mirror's validators, sent back when revalidating.
    pub upstream_etag: Option<String>,
    pub upstream_last_modified: Option<String>,
    /// The mirror's headers its ecosystem keeps (`Ecosystem::kept_headers`),
    /// `name: value` lines, replayed with every answer; never read here.
    pub kept_headers: Option<String>,
    /// When the body was fetched or last revalidated (unix ms).
    pub fetched_at_ms: i64,
    /// What the front end derives from this entry once (its header values):
    /// kept here so a hit does not build them again; never read by the cache.
    pub prepared: Prepared,
    /// Last hit (unix ms), kept in memory and written to the database in
    /// batches by the evictor: a hit never writes to the database.
    pub(super) last_access_ms: AtomicI64,
    /// The `last_access_ms` the database has.
    pub(super) flushed_access_ms: AtomicI64,
    /// Hits not yet added to the row's `hits` (written with the access times).
    pub(super) pending_hits: AtomicU64,
    /// Built from the entry index, which does not keep the mirror's `ETag`
    /// (`upstream_etag` is `None` whatever the row says): a revalidation
    /// reads the row first.
    pub from_index: bool,
}

impl Clone for Entry {
    fn clone(&self) -> Entry {
        Entry {
            digest: self.digest,
            size: self.size,
            content_type: self.content_type.clone(),
            upstream_etag: self.upstream_etag.clone(),
            upstream_last_modified: self.upstream_last_modified.clone(),
            kept_headers: self.kept_headers.clone(),
            fetched_at_ms: self.fetched_at_ms,
            prepared: self.prepared.clone(),
            last_access_ms: AtomicI64::new(self.last_access_ms.load(Ordering::Relaxed)),
            flushed_access_ms: AtomicI64::new(self.flushed_access_ms.load(Ordering::Relaxed)),
            pending_hits: AtomicU64::new(self.pending_hits.load(Ordering::Relaxed)),
            from_index: self.from_index,
        }
    }
}

impl Entry {
    pub fn new(
        digest: Digest,
        size: u64,
        content_type: Option<String>,
        upstream_etag: Option<String>,
        upstream_last_modified: Option<String>,
        fetched_at_ms: i64,
    ) -> Entry {
        Entry {
            digest,
            size,
            content_type,
            upstream_etag,
            upstream_last_modified,
            kept_headers: None,
            fetched_at_ms,
            prepared: Prepared::default(),
            last_access_ms: AtomicI64::new(fetched_at_ms),
            flushed_access_ms: AtomicI64::new(fetched_at_ms),
            pending_hits: AtomicU64::new(0),
            from_index: false,
        }
    }

    /// Notes a hit: one relaxed add to the hit count (for `ls`; the remote's
    /// request counter already costs the hit path the same), and the access
    /// time stored at most once per second per entry.
    pub fn touch(&self, now_ms: i64) {
        self.pending_hits.fetch_add(1, Ordering::Relaxed);
        if now_ms - self.last_access_ms.load(Ordering::Relaxed) >= 1000 {
            self.last_access_ms.store(now_ms, Ordering::Relaxed);
        }
    }

    /// What the database does not have yet: hits since the last flush and
    /// the last access kept in memory (for the browse page, which adds them).
    pub(crate) fn unflushed(&self) -> (u64, i64) {
        (
            self.pending_hits.load(Ordering::Relaxed),
            self.last_access_ms.load(Ordering::Relaxed),
        )
    }

    /// Age since the last fetch or revalidation.
    pub fn age(&self, now_ms: i64) -> Duration {
        Duration::from_millis((now_ms - self.fetched_at_ms).max(0) as u64)
    }
}

/// The in-memory cache of entries in front of the database, keyed by
/// `remote/path`. Holds only positive entries: a miss goes to the fill, which
/// costs far more than the query it would save.
pub type EntryCache = moka::sync::Cache<String, Arc<Entry>>;

/// The entry cache as the hit path builds it (also used by `benches/cache_ops.rs`).
pub fn entry_cache(max_entries: u64) -> EntryCache {
    moka::sync::Cache::new(max_entries)
}

/// What every mirror answered last time a path was not found: (status, unix ms).
pub(crate) type NegativeCache = moka::sync::Cache<String, (u16, i64)>;
