//! [`Memory`]: what memory holds of the rows: entries put in the index and the entry
//! cache only while no purge or deletion came after what read or wrote them,
//! and forgotten for a purge's scope under its generation's lock (see
//! [`super::purge`]).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::cluster::{self, Cluster};
use super::declared_keys::DeclaredKeys;
use super::entry::{entry_cache, Entry, EntryCache, NegativeCache};
use super::index::Index;
use super::other_writers::Others;
use super::purge::{Purges, Scope, Ticket};
use super::touched::Touched;
use crate::path::ArtifactPath;
use crate::store::{Digest, DigestTable};

/// How soon a second hit on a key served from the index puts its entry in
/// the entry cache ([`Memory::promote`]).
pub const PROMOTE_WITHIN_MS: i64 = 10;

pub struct Memory {
    /// Entries by `remote/path`, in front of the database.
    pub(crate) cache: EntryCache,
    /// Remembered "not found" answers.
    pub(crate) negative: NegativeCache,
    /// Redis, when instances share state: a second-level entry cache and the
    /// channel that keeps every instance's `cache` coherent.
    pub(crate) cluster: OnceLock<Arc<Cluster>>,
    /// The purge generations that keep what began before a purge from
    /// showing after it (see [`super::purge`]).
    pub purges: Purges,
    /// Every row, compactly, once loaded (`load_index`; see `super::index`).
    pub index: Index,
    /// Hits on entries served from the index (see [`super::lookup`]).
    pub(crate) touched: Touched,
    /// The keys of the `declared` table (see `super::declared_keys`).
    pub declared_keys: DeclaredKeys,
    /// Other processes' writes (see `super::other_writers`).
    pub others: Arc<Others>,
}

impl Memory {
    /// Room for `cache_entries` entries of at most `cache_memory` bytes
    /// in all, and an index sized for `rows`, naming digests in `digests`;
    /// `file`, the SQLite file other processes may write.
    pub(crate) fn new(
        cache_entries: u64,
        cache_memory: u64,
        rows: usize,
        digests: Arc<DigestTable>,
        file: Option<PathBuf>,
    ) -> Memory {
        Memory {
            cache: entry_cache(cache_entries, cache_memory),
            // Kept a day at most: long enough to answer a known 404 while every
            // mirror is down, short enough not to matter for memory.
            negative: moka::sync::Cache::builder()
                .max_capacity(cache_entries)
                .time_to_live(Duration::from_secs(24 * 3600))
                .build(),
            cluster: OnceLock::new(),
            purges: Purges::default(),
            index: Index::sharing(rows, digests),
            touched: Touched::new(cache_entries),
            declared_keys: Default::default(),
            others: Arc::new(Others::new(file)),
        }
    }

