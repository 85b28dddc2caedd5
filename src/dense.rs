//! A table of fixed-size records keyed by a part of themselves, laid out for
//! memory: the records in chunks of [`CHUNK_BYTES`] (a table that grows never
//! holds two copies of its records, nor room for as many again, as a hash
//! map's doubling does), a hash table of their 4-byte numbers in front.
//!
//! A million 64-byte records take 64 MB and about 10 MB of numbers here,
//! where a hash map holding them whole takes between 73 and 146 MB by how
//! full its buckets are, and half as much again while it doubles (the
//! entry index's tables: BENCHMARKS.md, "Peak RSS").
//!
//! A removal moves the last record into the freed slot, so the records stay
//! packed from number 0 and a table that shrinks frees its chunks.

use hashbrown::HashTable;

/// Bytes of a chunk's records at most: 14 KiB, jemalloc's largest small
/// size class. A larger block is a "large" one, which jemalloc starts at a
/// random offset within a page of padding (`cache_oblivious`), so its last
/// page is touched too: 16 KiB chunks held 20 (BENCHMARKS.md, "Peak RSS").
/// 477 of the entry index's records, so a shard's partly filled last chunk
/// wastes little too.
pub(crate) const CHUNK_BYTES: usize = 14 * 1024;

/// A record of a [`Dense`] table.
pub(crate) trait Keyed {
    type Key: Eq;
    fn key(&self) -> &Self::Key;
    /// The hash of `key`: the keys here are hashes or digests already, so
    /// this takes bits of them.
    fn hash(key: &Self::Key) -> u64;
}

pub(crate) struct Dense<T> {
    chunks: Vec<Vec<T>>,
    numbers: HashTable<u32>,
}

impl<T> Default for Dense<T> {
    fn default() -> Dense<T> {
        Dense {
            chunks: Vec::new(),
            numbers: HashTable::new(),
        }
    }
}

/// Records a chunk holds.
const fn per_chunk<T>() -> usize {
    let n = CHUNK_BYTES / std::mem::size_of::<T>();
    if n == 0 {
        1
    } else {
        n
    }
}

fn at<T>(chunks: &[Vec<T>], n: u32) -> &T {
    let per = per_chunk::<T>();
    &chunks[n as usize / per][n as usize % per]
}

fn at_mut<T>(chunks: &mut [Vec<T>], n: u32) -> &mut T {
    let per = per_chunk::<T>();
    &mut chunks[n as usize / per][n as usize % per]
}

impl<T: Keyed> Dense<T> {
    /// A table whose numbers have room for `records` before they grow (the
    /// chunks come as records do).
    pub(crate) fn with_capacity(records: usize) -> Dense<T> {
        Dense {
            chunks: Vec::with_capacity(records.div_ceil(per_chunk::<T>())),
            numbers: HashTable::with_capacity(records),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.numbers.len()
    }

    pub(crate) fn get(&self, key: &T::Key) -> Option<&T> {
        let chunks = &self.chunks;
        let n = self
            .numbers
            .find(T::hash(key), |&n| at(chunks, n).key() == key)?;
        Some(at(chunks, *n))
    }

    /// Puts `record` in, in place of the record of its key, which it returns.
    pub(crate) fn insert(&mut self, record: T) -> Option<T> {
        let hash = T::hash(record.key());
        let chunks = &mut self.chunks;
        if let Some(&n) = self
            .numbers
            .find(hash, |&n| at(chunks, n).key() == record.key())
        {
            return Some(std::mem::replace(at_mut(chunks, n), record));
        }
        let n = u32::try_from(self.numbers.len()).expect("a table holds fewer than 2^32 records");
        match chunks.last_mut() {
            Some(last) if last.len() < per_chunk::<T>() => last.push(record),
            _ => {
                let mut chunk = Vec::with_capacity(per_chunk::<T>());
                chunk.push(record);
                chunks.push(chunk);
            }
        }
        let chunks = &self.chunks;
        self.numbers
            .insert_unique(hash, n, |&m| T::hash(at(chunks, m).key()));
        None
    }

    pub(crate) fn remove(&mut self, key: &T::Key) -> Option<T> {
        let chunks = &self.chunks;
        let entry = self
            .numbers
            .find_entry(T::hash(key), |&n| at(chunks, n).key() == key)
            .ok()?;
        let (n, _) = entry.remove();
        Some(self.take(n))
    }

    /// Takes record `n` out, its number already gone from the table: the
    /// last record moves into its slot.
    fn take(&mut self, n: u32) -> T {
        let last = u32::try_from(self.numbers.len()).expect("numbered below 2^32");
        let chunk = self.chunks.last_mut().expect("a record to take");
        let tail = chunk.pop().expect("chunks are never empty");
        if chunk.is_empty() {
            self.chunks.pop();
        }
        if n == last {
            return tail;
        }
        let slot = self
            .numbers
            .find_mut(T::hash(tail.key()), |&m| m == last)
            .expect("the last record is numbered");
        *slot = n;
        std::mem::replace(at_mut(&mut self.chunks, n), tail)
    }

    /// Keeps the records `keep` says to.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        // From the end: a record moved into a freed slot was seen already.
        for n in (0..self.numbers.len() as u32).rev() {
            let record = at(&self.chunks, n);
            if keep(record) {
                continue;
            }
            let hash = T::hash(record.key());
            match self.numbers.find_entry(hash, |&m| m == n) {
                Ok(entry) => {
                    entry.remove();
                }
                Err(_) => unreachable!("every record is numbered"),
            }
            self.take(n);
        }
    }

    /// Empties the table and gives its memory back.
    pub(crate) fn clear(&mut self) {
        *self = Dense::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// 256 bytes: 56 records a chunk, so the keys below span dozens.
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct R(u64, u32, [u64; 30]);

    impl Keyed for R {
        type Key = u64;
        fn key(&self) -> &u64 {
            &self.0
        }
        fn hash(key: &u64) -> u64 {
            // Few distinct hashes: many keys share one, as a probe must
            // tell them apart by the key.
            key % 7
        }
    }

    #[test]
    fn it_holds_what_a_hash_map_holds_through_inserts_removals_and_retains() {
        let mut rng = crate::test_rng::XorShift(0x9E37_79B9_7F4A_7C15);
        let mut dense = Dense::with_capacity(10);
        let mut map = HashMap::new();
        for step in 0..20_000u32 {
            let key = rng.below(3000);
            match rng.below(10) {
                0..=5 => assert_eq!(
                    dense.insert(R(key, step, [0; 30])).map(|r| r.1),
                    map.insert(key, step)
                ),
                6..=8 => assert_eq!(dense.remove(&key).map(|r| r.1), map.remove(&key)),
                _ => {
                    let cut = rng.below(5);
                    dense.retain(|r| r.0 % 5 != cut);
                    map.retain(|k, _| k % 5 != cut);
                }
            }
            assert_eq!(dense.len(), map.len());
            if step % 1000 == 0 {
                for key in 0..3000 {
                    assert_eq!(dense.get(&key).map(|r| r.1), map.get(&key).copied());
                }
            }
        }
        assert_eq!(per_chunk::<R>(), 56);
        // Records packed from 0: chunks freed as the table shrinks.
        let keys: Vec<u64> = map.keys().copied().collect();
        for key in keys {
            dense.remove(&key);
        }
        assert!(dense.len() == 0 && dense.chunks.is_empty());
        dense.insert(R(1, 1, [0; 30]));
        dense.clear();
        assert!(dense.get(&1).is_none());
    }
}
