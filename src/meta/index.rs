//! The entry index: a compact record of every row, loaded at start-up and
//! kept in step by the writers of rows, so that a hit never queries the
//! database however many entries the cache holds (the entry cache in front
//! of it keeps only the hot ones, with what their responses derive).
//!
//! A record is 30 bytes with its 12-byte key, the key being a 96-bit
//! keyed hash of `remote/path` (two SipHashes with random keys per process:
//! no one can make two keys collide without knowing them, and the chance
//! that two of ten million keys do is below 10⁻¹⁵): the digest as its
//! number in the store's [`DigestTable`] (which holds each digest once, with
//! how many records name it, its size and, packed, where it lies; a row
//! whose size is not its digest's makes a record that says to ask the
//! database), when the body was fetched (48 bits: a time past the year
//! 10000 says to ask the database too), the mirror's `Last-Modified` as
//! unix seconds, and the
//! content type and remote as numbers of small interning tables. The
//! mirror's `ETag` is not kept: an entry built from a record says so
//! (`Entry::from_index`), and a revalidation reads the row for it. The
//! records are kept in shards of [`crate::dense`] tables: chunks of records
//! behind a hash table of their numbers, about 40 bytes a row at any count
//! besides the digest's record. A digest's number is read back under the
//! lock of the shard whose record names it, so it is that digest's still.
//!
//! On SQLite without a cluster the index is **complete** once loaded: the
//! request path takes a key it does not list to have no row (a cold miss
//! reads no row). `mirrorcache import` may still add rows from another
//! process while the server runs: it tells the server through a marker
//! file (`super::other_writers`), which the fill's double check under its registry
//! slot looks at (`MetadataStore::lookup_row`); once it changed, the fill
//! reads the row, and the index is loaded anew. On Postgres (or with Redis) other instances
//! write rows too: the index lists what this instance loaded, wrote or
//! read, an unlisted key is looked up in Redis and the database as before,
//! and Redis's messages drop what another instance changed (a message for
//! everything, as after a Redis outage, clears the index, which refills
//! from lookups).
//!
//! The load runs in the background while the server already answers
//! (`super::lookup`): until it ends the index is not complete, so an
//! unlisted key is read from the database. A writer's change made while it
//! runs is noted ([`Index::begin_load`]), and the loader, whose rows were
//! read earlier, skips every row a change covers: a row deleted or replaced
//! during the load is not brought back.
//!
//! Every change goes through the writers in `metadata`, `memory` and
//! `lifetime` (records
//! added under the purge lock, like the entry cache: see `super::purge`).

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::entry::Entry;
use super::hashing::{layout, BuildIdentity};
use super::names::Names;
use crate::dense::Dense;
use crate::store::{Digest, DigestTable};

mod record;
use record::{from_u32, u32_parts, u48, Facts, Slot, ASK, U48_MAX};
pub use record::{Key, Record};

/// What the index says about a key.
pub enum Found {
    /// The entry, without the mirror's `ETag`.
    Entry(Entry),
    /// No row (only when the index is complete).
    Absent,
    /// The index cannot tell: ask the database.
    Unknown,
}

pub struct Index {
    /// Whether a key the index does not list has no row: set once every row
    /// is loaded, on a database no one else writes.
    complete: AtomicBool,
    /// Whether a load is running (`changed` is then `Some`): read without
    /// the lock by every writer.
    loading: AtomicBool,
    /// What the writers changed since the load began: the loader's rows,
    /// read before, must not undo it.
    changed: Mutex<Option<Changed>>,
    /// `true` when no load runs (what [`Index::loaded`] waits for).
    idle: tokio::sync::watch::Sender<bool>,
    hashers: (
        std::collections::hash_map::RandomState,
        std::collections::hash_map::RandomState,
    ),
    shards: Box<[RwLock<Dense<Slot>>]>,
    content_types: Names,
    remotes: Names,
    /// The digests the records name, each once, with how many records name
    /// it: changed with them, under their shard's lock.
    digests: Arc<DigestTable>,
}

