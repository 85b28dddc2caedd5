//! The keys of the `declared` table in memory, so that the cold miss of an
//! artifact nothing declares (a generic or go file before its pin on first
//! use) asks the database nothing.
//!
//! A growable Bloom filter of `(remote, artifact)`, loaded at start-up
//! beside the entry index and only ever added to: a key is added before its
//! row is written, and the key of a deleted row stays (a lookup of it asks
//! the database, which says there is none). A filter never says "absent"
//! of a key it was given, so once loaded a key it calls absent has no row —
//! where the index may be complete (SQLite without Redis) and while no
//! other process wrote (see `super::other_writers`). It calls one key in
//! [`FALSE_POSITIVES`] present that is not; that cold miss reads the
//! database, as every miss did before the set existed.
//!
//! At a million keys the filters take about 3.5 MB (`tests/alloc.rs`),
//! where a hash set of their 64-bit hashes took 17–19 MB (BENCHMARKS.md,
//! "Peak RSS").

use std::hash::BuildHasher as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use growable_bloom_filter::GrowableBloom;

/// Shards of the filter: two threads adding rarely take one lock.
const SHARDS: usize = 16;

/// The share of absent keys a shard calls present, at most.
pub const FALSE_POSITIVES: f64 = 1e-4;

/// Keys a shard's first filter holds; each next one holds [`GROWTH`] times
/// as many.
const FIRST_CAPACITY: usize = 4096;
const GROWTH: usize = 4;

pub struct DeclaredKeys {
    /// Whether a key the filter calls absent has no row.
    complete: AtomicBool,
    hasher: std::collections::hash_map::RandomState,
    shards: Box<[RwLock<GrowableBloom>]>,
}

impl Default for DeclaredKeys {
    fn default() -> DeclaredKeys {
        DeclaredKeys {
            complete: AtomicBool::new(false),
            hasher: Default::default(),
            shards: (0..SHARDS)
                .map(|_| {
                    RwLock::new(
                        growable_bloom_filter::GrowableBloomBuilder::new()
                            .estimated_insertions(FIRST_CAPACITY)
                            .desired_error_ratio(FALSE_POSITIVES)
                            .growth_factor(GROWTH)
                            .build(),
                    )
                })
                .collect(),
        }
    }
}

impl DeclaredKeys {
    /// A keyed hash of the key: no one who does not know the process's
    /// keys can choose artifacts that fill one shard or one filter's bits.
    fn hash(&self, remote: &str, artifact: &str) -> u64 {
        self.hasher.hash_one((remote, artifact))
    }

    fn shard(&self, hash: u64) -> &RwLock<GrowableBloom> {
        &self.shards[(hash >> 60) as usize % SHARDS]
    }

    /// Before a row of `artifact` is written.
    pub fn add(&self, remote: &str, artifact: &str) {
        let hash = self.hash(remote, artifact);
        let shard = self.shard(hash);
        if !shard.read().expect("declared keys poisoned").contains(hash) {
            shard.write().expect("declared keys poisoned").insert(hash);
        }
    }

    /// Whether the database surely has no row of `artifact`.
    pub(crate) fn surely_absent(&self, remote: &str, artifact: &str) -> bool {
        if !self.is_complete() {
            return false;
        }
        let hash = self.hash(remote, artifact);
        !self
            .shard(hash)
            .read()
            .expect("declared keys poisoned")
            .contains(hash)
    }

    pub fn is_complete(&self) -> bool {
        self.complete.load(Ordering::Acquire)
    }

    pub fn set_complete(&self, complete: bool) {
        self.complete.store(complete, Ordering::Release);
    }

    /// Keys added (a key the filter already called present is not counted
    /// again).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().expect("declared keys poisoned").len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_surely_absent_only_once_complete_and_never_once_added() {
        let keys = DeclaredKeys::default();
        assert!(!keys.surely_absent("r", "a"), "not loaded: unknown");
        keys.set_complete(true);
        assert!(keys.surely_absent("r", "a"));
        keys.add("r", "a");
        assert!(!keys.surely_absent("r", "a"));
        assert!(keys.surely_absent("other", "a"), "keyed by remote too");
        keys.add("r", "a");
        assert_eq!(keys.len(), 1);
    }

    #[test]
    fn a_million_keys_are_all_present_and_few_absent_ones_are() {
        let keys = DeclaredKeys::default();
        keys.set_complete(true);
        let n = 1_000_000;
        for i in 0..n {
            keys.add("r", &format!("a/{i}"));
        }
        for i in 0..n {
            assert!(!keys.surely_absent("r", &format!("a/{i}")), "{i} lost");
        }
        let trials = 200_000;
        let present = (0..trials)
            .filter(|i| !keys.surely_absent("r", &format!("b/{i}")))
            .count();
        // 1e-4 a shard's first filter, less each next one: the sum stays
        // under 1e-3.
        assert!(
            present < trials / 500,
            "{present} of {trials} called present"
        );
        // Their size: `tests/alloc.rs`.
    }
}
