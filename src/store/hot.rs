//! [`HotBlobs`]: the in-memory tier of small hot blobs.

use bytes::Bytes;

use super::digest::Digest;

/// The in-memory tier: small hot blobs kept whole, bounded by total bytes
/// (each blob's and [`BLOB_FIXED_BYTES`]). A hit on one is served from
/// memory with no file open, no read and no blocking-pool hop. Keyed by
/// digest, so an entry is never stale.
pub struct HotBlobs {
    cache: moka::sync::Cache<Digest, Bytes>,
    max_object: u64,
    /// Taken while a blob is read into the tier (striped by digest): the
    /// first hits of one blob, arriving together, read it once.
    loading: Box<[tokio::sync::Mutex<()>]>,
    /// Blobs put into the tier (each read once, [`HotBlobs::loading`]).
    loads: std::sync::atomic::AtomicU64,
}

/// Bytes a blob in the tier takes besides its own: moka's records of it
/// (bucket, value, policy record, deque node, the digest's `Arc`), the
/// shared `Bytes` header and the allocator's headers, about 300 bytes; a
/// tier of 1 KiB blobs counted by their lengths alone held a third more
/// than its size.
pub const BLOB_FIXED_BYTES: u64 = 320;

/// Stripes of [`HotBlobs::loading`].
const LOADING_STRIPES: usize = 256;

impl HotBlobs {
    /// `total` bytes at most, objects of at most `max_object` bytes; `total`
    /// 0 turns the tier off.
    pub fn new(total: u64, max_object: u64) -> HotBlobs {
        HotBlobs {
            cache: moka::sync::Cache::builder()
                .weigher(|_: &Digest, bytes: &Bytes| {
                    u32::try_from(bytes.len() as u64 + BLOB_FIXED_BYTES).unwrap_or(u32::MAX)
                })
                .max_capacity(total)
                .build(),
            max_object: if total == 0 { 0 } else { max_object },
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
        self.loads.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn get(&self, digest: &Digest) -> Option<Bytes> {
        self.cache.get(digest)
    }

    /// Whether a blob of `size` bytes belongs in memory.
    pub fn admits(&self, size: u64) -> bool {
        size <= self.max_object
    }

    pub fn insert(&self, digest: Digest, bytes: Bytes) {
        self.loads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.cache.insert(digest, bytes);
    }

    /// Applies pending insertions and evictions now (for tests that
    /// measure what the tier holds).
    pub fn run_pending_tasks(&self) {
        self.cache.run_pending_tasks();
    }

    pub fn remove(&self, digest: &Digest) {
        self.cache.invalidate(digest);
    }
}