/// What the writers changed while the index loads (see [`Index::load`]).
#[derive(Default)]
struct Changed {
    /// Keys inserted or removed.
    keys: HashSet<Key, BuildIdentity>,
    /// Remotes whose records were dropped.
    remotes: Vec<u16>,
    /// Digests (of a remote, when given) whose records were dropped.
    digests: Vec<(Option<u16>, [u8; 32])>,
    /// Everything was dropped.
    all: bool,
}

impl Changed {
    fn covers(&self, key: &Key, record: &Record) -> bool {
        self.all
            || self.keys.contains(key)
            || self.remotes.contains(&record.facts.remote)
            || self
                .digests
                .iter()
                .any(|(r, d)| *d == record.digest && r.is_none_or(|r| r == record.facts.remote))
    }
}

/// Bytes a record takes in its table, key included (the table adds its
/// number and spare capacity, the digest table the digest's record:
/// `tests/alloc.rs` measures the whole).
pub const RECORD_BYTES: usize = std::mem::size_of::<Slot>();

impl Default for Index {
    fn default() -> Index {
        Index::new()
    }
}

/// A row's fields as the index reads them (borrowed: a load allocates
/// nothing per row but the record).
pub struct Fields<'a> {
    pub digest: Digest,
    pub size: u64,
    pub content_type: Option<&'a str>,
    pub last_modified: Option<&'a str>,
    pub fetched_at_ms: i64,
    /// The row keeps headers (then its entry is read from the row).
    pub kept: bool,
}

impl Index {
    pub fn new() -> Index {
        Index::sharing(0, Arc::default())
    }

    /// An index with room for `expected` records (the rows there are when
    /// it is built, before they are loaded), naming digests in `digests`
    /// (the content store's, which keeps the packs' places there too).
    pub(crate) fn sharing(expected: usize, digests: Arc<DigestTable>) -> Index {
        let (shards, room) = layout(expected);
        // At most a digest a row: a loaded table that never grows.
        digests.reserve(expected);
        Index {
            complete: AtomicBool::new(false),
            loading: AtomicBool::new(false),
            changed: Mutex::new(None),
            idle: tokio::sync::watch::Sender::new(true),
            hashers: Default::default(),
            shards: (0..shards)
                .map(|_| RwLock::new(Dense::with_capacity(if expected == 0 { 0 } else { room })))
                .collect(),
            content_types: Names::default(),
            remotes: Names::default(),
            digests,
        }
    }

    /// Whether an unlisted key has no row.
    pub fn is_complete(&self) -> bool {
        self.complete.load(Ordering::Acquire)
    }

    pub fn set_complete(&self, complete: bool) {
        self.complete.store(complete, Ordering::Release);
    }

    /// Starts a load: until [`Index::end_load`], what the writers change is
    /// noted, and [`Index::load`] skips the rows it covers. Called before
    /// the first request, so no writer runs unnoticed.
    pub fn begin_load(&self) {
        *self.changed.lock().expect("index poisoned") = Some(Changed::default());
        self.loading.store(true, Ordering::Release);
        self.idle.send_replace(false);
    }

    /// Ends the load; the index is then `complete` (unless everything was
    /// dropped meanwhile, which left rows unlisted).
    pub fn end_load(&self, complete: bool) {
        let mut changed = self.changed.lock().expect("index poisoned");
        let all = changed.take().is_some_and(|c| c.all);
        self.loading.store(false, Ordering::Release);
        self.set_complete(complete && !all);
        self.idle.send_replace(true);
    }

    /// Waits until no load runs (tests and benchmarks that count row reads).
    pub async fn loaded(&self) {
        let _ = self.idle.subscribe().wait_for(|idle| *idle).await;
    }

    /// Notes a writer's change while a load runs, before the change is made:
    /// the loader, which checks and inserts under the same lock, either
    /// inserted its older row before (and the change undoes it) or sees the
    /// note (and skips it).
    fn note(&self, change: impl FnOnce(&mut Changed)) {
        if self.loading.load(Ordering::Acquire) {
            if let Some(changed) = self.changed.lock().expect("index poisoned").as_mut() {
                change(changed);
            }
        }
    }

