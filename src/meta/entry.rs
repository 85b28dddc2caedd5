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
    /// Put in the entry cache from the index (`Memory::promote`, on a hit):
    /// its hits are counted in it, as a database row's are, not in
    /// `touched`.
    pub(super) held: bool,
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
            held: self.held,
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
            held: false,
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
/// costs far more than the query it would save. Hashed by foldhash, seeded
/// per process (SipHash of the key was 1.5 % of a hit's instructions): the
/// key is compared whole, so a collision never gives a wrong entry; only
/// keys of stored rows enter, and foldhash resists collisions chosen
/// without its seed (not a client timing its probes).
pub type EntryCache =
    quick_cache::sync::Cache<String, Arc<Entry>, EntryWeight, foldhash::fast::RandomState>;

/// What an entry weighs in the entry cache: [`Entry::cached_bytes`], and
/// no less than `floor` (the cache's bytes over its count of entries).
#[derive(Clone)]
pub struct EntryWeight {
    floor: u64,
}

impl quick_cache::Weighter<String, Arc<Entry>> for EntryWeight {
    fn weight(&self, key: &String, entry: &Arc<Entry>) -> u64 {
        (entry.cached_bytes(key) as u64).max(self.floor)
    }
}

/// Bytes an entry of the entry cache holds besides its key's and its
/// strings' bytes: the [`Entry`] behind its `Arc` (216), the cache's
/// records of it (its slab entry, table slot and share of the record of
/// entries lately evicted: about 140), the allocator's headers of each, and
/// the front end's prepared header values (up to [`PREPARED_BYTES`]).
/// `tests/alloc.rs` checks it against what an entry really takes (803
/// bytes with its key and strings).
pub const ENTRY_FIXED_BYTES: usize = 800;

/// Room the entry cache counts for what the front end keeps in an entry's
/// [`Prepared`] slot (`http::respond` checks its values fit).
pub const PREPARED_BYTES: usize = 400;

/// A string's bytes with the allocator's header (none when empty or absent).
fn text_bytes(text: Option<&str>) -> usize {
    text.map_or(0, |t| if t.is_empty() { 0 } else { t.len() + 16 })
}

impl Entry {
    /// Bytes this entry takes in the entry cache under `key`: what the
    /// cache's weigher counts against `metadata.cache_memory`.
    pub fn cached_bytes(&self, key: &str) -> usize {
        ENTRY_FIXED_BYTES
            + text_bytes(Some(key))
            + text_bytes(self.content_type.as_deref())
            + text_bytes(self.upstream_etag.as_deref())
            + text_bytes(self.upstream_last_modified.as_deref())
            + text_bytes(self.kept_headers.as_deref())
    }
}

/// The entry cache as the hit path builds it (also used by
/// `benches/cache_ops.rs` and `tests/alloc.rs`): at most `max_bytes` of
/// entries by [`Entry::cached_bytes`], and at most `max_entries` however
/// small they are (each weighs at least `max_bytes / max_entries`).
pub fn entry_cache(max_entries: u64, max_bytes: u64) -> EntryCache {
    let floor = (max_bytes / max_entries.max(1)).max(1);
    // The count it is made for: the entries of the average weight (its
    // tables grow as entries come; the count sizes its record of entries
    // lately evicted).
    let expected = max_entries.min(max_bytes / ENTRY_FIXED_BYTES as u64).max(1);
    quick_cache::sync::Cache::with(
        expected as usize,
        max_bytes.max(1),
        EntryWeight { floor },
        foldhash::fast::RandomState::default(),
        Default::default(),
    )
}

/// What every mirror answered last time a path was not found: (status, unix ms).
pub(crate) type NegativeCache = moka::sync::Cache<String, (u16, i64)>;