    /// Redis coordination, when configured.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.get()
    }

    /// Shares entries and invalidations with other instances through Redis.
    pub fn attach_cluster(&self, cluster: Arc<Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// Drops this instance's in-memory knowledge of `key` (or of everything,
    /// for `cluster::ALL`): what another instance changed; or, for a purge
    /// message, takes the purge's generation here too.
    pub fn invalidate_local(&self, key: &str) {
        if let Some((from, scope)) = cluster::purge_scope(key) {
            // Our own purge took its generations already.
            if self.cluster.get().is_none_or(|c| c.instance() != from) {
                self.purge_memory(&scope);
            }
            return;
        }
        // A complete index is this process's own database's: what other
        // instances change is not in it.
        let index = !self.index.is_complete();
        if key == cluster::ALL {
            if index {
                self.index.clear();
            }
            self.cache.clear();
            self.negative.invalidate_all();
        } else {
            if index {
                self.index.remove(key);
            }
            self.cache.remove(key);
            self.negative.invalidate(key);
        }
    }

    pub(crate) async fn shared_changed(&self, key: &str, entry: Option<&Entry>) {
        if let Some(cluster) = self.cluster.get() {
            cluster.changed(key, entry).await;
        }
    }

    /// Takes a purge generation for `scope` and forgets what memory holds
    /// of it (entries, remembered 404s), under the generation's lock.
    pub fn purge_memory(&self, scope: &Scope) -> u64 {
        self.purges.purge(scope, || match scope {
            Scope::Key(key) => {
                self.index.remove(key);
                self.cache.remove(key);
                self.negative.invalidate(key);
            }
            Scope::All => {
                self.index.clear();
                self.cache.clear();
                self.negative.invalidate_all();
            }
            Scope::Remote(remote) => {
                self.index.remove_remote(remote);
                self.cache.retain(|key, _| !scope.covers(key));
                for (key, _) in self.negative.iter() {
                    if scope.covers(&key) {
                        self.negative.invalidate(key.as_str());
                    }
                }
            }
        })
    }

    /// Puts `entry`, the row just written (a commit's, under its locks),
    /// in memory for `path` unless a purge covering it came after
    /// `ticket`; returns whether it did. It goes in the index; in the entry
    /// cache only in place of an entry held for the key (a revalidated hot
    /// entry): a fresh row enters it on its hits ([`Memory::promote`]), so
    /// a run of misses never read again does not fill it.
    pub(crate) fn remember(&self, path: &ArtifactPath, entry: &Arc<Entry>, ticket: Ticket) -> bool {
        self.purges.if_current(path.key(), ticket, || {
            self.index.insert(path.key(), entry);
            if self.cache.contains_key(path.key()) {
                self.cache.insert(path.key().to_string(), entry.clone());
            }
        })
    }

    /// Puts `entry`, built from the index for a hit on `path`, in the
    /// entry cache if the index still names the row it was built from,
    /// checked under the purge lock: a purge or deletion of the key since
    /// took the record (and a row committed again has another fetch time).
    fn promote(&self, path: &ArtifactPath, entry: &Entry) {
        let key = path.key();
        let mut held = entry.clone();
        held.held = true;
        let held = Arc::new(held);
        self.purges.under_lock(|| {
            if self.index.holds(key, &held) {
                self.cache.insert(key.to_string(), held);
            }
        });
    }

    /// [`MetadataStore::remember`] for a row read (or revalidated) a while
    /// ago: its record goes in only where the index names the same bytes
    /// for the key, or none, so a commit that replaced the row since is
    /// not undone (the index's digest counts must name the rows': a record
    /// put back for old bytes would take the new bytes' count down).
    pub(crate) fn remember_read(
        &self,
        path: &ArtifactPath,
        entry: &Arc<Entry>,
        ticket: Ticket,
    ) -> bool {
        self.purges.if_read_current(path.key(), ticket, || {
            if self.index.insert_unless_other(path.key(), entry) {
                self.cache.insert(path.key().to_string(), entry.clone());
            }
        })
    }

    /// Drops from memory the row of `key` just deleted (its record only if
    /// it names `digest`, and its cached entry), taking a deletion
    /// generation so a read of the row from before is not remembered after.
    pub(crate) fn forget_deleted(&self, key: &str, digest: Option<&Digest>) {
        self.purges.deleted(Some(key), || {
            self.index.remove_named(key, digest);
            self.cache.remove(key);
        });
    }

    /// Whether memory (the entry index, the declared keys) may say a row is
    /// absent as far as other processes go (see `super::other_writers`): when one
    /// wrote, both are marked incomplete until loaded anew.
    pub(crate) fn memory_trusted(&self) -> bool {
        self.others.none_wrote(|| {
            self.index.set_complete(false);
            self.declared_keys.set_complete(false);
        })
    }

    /// Whether the entry index answers digest questions: it is complete
    /// and no other process wrote. Then its counts are the rows' (the
    /// embedded database keeps no index on `entries.digest`, so asking it
    /// reads every row).
    pub(crate) fn digests_in_memory(&self) -> bool {
        self.index.is_complete() && self.memory_trusted()
    }

    /// The entry for `path` if it is in memory: no Redis, no query.
    pub fn lookup_in_memory(&self, path: &ArtifactPath) -> Option<Arc<Entry>> {
        self.cache.get(path.key())
    }

    /// Notes a hit on `entry` (of `path`) now, for the evictor's flush of
    /// access times and hit counts: in the entry itself when the entry
    /// cache holds it, else in `touched`. An entry built from the index
    /// goes into the entry cache when its key was hit within the last
    /// [`PROMOTE_WITHIN_MS`] ([`Memory::promote`]): a hot key is served
    /// from the entry cache from its second hit, while keys hit now and
    /// then are served from their records without an insertion and the
    /// eviction it causes.
    pub fn touch(&self, path: &ArtifactPath, entry: &Entry, now_ms: i64) {
        if entry.from_index && !entry.held {
            let before = self.touched.note(path.key(), now_ms);
            if before.is_some_and(|last| last >= now_ms - PROMOTE_WITHIN_MS) {
                self.promote(path, entry);
            }
        } else {
            entry.touch(now_ms);
        }
    }

    /// Hits on `key` not flushed to its row yet, and the last one's time:
    /// those its held entry counted and those `touched` did.
    pub(crate) fn unflushed(&self, key: &str) -> (u64, i64) {
        let (held, held_at) = self.cache.get(key).map_or((0, 0), |e| e.unflushed());
        let (noted, noted_at) = self.touched.pending(key);
        (held + noted, held_at.max(noted_at))
    }

    /// Remembers that every mirror answered `status` (404/410) for `path`
    /// now, unless a purge of it came after `ticket`.
    pub fn remember_absent(&self, path: &ArtifactPath, status: u16, now_ms: i64, ticket: Ticket) {
        self.purges.if_current(path.key(), ticket, || {
            self.negative
                .insert(path.key().to_string(), (status, now_ms));
        });
    }

    /// The last "not found" answer for `path`, if one is remembered: (status, unix ms).
    pub fn absent(&self, path: &ArtifactPath) -> Option<(u16, i64)> {
        self.negative.get(path.key())
    }

    pub fn forget_absent(&self, path: &ArtifactPath) {
        self.negative.invalidate(path.key());
    }
}