    /// Adds the loader's `rows` (and empties it), but none that a writer
    /// changed since the load began: what a writer did is newer.
    pub fn load(&self, rows: &mut Vec<(Key, Record)>) {
        let changed = self.changed.lock().expect("index poisoned");
        for (key, record) in rows.drain(..) {
            if changed.as_ref().is_some_and(|c| c.covers(&key, &record)) {
                continue;
            }
            self.put(key, record);
        }
    }

    pub fn key(&self, key: &str) -> Key {
        let (a, b) = (self.hashers.0.hash_one(key), self.hashers.1.hash_one(key));
        Key::new(a, b as u32)
    }

    fn shard(&self, key: Key) -> &RwLock<Dense<Slot>> {
        &self.shards[key.of_shard() as usize % self.shards.len()]
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().expect("index poisoned").len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records the row of `key` (`remote/path`) as `entry`.
    pub fn insert(&self, key: &str, entry: &Entry) {
        let hashed = self.key(key);
        let record = self.record_of(key, entry);
        self.note(|c| {
            c.keys.insert(hashed);
        });
        self.put(hashed, record);
    }

    /// The record of `entry` at `key` (`remote/path`).
    fn record_of(&self, key: &str, entry: &Entry) -> Record {
        let remote = key.split('/').next().unwrap_or(key);
        self.record(
            remote,
            &Fields {
                digest: entry.digest,
                size: entry.size,
                content_type: entry.content_type.as_deref(),
                last_modified: entry.upstream_last_modified.as_deref(),
                fetched_at_ms: entry.fetched_at_ms,
                kept: entry.kept_headers.is_some(),
            },
        )
    }

    /// [`Index::insert`] unless the index names other bytes for `key`;
    /// returns whether the record is `entry`'s now.
    pub(crate) fn insert_unless_other(&self, key: &str, entry: &Entry) -> bool {
        let hashed = self.key(key);
        let record = self.record_of(key, entry);
        self.note(|c| {
            c.keys.insert(hashed);
        });
        let mut shard = self.shard(hashed).write().expect("index poisoned");
        let old = shard
            .get(&hashed)
            .map(|s| self.digests.digest(s.digest()).0);
        if old.is_some_and(|d| d.0 != record.digest) {
            return false;
        }
        self.put_in(&mut shard, hashed, &record);
        true
    }

    /// Whether the record of `key` is still the one `entry` was built
    /// from (its bytes, and when they were fetched).
    pub(crate) fn holds(&self, key: &str, entry: &Entry) -> bool {
        let hashed = self.key(key);
        let shard = self.shard(hashed).read().expect("index poisoned");
        shard.get(&hashed).is_some_and(|s| {
            self.digests.digest(s.digest()) == (entry.digest, entry.size)
                && s.facts.fetched_at_ms() == entry.fetched_at_ms
        })
    }

    /// Takes the record of `key` away if it names `digest` (the row it
    /// stood for was deleted); with `None`, only notes the key for a load.
    pub(crate) fn remove_named(&self, key: &str, digest: Option<&Digest>) {
        let hashed = self.key(key);
        self.note(|c| {
            c.keys.insert(hashed);
        });
        let Some(digest) = digest else {
            return;
        };
        let mut shard = self.shard(hashed).write().expect("index poisoned");
        if (shard.get(&hashed)).is_some_and(|s| self.digests.digest(s.digest()).0 == *digest) {
            if let Some(old) = shard.remove(&hashed) {
                self.digests.unname(old.digest());
            }
        }
    }

    /// Puts `record` in its shard, the digests' counts changed with it.
    fn put(&self, key: Key, record: Record) {
        let mut shard = self.shard(key).write().expect("index poisoned");
        self.put_in(&mut shard, key, &record);
    }

    /// Puts `record` in `shard` (its key's, held): its digest named first,
    /// so one the old record named too is not freed in between. A record
    /// whose size is not its digest's (one the table holds from another
    /// row or its place) says to ask the database.
    fn put_in(&self, shard: &mut Dense<Slot>, key: Key, record: &Record) {
        let (number, same_size) = self.digests.name(&record.digest, record.size);
        let mut facts = record.facts;
        if !same_size {
            facts.content_type = ASK;
        }
        let slot = Slot {
            key,
            digest: u32_parts(number),
            facts,
        };
        if let Some(old) = shard.insert(slot) {
            self.digests.unname(old.digest());
        }
    }

    /// Whether some record names `digest`: whether a row references it,
    /// when the index is complete.
    pub fn references(&self, digest: &Digest) -> bool {
        self.digests.is_named(&digest.0)
    }

    /// Bytes of the digests the records name, each counted once: the
    /// rows' `stored_bytes` when the index is complete.
    pub fn stored_bytes(&self) -> u64 {
        self.digests.bytes()
    }

    /// How many digests the records name.
    pub fn digests(&self) -> usize {
        self.digests.named()
    }

    fn remote_number(&self, remote: &str) -> Option<u16> {
        self.remotes.number(remote)
    }

    fn content_type_number(&self, name: &str) -> Option<u16> {
        self.content_types.number(name)
    }

    /// The record of a row of `remote`. One that cannot hold it (a content
    /// type past the table's room, a `Last-Modified` that is not a date,
    /// headers kept with the row: the hub's; a time past 48 bits) says to
    /// ask the database.
    pub fn record(&self, remote: &str, row: &Fields<'_>) -> Record {
        let remote = self.remote_number(remote).unwrap_or(0);
        let exact = || {
            let fetched_fits = u64::try_from(row.fetched_at_ms).is_ok_and(|n| n <= U48_MAX);
            if row.kept || remote == 0 || !fetched_fits {
                return None;
            }
            let content_type = match row.content_type {
                None => 0,
                Some(t) => self.content_type_number(t)?,
            };
            let last_modified_s = match row.last_modified {
                None => 0,
                Some(text) => crate::clock::http_date_secs(text).filter(|&s| s != 0)?,
            };
            (content_type != ASK).then_some((content_type, last_modified_s))
        };
        let (content_type, last_modified_s) = exact().unwrap_or((ASK, 0));
        Record {
            digest: row.digest.0,
            size: row.size,
            facts: Facts {
                fetched_at_ms: u48(row.fetched_at_ms.max(0) as u64),
                last_modified_s: u32_parts(last_modified_s),
                content_type,
                remote,
            },
        }
    }

    /// What the index says about `key`.
    pub fn get(&self, key: &str) -> Found {
        let hashed = self.key(key);
        // The digest read while the shard holds the record naming it.
        let found = {
            let shard = self.shard(hashed).read().expect("index poisoned");
            (shard.get(&hashed)).map(|s| (*s, self.digests.digest(s.digest())))
        };
        let Some((record, (digest, size))) = found else {
            return if self.is_complete() {
                Found::Absent
            } else {
                Found::Unknown
            };
        };
        let record = record.facts;
        let content_type = match record.content_type {
            0 => None,
            ASK => return Found::Unknown,
            n => match self.content_types.name(n) {
                None => return Found::Unknown,
                name => name,
            },
        };
        let last_modified_s = from_u32(record.last_modified_s);
        let last_modified =
            (last_modified_s != 0).then(|| crate::clock::http_date(last_modified_s));
        let mut entry = Entry::new(
            digest,
            size,
            content_type,
            None,
            last_modified,
            record.fetched_at_ms(),
        );
        entry.from_index = true;
        Found::Entry(entry)
    }

    pub fn remove(&self, key: &str) {
        let hashed = self.key(key);
        self.note(|c| {
            c.keys.insert(hashed);
        });
        let mut shard = self.shard(hashed).write().expect("index poisoned");
        if let Some(old) = shard.remove(&hashed) {
            self.digests.unname(old.digest());
        }
    }

    /// Drops every record of `remote`.
    pub(crate) fn remove_remote(&self, remote: &str) {
        // Numbered even if unknown yet: the loader may meet it later.
        let Some(n) = self.remote_number(remote) else {
            return;
        };
        self.note(|c| c.remotes.push(n));
        for shard in self.shards.iter() {
            shard.write().expect("index poisoned").retain(|s| {
                let keep = s.facts.remote != n;
                if !keep {
                    self.digests.unname(s.digest());
                }
                keep
            });
        }
    }

    /// Drops every record of `digest` (of `remote`, when given).
    pub(crate) fn remove_digest(&self, remote: Option<&str>, digest: &Digest) {
        let remote = match remote {
            None => None,
            Some(name) => match self.remote_number(name) {
                Some(n) => Some(n),
                None => return,
            },
        };
        self.note(|c| c.digests.push((remote, digest.0)));
        for shard in self.shards.iter() {
            let mut shard = shard.write().expect("index poisoned");
            // Under the shard's lock: while a record here names the digest,
            // the number is its.
            let Some(number) = self.digests.number(&digest.0) else {
                continue;
            };
            shard.retain(|s| {
                let keep = s.digest() != number || remote.is_some_and(|n| n != s.facts.remote);
                if !keep {
                    self.digests.unname(s.digest());
                }
                keep
            });
        }
    }

    pub fn clear(&self) {
        self.note(|c| c.all = true);
        // Every shard held at once: no record put between two shards'
        // clearing keeps a count the clearing of the counts drops.
        let mut shards: Vec<_> = self
            .shards
            .iter()
            .map(|s| s.write().expect("index poisoned"))
            .collect();
        for shard in &mut shards {
            shard.clear();
        }
        self.digests.unname_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::hashing::SHARDS;

    fn entry(n: u8, last_modified: Option<&str>) -> Entry {
        Entry::new(
            Digest([n; 32]),
            u64::from(n) * 1000,
            Some("application/x-test".into()),
            Some("\"etag\"".into()),
            last_modified.map(str::to_string),
            1_700_000_000_123,
        )
    }

    #[test]
    fn records_give_back_their_entries_and_go_with_their_scope() {
        let index = Index::new();
        index.set_complete(true);
        assert!(matches!(index.get("r/a"), Found::Absent));
        index.insert("r/a", &entry(1, Some("Sun, 06 Nov 1994 08:49:37 GMT")));
        index.insert("r/b", &entry(2, None));
        index.insert("s/a", &entry(1, None));
        let Found::Entry(a) = index.get("r/a") else {
            panic!("r/a is listed")
        };
        assert_eq!(
            (a.digest, a.size, a.fetched_at_ms),
            (Digest([1; 32]), 1000, 1_700_000_000_123)
        );
        assert_eq!(a.content_type.as_deref(), Some("application/x-test"));
        assert_eq!(
            a.upstream_last_modified.as_deref(),
            Some("Sun, 06 Nov 1994 08:49:37 GMT")
        );
        assert!(a.upstream_etag.is_none() && a.from_index);
        // Not a date: listed, and asked of the database.
        index.insert("r/c", &entry(3, Some("yesterday")));
        assert!(matches!(index.get("r/c"), Found::Unknown));
        // A size is the digest table's, in 64 bits.
        let mut huge = entry(4, None);
        huge.size = 1 << 48;
        index.insert("r/huge", &huge);
        assert!(matches!(index.get("r/huge"), Found::Entry(e) if e.size == 1 << 48));
        // Another size for the same bytes: listed, and asked of the database.
        index.insert("r/other-size", &entry(4, None));
        assert!(matches!(index.get("r/other-size"), Found::Unknown));
        index.remove("r/other-size");
        let mut before_1970 = entry(4, None);
        before_1970.fetched_at_ms = -1;
        index.insert("r/old", &before_1970);
        assert!(matches!(index.get("r/old"), Found::Unknown));
        index.remove("r/huge");
        index.remove("r/old");
        index.remove_digest(Some("r"), &Digest([1; 32]));
        assert!(matches!(index.get("r/a"), Found::Absent));
        assert!(matches!(index.get("s/a"), Found::Entry(_)));
        index.remove_remote("r");
        assert!(matches!(index.get("r/b"), Found::Absent));
        assert_eq!(index.len(), 1);
        assert_eq!(RECORD_BYTES, 30);
        // Tables nearly full at start-up, whatever the count.
        for expected in [10_000, 1_000_000, 1 << 20, 5_000_000] {
            let (shards, room) = layout(expected);
            assert!(shards >= SHARDS && shards * room >= expected + expected / 10);
            assert!(
                shards * room < (expected + expected / 10) * 8 / 7 + room,
                "{expected}"
            );
        }
        let partial = Index::new();
        assert!(matches!(partial.get("r/a"), Found::Unknown));
    }

    #[test]
    fn the_loader_brings_back_nothing_a_writer_changed_during_the_load() {
        let index = Index::new();
        index.begin_load();
        // Rows the loader read before the writers ran.
        let keys = ["r/gone", "r/replaced", "r/kept", "s/purged", "r/evicted"];
        let mut rows: Vec<(Key, Record)> = keys
            .iter()
            .zip(1u8..)
            .map(|(key, n)| {
                let fields = Fields {
                    digest: Digest([n; 32]),
                    size: u64::from(n),
                    content_type: Some("text/plain"),
                    last_modified: None,
                    fetched_at_ms: 1,
                    kept: false,
                };
                (index.key(key), index.record(&key[..1], &fields))
            })
            .collect();
        index.remove("r/gone");
        index.insert("r/replaced", &entry(9, None));
        index.remove_remote("s");
        index.remove_digest(None, &Digest([5; 32]));
        assert!(matches!(index.get("r/kept"), Found::Unknown));
        index.load(&mut rows);
        index.end_load(true);
        let digest = |key| match index.get(key) {
            Found::Entry(e) => Some(e.digest.0[0]),
            Found::Absent => None,
            Found::Unknown => panic!("{key}: complete after the load"),
        };
        assert_eq!(digest("r/gone"), None);
        assert_eq!(digest("r/replaced"), Some(9));
        assert_eq!(digest("r/kept"), Some(3));
        assert_eq!(digest("s/purged"), None);
        assert_eq!(digest("r/evicted"), None);
        // The counts are the records': none for a row the loader skipped.
        let named: Vec<u8> = (1..=9)
            .filter(|&n| index.references(&Digest([n; 32])))
            .collect();
        assert_eq!(named, [3, 9]);
        // After the load nothing is noted: a later load (none) or insert is plain.
        index.insert("s/purged", &entry(4, None));
        assert_eq!(digest("s/purged"), Some(4));
    }

    #[test]
    fn a_row_read_before_a_commit_replaced_it_is_not_put_back() {
        let index = Index::new();
        index.insert("r/tag", &entry(5, None));
        // Read as 4 a while ago; the commit of 5 came between: not put back,
        // so 5 stays counted and 4 is not.
        assert!(!index.insert_unless_other("r/tag", &entry(4, None)));
        assert!(index.references(&Digest([5; 32])) && !index.references(&Digest([4; 32])));
        assert!(index.insert_unless_other("r/tag", &entry(5, None)));
        assert!(index.insert_unless_other("r/new", &entry(6, None)));
        // A deletion takes only the record of the bytes its row named.
        index.remove_named("r/tag", Some(&Digest([4; 32])));
        assert!(index.references(&Digest([5; 32])));
        index.remove_named("r/tag", None);
        assert!(index.references(&Digest([5; 32])));
        index.remove_named("r/tag", Some(&Digest([5; 32])));
        assert!(!index.references(&Digest([5; 32])) && index.references(&Digest([6; 32])));
        assert_eq!((index.len(), index.digests()), (1, 1));
    }
}
