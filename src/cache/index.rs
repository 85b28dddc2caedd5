//! The entry index: a compact record of every row, loaded at start-up and
//! kept in step by the writers of rows, so that a hit never queries the
//! database however many entries the cache holds (the entry cache in front
//! of it keeps only the hot ones, with what their responses derive).
//!
//! A record is 56 bytes plus its 16-byte key, the key being a 128-bit
//! keyed hash of `remote/path` (SipHash with two random keys per process:
//! no one can make two keys collide without knowing them): the digest, the
//! size, when the body was fetched, the mirror's `Last-Modified` as unix
//! seconds, and the content type and remote as numbers of small interning
//! tables. The mirror's `ETag` is not kept: an entry built from a record says
//! so (`Entry::from_index`), and a revalidation reads the row for it.
//!
//! A key the index does not list is looked up in the database (a cold
//! miss's one query): on SQLite `mirrorcache import` may have added its row
//! from another process while the server runs (so the index is never marked
//! complete, `set_complete` is for tests). On Postgres other instances write rows too: the index lists
//! what this instance loaded, wrote or read, an unlisted key is looked up in
//! Redis and the database as before, and Redis's messages drop what another
//! instance changed (a message for everything, as after a Redis outage,
//! clears the index, which refills from lookups).
//!
//! Every change goes through the writers in `meta` and `refs` (records
//! added under the purge lock, like the entry cache: see `super::purge`).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, RwLock};

use std::sync::atomic::Ordering;

use super::meta::{db_error, Entry, EntryRow, MetadataStore};
use super::store::Digest;
use crate::error::ProxyError;
use crate::path::ArtifactPath;

/// A row as the index loads it: remote, path, digest, size, content type,
/// `Last-Modified`, fetched at, whether the row keeps headers (1) or not.
type IndexRow = (
    String,
    String,
    String,
    i64,
    Option<String>,
    Option<String>,
    i64,
    i64,
);

impl MetadataStore {
    /// The row of `path` as the database has it (the mirror's `ETag`
    /// included, which the index does not keep), not remembered.
    pub async fn read_row(&self, path: &ArtifactPath) -> Result<Option<Entry>, ProxyError> {
        self.check_available()?;
        self.row_reads.fetch_add(1, Ordering::Relaxed);
        let row: Option<EntryRow> = sqlx::query_as(
            "SELECT digest, size, content_type, upstream_etag, upstream_last_modified, fetched_at, \
             kept_headers FROM entries WHERE remote = $1 AND path = $2",
        )
        .bind(path.remote())
        .bind(path.stored_path())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.failed(e))?;
        self.recovered();
        let Some((digest, size, content_type, etag, last_modified, fetched_at, kept)) = row else {
            return Ok(None);
        };
        let Some(digest) = Digest::from_hex(&digest) else {
            tracing::warn!(
                key = path.key(),
                "metadata row has a malformed digest; treating as a miss"
            );
            return Ok(None);
        };
        let mut entry = Entry::new(
            digest,
            size as u64,
            content_type,
            etag,
            last_modified,
            fetched_at,
        );
        entry.kept_headers = kept;
        Ok(Some(entry))
    }

    /// Rows lookups have read from the database so far.
    pub fn row_reads(&self) -> u64 {
        self.row_reads.load(Ordering::Relaxed)
    }

    /// Loads the entry index with every row (at start-up): from then on a
    /// hit never queries the database. On SQLite, the database this process
    /// alone writes, the index is then complete (an unlisted key has no
    /// row). Returns how many rows it loaded.
    pub async fn load_index(&self) -> Result<usize, ProxyError> {
        use futures_util::TryStreamExt as _;
        let mut rows = sqlx::query_as::<_, IndexRow>(
            "SELECT remote, path, digest, size, content_type, upstream_last_modified, fetched_at, \
             CAST(CASE WHEN kept_headers IS NULL THEN 0 ELSE 1 END AS BIGINT) FROM entries",
        )
        .fetch(&self.pool);
        let mut loaded = 0;
        let mut key = String::new();
        while let Some((
            remote,
            path,
            digest,
            size,
            content_type,
            last_modified,
            fetched_at,
            kept,
        )) = rows.try_next().await.map_err(db_error)?
        {
            let Some(digest) = Digest::from_hex(&digest) else {
                continue;
            };
            key.clear();
            key.push_str(&remote);
            key.push('/');
            key.push_str(&path);
            let mut entry = Entry::new(
                digest,
                size as u64,
                content_type,
                None,
                last_modified,
                fetched_at,
            );
            // Listed to be read from its row (the headers are not loaded).
            entry.kept_headers = (kept != 0).then(String::new);
            self.index.insert(&key, &entry);
            loaded += 1;
        }
        drop(rows);
        // Never complete, not even on SQLite: `mirrorcache import` adds rows
        // from another process while the server runs, so a key the index does
        // not list is looked up in the database (a cold miss's one query); a
        // listed key, every hit, still reads none.
        self.index.set_complete(false);
        Ok(loaded)
    }
}

