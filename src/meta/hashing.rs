//! The identity hasher of keys that are hashes already, and the shard
//! layout of the entry index's shards.

use std::hash::{BuildHasher, Hasher};

/// Hashes a `u128` key by its low half (it is a hash already).
#[derive(Default, Clone, Copy)]
pub(crate) struct Identity(u64);

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
pub(crate) struct BuildIdentity;

impl BuildHasher for BuildIdentity {
    type Hasher = Identity;
    fn build_hasher(&self) -> Identity {
        Identity(0)
    }
}

/// The fewest shards.
pub(crate) const SHARDS: usize = 64;

/// Shards and room per shard for `expected` records, with a tenth to
/// spare. A shard's table has a power of two of buckets, filled to 7/8 at
/// most: with a fixed number of shards, a count just past a power of two
/// would leave half of every table empty; the number of shards is chosen
/// instead, so each table is nearly full at start-up.
pub(crate) fn layout(expected: usize) -> (usize, usize) {
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
