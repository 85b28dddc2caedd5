//! How many records of the entry index name each digest, so that "does any
//! row still reference this blob?" (asked by every release of a blob and
//! by every batch of commits) is answered from memory where the index is
//! complete (`MetadataStore::digest_referenced`), and the embedded
//! database keeps no index on `entries.digest`: its random inserts dirtied
//! a page of the write-ahead log a row (BENCHMARKS.md).
//!
//! A count is kept under the digest's first 48 bits, in 8 bytes (the
//! prefix and a 16-bit count; counts past that in a side table). Two
//! digests sharing a prefix share a count: each then looks referenced while
//! the other is, so a blob is kept, never deleted early (at a million
//! digests the chance that any two share one is about 0.2 %).
//!
//! The index changes a count under the lock of the record's own shard,
//! with the record, so the counts are the records' at every moment a
//! reader holding the digest's lock (`Cache::digest_lock`) can observe.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The first 48 bits of a digest.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Prefix([u8; 6]);

impl Prefix {
    fn of(digest: &[u8; 32]) -> Prefix {
        let mut p = [0u8; 6];
        p.copy_from_slice(&digest[..6]);
        Prefix(p)
    }
}

impl Hash for Prefix {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut n = [0u8; 8];
        n[..6].copy_from_slice(&self.0);
        state.write_u64(u64::from_le_bytes(n));
    }
}

/// Spreads a prefix (already uniform in its 48 bits) over all 64, so the
/// table's tag bits, its top seven, differ too.
#[derive(Default, Clone, Copy)]
struct Spread(u64);

impl Hasher for Spread {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Default, Clone, Copy)]
struct BuildSpread;

impl BuildHasher for BuildSpread {
    type Hasher = Spread;
    fn build_hasher(&self) -> Spread {
        Spread(0)
    }
}

/// Bytes a count takes in its table (the table adds its control byte and
/// spare capacity).
pub const COUNT_BYTES: usize = std::mem::size_of::<(Prefix, u16)>();

pub(crate) struct References {
    shards: Box<[Mutex<HashMap<Prefix, u16, BuildSpread>>]>,
    /// What a count holds past `u16::MAX` (one digest under that many
    /// names).
    many: Mutex<HashMap<Prefix, u64>>,
    /// The sizes of the digests counted, each once: what the rows
    /// reference, as the database's `stored_bytes` sums it. Added when a
    /// count starts, taken off when it ends (two digests sharing a prefix
    /// count once, by the size of the one that came first, and are taken
    /// off by the size of the one that goes last).
    bytes: AtomicU64,
}

impl References {
    /// Room for about `expected` digests, in as many shards as keep each
    /// table nearly full (the entry index's [`super::hashing::layout`]).
    pub(crate) fn with_room(expected: usize) -> References {
        let (shards, room) = super::hashing::layout(expected);
        References {
            shards: (0..shards)
                .map(|_| {
                    let room = if expected == 0 { 0 } else { room };
                    Mutex::new(HashMap::with_capacity_and_hasher(room, BuildSpread))
                })
                .collect(),
            many: Mutex::default(),
            bytes: AtomicU64::new(0),
        }
    }

    /// The shard of a digest, by two bytes outside its prefix.
    fn shard(&self, digest: &[u8; 32]) -> &Mutex<HashMap<Prefix, u16, BuildSpread>> {
        let n = usize::from(u16::from_le_bytes([digest[6], digest[7]]));
        &self.shards[n % self.shards.len()]
    }

    /// One more record names `digest`, of `size` bytes.
    pub(crate) fn add(&self, digest: &[u8; 32], size: u64) {
        let prefix = Prefix::of(digest);
        let mut shard = self.shard(digest).lock().expect("references poisoned");
        let count = shard.entry(prefix).or_insert(0);
        if *count == 0 {
            self.bytes.fetch_add(size, Ordering::Relaxed);
        }
        if *count == u16::MAX {
            *self
                .many
                .lock()
                .expect("references poisoned")
                .entry(prefix)
                .or_insert(0) += 1;
        } else {
            *count += 1;
        }
    }

