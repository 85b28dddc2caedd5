//! [`HotBlobs`]: the in-memory tier of small hot blobs.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use super::digest::{BuildDigestHasher, Digest};

/// The in-memory tier: small hot blobs kept whole, bounded by total bytes
/// (each blob's and [`BLOB_FIXED_BYTES`]). A hit on one is served from
/// memory with no file open, no read and no blocking-pool hop. Keyed by
/// digest, so an entry is never stale.
///
/// A local blob enters on its second open within [`ADMIT_WITHIN_MS`]
/// ([`HotBlobs::wanted`]): one opened now and then is read from the store
/// (and checked) on each open, not inserted only to evict another, as a
/// cache of many more small blobs than the tier holds would do on every
/// random hit (`Cache::open_blob` decides; an S3 object enters on its
/// first open).
pub struct HotBlobs {
    cache: quick_cache::sync::Cache<Digest, Bytes, ByLength, BuildDigestHasher>,
    max_object: u64,
    /// The last open of a blob the tier did not hold, a slot per digest
    /// prefix: the digest's next 32 bits and the unix ms (low 32 bits),
    /// packed in one word (a digest sharing the slot overwrites it, which
    /// only delays an admission).
    opened: Box<[AtomicU64]>,
    /// Taken while a blob is read into the tier (striped by digest): the
    /// first hits of one blob, arriving together, read it once.
    loading: Box<[tokio::sync::Mutex<()>]>,
    /// Blobs put into the tier (each read once, [`HotBlobs::loading`]).
    loads: std::sync::atomic::AtomicU64,
}

/// Bytes a blob in the tier is counted besides its own: the cache's records
/// of it (slab entry, table slot), the shared `Bytes` header and the
/// allocator's headers, with room to spare; `tests/alloc.rs` holds a tier of
/// 1 KiB blobs to its size with them (counted by their lengths alone, a
/// tier held a third more than its size).
pub const BLOB_FIXED_BYTES: u64 = 320;

/// A blob in the tier weighs its length and [`BLOB_FIXED_BYTES`].
#[derive(Clone)]
struct ByLength;

impl quick_cache::Weighter<Digest, Bytes> for ByLength {
    fn weight(&self, _: &Digest, bytes: &Bytes) -> u64 {
        bytes.len() as u64 + BLOB_FIXED_BYTES
    }
}

/// The count of blobs the tier is made for, by its size: as many of 16 KiB.
/// It sizes the cache's record of blobs lately evicted and keeps its shards
/// at 32 blobs or more; its tables grow as blobs come.
const TYPICAL_BLOB: u64 = 16 << 10;

/// The tier's shards at most. The cache splits its size among its shards
/// and refuses a blob heavier than a shard's share, so there are fewer
/// when the largest blob needs it (`HotBlobs::new`).
const MAX_SHARDS: u64 = 64;

/// Stripes of [`HotBlobs::loading`].
const LOADING_STRIPES: usize = 256;

/// A blob the tier does not hold enters it when it is opened again within
/// this many milliseconds: from its second hit for a blob hit 100 times a
/// second or more (as an entry enters the entry cache).
pub const ADMIT_WITHIN_MS: u32 = 10;

/// Slots of [`HotBlobs::opened`] (8 bytes each, 32 KiB).
const OPENED_SLOTS: usize = 4096;

impl HotBlobs {
    /// `total` bytes at most, objects of at most `max_object` bytes; `total`
    /// 0 turns the tier off.
    pub fn new(total: u64, max_object: u64) -> HotBlobs {
        // Each shard holds two of the largest blobs, or the tier is one
        // shard and its largest blob a third of it.
        let largest = max_object + BLOB_FIXED_BYTES;
        let room = total / (2 * largest);
        let shards = match room {
            0 => 1,
            n => 1 << n.min(MAX_SHARDS).ilog2(),
        };
        let max_object = match room {
            0 => max_object.min((total / 3).saturating_sub(BLOB_FIXED_BYTES)),
            _ => max_object,
        };
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity((total / TYPICAL_BLOB).max(1) as usize)
            .weight_capacity(total.max(1))
            .shards(shards as usize)
            .build()
            .expect("both capacities are set");
        HotBlobs {
            cache: quick_cache::sync::Cache::with_options(
                options,
                ByLength,
                BuildDigestHasher::default(),
                Default::default(),
            ),
            max_object,
            opened: (0..OPENED_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            loading: (0..LOADING_STRIPES).map(|_| Default::default()).collect(),
            loads: Default::default(),
        }
    }

    /// Held while `digest` is read into the tier: whoever waited for it
    /// finds the blob there.
    pub async fn loading(&self, digest: &Digest) -> tokio::sync::MutexGuard<'_, ()> {
        self.loading[digest.0[0] as usize % LOADING_STRIPES]
            .lock()
            .await
    }