/// A key: two 64-bit keyed hashes of `remote/path`.
pub type Key = (u64, u64);

/// The content type number of a record the index cannot hold whole (a
/// content-type table full, a `Last-Modified` that is not a date): the key
/// is listed, and its entry read from the database.
const ASK: u16 = u16::MAX;

/// One row, compactly.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    digest: [u8; 32],
    size: u64,
    fetched_at_ms: i64,
    /// Unix seconds of the mirror's `Last-Modified`; 0 for none.
    last_modified_s: u32,
    /// Number in the content-type table; 0 for none.
    content_type: u16,
    remote: u16,
}

/// What the index says about a key.
pub enum Found {
    /// The entry, without the mirror's `ETag`.
    Entry(Entry),
    /// No row (only when the index is complete).
    Absent,
    /// The index cannot tell: ask the database.
    Unknown,
}

/// Interns short strings as numbers (content types, remote names).
#[derive(Default)]
struct Names {
    names: Vec<Arc<str>>,
    numbers: HashMap<Arc<str>, u16>,
}

impl Names {
    /// The number of `name` (from 1), or `None` when the table is full.
    fn number(&mut self, name: &str) -> Option<u16> {
        if let Some(&n) = self.numbers.get(name) {
            return Some(n);
        }
        let n = u16::try_from(self.names.len() + 1).ok()?;
        let name: Arc<str> = Arc::from(name);
        self.names.push(name.clone());
        self.numbers.insert(name, n);
        Some(n)
    }

    fn name(&self, n: u16) -> Option<&Arc<str>> {
        self.names.get(usize::from(n).checked_sub(1)?)
    }
}

/// Hashes a `u128` key by its low half (it is a hash already).
#[derive(Default, Clone, Copy)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().take(8) {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(17) ^ n;
    }
}

#[derive(Default, Clone, Copy)]
struct BuildIdentity;

impl BuildHasher for BuildIdentity {
    type Hasher = Identity;
    fn build_hasher(&self) -> Identity {
        Identity(0)
    }
}

/// The fewest shards.
const SHARDS: usize = 64;

pub struct Index {
    /// Whether a key the index does not list has no row: set once every row
    /// is loaded, on a database no one else writes.
    complete: std::sync::atomic::AtomicBool,
    hashers: (
        std::collections::hash_map::RandomState,
        std::collections::hash_map::RandomState,
    ),
    shards: Box<[RwLock<HashMap<Key, Record, BuildIdentity>>]>,
    content_types: RwLock<Names>,
    remotes: RwLock<Names>,
}

/// Bytes a record takes in its table, key included (the table adds its
/// control byte and spare capacity: BENCHMARKS.md measures the whole).
pub const RECORD_BYTES: usize = std::mem::size_of::<(Key, Record)>();

impl Default for Index {
    fn default() -> Index {
        Index::new()
    }
}

/// Shards and room per shard for `expected` records, with a tenth to
/// spare. A shard's table has a power of two of buckets, filled to 7/8 at
/// most: with a fixed number of shards, a count just past a power of two
/// would leave half of every table empty; the number of shards is chosen
/// instead, so each table is nearly full at start-up.
fn layout(expected: usize) -> (usize, usize) {
    let wanted = expected + expected / 10;
    for k in (4..40u32).rev() {
        let room = (1usize << k) / 8 * 7;
        let shards = wanted.div_ceil(room);
        if shards >= SHARDS {
            return (shards, room);
        }
    }
    (SHARDS, 0)
}

impl Index {
    pub fn new() -> Index {
        Index::with_room(0)
    }

    /// An index with room for `expected` records (the rows there are when
    /// it is built, before they are loaded).
    pub fn with_room(expected: usize) -> Index {
        let (shards, room) = layout(expected);
        Index {
            complete: Default::default(),
            hashers: Default::default(),
            shards: (0..shards)
                .map(|_| {
                    RwLock::new(HashMap::with_capacity_and_hasher(
                        if expected == 0 { 0 } else { room },
                        BuildIdentity,
                    ))
                })
                .collect(),
            content_types: RwLock::default(),
            remotes: RwLock::default(),
        }
    }

