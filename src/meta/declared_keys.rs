//! The keys of the `declared` table in memory, so that the cold miss of an
//! artifact nothing declares (a generic or go file before its pin on first
//! use) asks the database nothing.
//!
//! A set of 64-bit hashes of `(remote, artifact)`, loaded at start-up beside
//! the entry index and only ever added to: a key is added before its row is
//! written, and the key of a deleted row stays (a lookup of it asks the
//! database, which says there is none; a collision costs the same). So the
//! set holds every key the database has, and once loaded a key it lacks
//! has no row — where the index may be complete (SQLite without Redis) and
//! while no other process wrote (see `super::other_writers`).

use std::collections::HashSet;
use std::hash::BuildHasher as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use super::hashing::BuildIdentity;

/// Shards of the set: two threads adding rarely take one lock.
const SHARDS: usize = 16;

/// Bytes a key takes in its table (the table adds its control byte and
/// spare capacity).
pub const KEY_BYTES: usize = std::mem::size_of::<u64>();

pub struct DeclaredKeys {
    /// Whether a key not in the set has no row.
    complete: AtomicBool,
    hasher: std::collections::hash_map::RandomState,
    shards: Box<[RwLock<HashSet<u64, BuildIdentity>>]>,
}

impl Default for DeclaredKeys {
    fn default() -> DeclaredKeys {
        DeclaredKeys {
            complete: AtomicBool::new(false),
            hasher: Default::default(),
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
        }
    }
}

impl DeclaredKeys {
    fn hash(&self, remote: &str, artifact: &str) -> u64 {
        self.hasher.hash_one((remote, artifact))
    }

    fn shard(&self, hash: u64) -> &RwLock<HashSet<u64, BuildIdentity>> {
        // Bits the table's buckets and control bytes do not use.
        &self.shards[(hash >> 32) as usize % SHARDS]
    }

    /// Before a row of `artifact` is written.
    pub fn add(&self, remote: &str, artifact: &str) {
        let hash = self.hash(remote, artifact);
        let shard = self.shard(hash);
        if !shard
            .read()
            .expect("declared keys poisoned")
            .contains(&hash)
        {
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
            .contains(&hash)
    }

    pub fn is_complete(&self) -> bool {
        self.complete.load(Ordering::Acquire)
    }

    pub fn set_complete(&self, complete: bool) {
        self.complete.store(complete, Ordering::Release);
    }

    /// Keys in the set.
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
}