    /// One record fewer names `digest`, of `size` bytes.
    pub(crate) fn sub(&self, digest: &[u8; 32], size: u64) {
        let prefix = Prefix::of(digest);
        let mut shard = self.shard(digest).lock().expect("references poisoned");
        let Some(count) = shard.get_mut(&prefix) else {
            debug_assert!(false, "a digest no record named");
            return;
        };
        if *count == u16::MAX {
            let mut many = self.many.lock().expect("references poisoned");
            if let Some(more) = many.get_mut(&prefix) {
                *more -= 1;
                if *more == 0 {
                    many.remove(&prefix);
                }
                return;
            }
        }
        *count -= 1;
        if *count == 0 {
            shard.remove(&prefix);
            let _ = (self.bytes).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_sub(size))
            });
        }
    }

    /// `old` no longer named by a record, `new` named instead (each a
    /// digest and its size).
    pub(crate) fn replace(&self, old: Option<(&[u8; 32], u64)>, new: (&[u8; 32], u64)) {
        if old.is_some_and(|(d, _)| d == new.0) {
            return;
        }
        self.add(new.0, new.1);
        if let Some((old, size)) = old {
            self.sub(old, size);
        }
    }

    /// The sizes of the digests counted, each once.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Whether some record names `digest` (or a digest with its prefix).
    pub(crate) fn any(&self, digest: &[u8; 32]) -> bool {
        self.shard(digest)
            .lock()
            .expect("references poisoned")
            .contains_key(&Prefix::of(digest))
    }

    /// No record names anything (the caller holds every record's shard).
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            shard.lock().expect("references poisoned").clear();
        }
        self.many.lock().expect("references poisoned").clear();
        self.bytes.store(0, Ordering::Relaxed);
    }

    /// How many prefixes are counted.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().expect("references poisoned").len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: u8, tail: u8) -> [u8; 32] {
        let mut d = [tail; 32];
        d[0] = n;
        d
    }

    #[test]
    fn a_digest_is_referenced_while_a_record_names_it() {
        let refs = References::with_room(10);
        let (a, b) = (digest(1, 0), digest(2, 0));
        assert!(!refs.any(&a));
        refs.add(&a, 10);
        refs.add(&a, 10);
        assert_eq!(refs.bytes(), 10);
        refs.replace(Some((&a, 10)), (&b, 300));
        assert!(refs.any(&a) && refs.any(&b));
        assert_eq!(refs.bytes(), 310);
        refs.replace(Some((&b, 300)), (&b, 300));
        refs.sub(&a, 10);
        assert!(!refs.any(&a) && refs.any(&b));
        assert_eq!((refs.len(), refs.bytes()), (1, 300));
        refs.clear();
        assert!(!refs.any(&b));
        assert_eq!(refs.bytes(), 0);
        assert_eq!(COUNT_BYTES, 8);
    }

    #[test]
    fn counts_past_sixteen_bits_and_shared_prefixes_keep_a_blob_not_lose_it() {
        let refs = References::with_room(0);
        let a = digest(7, 1);
        let n = u32::from(u16::MAX) + 5;
        for _ in 0..n {
            refs.add(&a, 7);
        }
        for _ in 1..n {
            refs.sub(&a, 7);
        }
        assert!(refs.any(&a));
        assert_eq!(refs.bytes(), 7);
        refs.sub(&a, 7);
        assert!(!refs.any(&a));
        assert_eq!(refs.bytes(), 0);
        // Two digests with one prefix (bytes past the sixth differ): one
        // count, so each stays referenced while the other is.
        let x = digest(9, 3);
        let mut y2 = x;
        y2[10] = 0xff;
        refs.add(&x, 5);
        refs.add(&y2, 5);
        refs.sub(&x, 5);
        assert!(refs.any(&x) && refs.any(&y2));
        refs.sub(&y2, 5);
        assert!(!refs.any(&x));
    }
}