    /// Whether an unlisted key has no row.
    pub fn is_complete(&self) -> bool {
        self.complete.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn set_complete(&self, complete: bool) {
        self.complete
            .store(complete, std::sync::atomic::Ordering::Release);
    }

    pub fn key(&self, key: &str) -> Key {
        let (a, b) = (&self.hashers.0, &self.hashers.1);
        (a.hash_one(key), b.hash_one(key))
    }

    fn shard(&self, key: Key) -> &RwLock<HashMap<Key, Record, BuildIdentity>> {
        &self.shards[key.0 as usize % self.shards.len()]
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

    /// Records the row of `key` (`remote/path`) as `entry`. A record that
    /// cannot hold it (a content type past the table's room, a
    /// `Last-Modified` that is not a date) says to ask the database.
    pub fn insert(&self, key: &str, entry: &Entry) {
        let hashed = self.key(key);
        let remote = key.split('/').next().unwrap_or(key);
        let record = self.record(remote, entry).unwrap_or(Record {
            digest: entry.digest.0,
            size: entry.size,
            fetched_at_ms: entry.fetched_at_ms,
            last_modified_s: 0,
            content_type: ASK,
            remote: self.remote_number(remote).unwrap_or(0),
        });
        self.shard(hashed)
            .write()
            .expect("index poisoned")
            .insert(hashed, record);
    }

    fn remote_number(&self, remote: &str) -> Option<u16> {
        let known = self
            .remotes
            .read()
            .expect("index poisoned")
            .numbers
            .get(remote)
            .copied();
        match known {
            Some(n) => Some(n),
            None => self.remotes.write().expect("index poisoned").number(remote),
        }
    }

    fn record(&self, remote: &str, entry: &Entry) -> Option<Record> {
        let content_type = match &entry.content_type {
            None => 0,
            Some(t) => {
                let known = self
                    .content_types
                    .read()
                    .expect("index poisoned")
                    .numbers
                    .get(t.as_str())
                    .copied();
                match known {
                    Some(n) => n,
                    None => self
                        .content_types
                        .write()
                        .expect("index poisoned")
                        .number(t)?,
                }
            }
        };
        // Headers the ecosystem keeps with the row (the hub's) are not in a
        // record: such a key is listed, and its entry read from the row.
        if content_type == ASK || entry.kept_headers.is_some() {
            return None;
        }
        let remote = self.remote_number(remote)?;
        let last_modified_s = match &entry.upstream_last_modified {
            None => 0,
            Some(text) => crate::clock::http_date_secs(text).filter(|&s| s != 0)?,
        };
        Some(Record {
            digest: entry.digest.0,
            size: entry.size,
            fetched_at_ms: entry.fetched_at_ms,
            last_modified_s,
            content_type,
            remote,
        })
    }

    /// What the index says about `key`.
    pub fn get(&self, key: &str) -> Found {
        let hashed = self.key(key);
        let record = self
            .shard(hashed)
            .read()
            .expect("index poisoned")
            .get(&hashed)
            .copied();
        let Some(record) = record else {
            return if self.is_complete() {
                Found::Absent
            } else {
                Found::Unknown
            };
        };
        let content_type = match record.content_type {
            0 => None,
            ASK => return Found::Unknown,
            n => match self.content_types.read().expect("index poisoned").name(n) {
                Some(name) => Some(name.to_string()),
                None => return Found::Unknown,
            },
        };
        let last_modified =
            (record.last_modified_s != 0).then(|| crate::clock::http_date(record.last_modified_s));
        let mut entry = Entry::new(
            Digest(record.digest),
            record.size,
            content_type,
            None,
            last_modified,
            record.fetched_at_ms,
        );
        entry.from_index = true;
        Found::Entry(entry)
    }

    pub fn remove(&self, key: &str) {
        let hashed = self.key(key);
        self.shard(hashed)
            .write()
            .expect("index poisoned")
            .remove(&hashed);
    }

    /// Drops every record of `remote`.
    pub fn remove_remote(&self, remote: &str) {
        let Some(n) = self
            .remotes
            .read()
            .expect("index poisoned")
            .numbers
            .get(remote)
            .copied()
        else {
            return;
        };
        for shard in self.shards.iter() {
            shard
                .write()
                .expect("index poisoned")
                .retain(|_, r| r.remote != n);
        }
    }

    /// Drops every record of `digest` (of `remote`, when given).
    pub fn remove_digest(&self, remote: Option<&str>, digest: &Digest) {
        let remote = match remote {
            None => None,
            Some(name) => match self
                .remotes
                .read()
                .expect("index poisoned")
                .numbers
                .get(name)
            {
                Some(&n) => Some(n),
                None => return,
            },
        };
        for shard in self.shards.iter() {
            shard
                .write()
                .expect("index poisoned")
                .retain(|_, r| r.digest != digest.0 || remote.is_some_and(|n| n != r.remote));
        }
    }

    pub fn clear(&self) {
        for shard in self.shards.iter() {
            shard.write().expect("index poisoned").clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        index.remove_digest(Some("r"), &Digest([1; 32]));
        assert!(matches!(index.get("r/a"), Found::Absent));
        assert!(matches!(index.get("s/a"), Found::Entry(_)));
        index.remove_remote("r");
        assert!(matches!(index.get("r/b"), Found::Absent));
        assert_eq!(index.len(), 1);
        assert_eq!(RECORD_BYTES, 72);
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
}
