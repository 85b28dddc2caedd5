//! The entry index's record: a row in 30 bytes, every field in 16-bit
//! parts so that a record is aligned to 2 and takes no padding.

use crate::dense::Keyed;

/// A key: 96 bits of two keyed hashes of `remote/path`; the first 64
/// place it in its shard's table, the last 32 pick the shard. In 16-bit
/// parts, as every field of a record: a record is aligned to 2, so 30
/// bytes take 30.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key([u16; 6]);

/// Two 16-bit parts as one number.
pub(super) fn from_u32(n: [u16; 2]) -> u32 {
    u32::from(n[0]) | (u32::from(n[1]) << 16)
}

pub(super) fn u32_parts(n: u32) -> [u16; 2] {
    [n as u16, (n >> 16) as u16]
}

impl Key {
    /// The key of the two hashes: 64 bits that place it in its shard's
    /// table, 32 that pick the shard.
    pub(super) fn new(in_shard: u64, shard: u32) -> Key {
        let [a, b, c, d] = [0, 16, 32, 48].map(|s| (in_shard >> s) as u16);
        let [e, f] = u32_parts(shard);
        Key([a, b, c, d, e, f])
    }

    pub(super) fn in_shard(&self) -> u64 {
        let [a, b, c, d, ..] = self.0;
        u64::from(a) | (u64::from(b) << 16) | (u64::from(c) << 32) | (u64::from(d) << 48)
    }

    pub(super) fn of_shard(&self) -> u32 {
        from_u32([self.0[4], self.0[5]])
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.in_shard());
    }
}

/// The latest time a record holds (48 bits).
pub(super) const U48_MAX: u64 = (1 << 48) - 1;

/// `n` in 48 bits, saturated.
pub(super) fn u48(n: u64) -> [u16; 3] {
    let n = n.min(U48_MAX);
    [n as u16, (n >> 16) as u16, (n >> 32) as u16]
}

pub(super) fn from_u48(n: [u16; 3]) -> u64 {
    u64::from(n[0]) | (u64::from(n[1]) << 16) | (u64::from(n[2]) << 32)
}

/// The content type number of a record the index cannot hold whole (a
/// content-type table full, a `Last-Modified` that is not a date, headers
/// kept with the row, an unknown remote, a time past 48 bits, a size that
/// is not its digest's): the key is listed, and its entry read from the
/// database.
pub(super) const ASK: u16 = u16::MAX;

/// What a record says of its row besides the digest and its size (the
/// [`DigestTable`](crate::store::DigestTable) holds those): 14 bytes, aligned to 2.
#[derive(Debug, Clone, Copy)]
pub(super) struct Facts {
    /// Unix ms.
    pub(super) fetched_at_ms: [u16; 3],
    /// Unix seconds of the mirror's `Last-Modified`; 0 for none.
    pub(super) last_modified_s: [u16; 2],
    /// Number in the content-type table; 0 for none.
    pub(super) content_type: u16,
    pub(super) remote: u16,
}

impl Facts {
    pub(super) fn fetched_at_ms(&self) -> i64 {
        from_u48(self.fetched_at_ms) as i64
    }
}

/// One row, compactly, as the loader reads it (a [`Slot`] holds it with the
/// digest's number in place of the digest and its size).
#[derive(Debug, Clone, Copy)]
pub struct Record {
    pub(super) digest: [u8; 32],
    pub(super) size: u64,
    pub(super) facts: Facts,
}

/// A record with its key, as a shard's table holds it: 30 bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    pub(super) key: Key,
    /// The digest's number in the [`DigestTable`](crate::store::DigestTable).
    pub(super) digest: [u16; 2],
    pub(super) facts: Facts,
}

impl Slot {
    pub(super) fn digest(&self) -> u32 {
        from_u32(self.digest)
    }
}

impl Keyed for Slot {
    type Key = Key;
    fn key(&self) -> &Key {
        &self.key
    }
    fn hash(key: &Key) -> u64 {
        key.in_shard()
    }
}