    /// How many blobs were put into the tier (for tests).
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    pub fn get(&self, digest: &Digest) -> Option<Bytes> {
        self.cache.get(digest)
    }

    /// Whether a blob of `size` bytes belongs in memory.
    pub fn admits(&self, size: u64) -> bool {
        size <= self.max_object
    }

    /// Notes an open of `digest` (not in the tier) at `now_ms`; true when
    /// the last one came within [`ADMIT_WITHIN_MS`]: the blob belongs in
    /// memory now.
    pub fn wanted(&self, digest: &Digest, now_ms: i64) -> bool {
        let bits = u64::from_le_bytes(digest.0[..8].try_into().expect("8 bytes"));
        let slot = &self.opened[bits as usize % OPENED_SLOTS];
        let (tag, now) = (bits >> 32, now_ms as u32);
        let last = slot.swap(tag << 32 | u64::from(now), Ordering::Relaxed);
        last >> 32 == tag && now.wrapping_sub(last as u32) <= ADMIT_WITHIN_MS
    }

    pub fn insert(&self, digest: Digest, bytes: Bytes) {
        self.loads.fetch_add(1, Ordering::Relaxed);
        self.cache.insert(digest, bytes);
    }

    pub fn remove(&self, digest: &Digest) {
        self.cache.remove(digest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache splits the tier among shards and refuses a blob heavier
    /// than a shard's share: the largest blob the tier admits is held
    /// whatever the tier's size, and a tier smaller than two of them
    /// admits smaller blobs only.
    #[test]
    fn the_largest_blob_admitted_is_held_in_a_tier_of_any_size() {
        for (total, max_object) in [(48 << 20, 1 << 20), (4 << 20, 1 << 20), (1 << 20, 1 << 20)] {
            let tier = HotBlobs::new(total, max_object);
            let largest = (0..=max_object).rev().find(|&n| tier.admits(n)).unwrap();
            assert!(largest >= max_object.min(total / 4), "{total}: {largest}");
            for i in 0..3u8 {
                let digest = Digest([i; 32]);
                tier.insert(digest, Bytes::from(vec![i; largest as usize]));
                assert!(
                    tier.get(&digest).is_some(),
                    "{total}: blob {i} of {largest} bytes"
                );
            }
        }
        assert!(!HotBlobs::new(0, 1 << 20).admits(1));
    }

    /// A blob is wanted in memory on its second open within
    /// [`ADMIT_WITHIN_MS`], counted from the open before; another digest
    /// in its slot takes its note.
    #[test]
    fn a_blob_is_wanted_on_its_second_open_within_the_window() {
        let tier = HotBlobs::new(1 << 20, 1 << 10);
        let digest = |first: u8, tag: u8| {
            let mut d = [0u8; 32];
            (d[0], d[4]) = (first, tag);
            Digest(d)
        };
        let (a, b) = (digest(1, 1), digest(2, 1));
        let at = 1_000_000;
        assert!(!tier.wanted(&a, at), "first open");
        assert!(tier.wanted(&a, at + 10), "second, within the window");
        assert!(!tier.wanted(&a, at + 21), "11 ms after the last");
        assert!(!tier.wanted(&b, at + 22), "another slot, first open");
        // The same slot (a digest equal to `a` in its first 4 bytes).
        let c = digest(1, 2);
        assert!(!tier.wanted(&c, at + 23), "another digest in a's slot");
        assert!(!tier.wanted(&a, at + 24), "a's note was taken");
        assert!(tier.wanted(&a, at + 25));
        // The unix ms wrap in 32 bits.
        let wrap = (u32::MAX as i64) - 3;
        assert!(!tier.wanted(&b, wrap));
        assert!(tier.wanted(&b, wrap + 8));
    }
}
