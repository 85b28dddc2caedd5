//! [`Cache`]: what the façade holds (the store's bytes, the rows, the
//! commit queue) and the striped locks the invariant "never a row without
//! its blob" rests on.

use std::sync::{Arc, OnceLock};

use tokio::sync::{Mutex, MutexGuard, RwLock};

use super::commit_queue::Queue;
use super::evictor::Evictor;
use crate::error::ProxyError;
use crate::meta::cluster::Cluster;
use crate::meta::MetadataStore;
use crate::metrics::Metrics;
use crate::path::ArtifactPath;
use crate::store::{BlobStore, Budget, ContentStore, Digest, HotBlobs};

pub struct Cache {
    /// The local store: fills in progress (and blobs, by default).
    pub(crate) store: Arc<ContentStore>,
    /// Where committed blobs live (local disk or S3).
    pub(crate) blobs: Arc<dyn BlobStore>,
    /// Small hot blobs in memory.
    pub(crate) hot: HotBlobs,
    pub meta: MetadataStore,
    pub evictor: Evictor,
    /// Committed and in-progress bytes against `storage.max_size`.
    pub(crate) budget: Arc<Budget>,
    /// One lock per stripe of digests, held across a commit and its row, and
    /// across a reference check and the deletion. Tokio mutexes: they are
    /// held across awaits (the upload, the queries).
    pub(crate) digest_locks: Box<[Mutex<()>]>,
    /// One lock per stripe of paths, held by a commit from reading the row
    /// it replaces to writing its own, so two commits of one path cannot
    /// both miss the other's digest (and leave it unreleased). Taken before
    /// the digest's lock.
    pub(crate) path_locks: Box<[Mutex<()>]>,
    /// Held shared by every change of the committed count, exclusively while
    /// it is re-derived from the database, so no change is lost or counted
    /// twice by a re-derivation.
    pub(crate) accounting: RwLock<()>,
    /// Redis coordination, when `[redis]` is configured.
    pub(crate) cluster: OnceLock<Arc<Cluster>>,
    /// The group commit's queue (see [`super::commit`]).
    pub(crate) commits: Queue,
    /// Taken by the committer for each batch (and by a test to hold it).
    pub(crate) commit_hold: Mutex<()>,
    /// Digests whose blobs are durable and whose rows are not written yet
    /// (see `super::commit`), with how many batches have each and the blob's size:
    /// changed under the digest's lock; a release keeps such a blob.
    pub(crate) committing: std::sync::Mutex<std::collections::HashMap<Digest, (usize, u64)>>,
    pub metrics: Arc<Metrics>,
}

/// Stripes of the path lock: enough that unrelated commits rarely wait on
/// each other, few enough to cost nothing.
pub(super) const PATH_STRIPES: usize = 64;
/// Stripes of the digest lock, one per value of a digest's first two
/// bytes: the blobs of one batch are committed while the previous batch
/// holds the locks of its digests (`commit`), and two batches of 128
/// digests share a stripe one time in five (with 64 stripes, always).
/// About 3 MiB.
pub(super) const DIGEST_STRIPES: usize = 1 << 16;

impl Cache {
    /// Whether a body of `size` bytes is small enough for the in-memory tier
    /// (a fill holds such a body back until it is verified).
    pub fn is_small(&self, size: u64) -> bool {
        self.hot.admits(size)
    }

    /// Redis coordination, when configured.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.get()
    }

    /// Bytes of committed blobs: each digest the metadata references, once.
    pub fn size(&self) -> u64 {
        self.budget.committed()
    }

    /// Committed bytes plus the bytes of fills in progress.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Bytes of blobs on the local disk store (0 when blobs live in S3),
    /// counted by walking it. Blocking: for tools and tests.
    pub fn local_size(&self) -> std::io::Result<u64> {
        self.store.bytes_on_disk()
    }

    /// `storage.max_size`.
    pub fn max_size(&self) -> u64 {
        self.budget.max()
    }

    /// Sets the committed count from the database, the source of truth: at
    /// start-up, and by every eviction round (which also picks up what other
    /// instances sharing the database committed and deleted).
    pub async fn rederive_size(&self) -> Result<u64, ProxyError> {
        let _exclusive = self.accounting.write().await;
        let bytes = self.meta.stored_bytes().await?;
        self.budget.set_committed(bytes);
        Ok(bytes)
    }

    pub(crate) fn path_stripe(&self, path: &ArtifactPath) -> usize {
        self.key_stripe(path.key())
    }

    pub(crate) fn key_stripe(&self, key: &str) -> usize {
        // FNV-1a: any spread will do.
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        hash as usize % self.path_locks.len()
    }

    pub(crate) fn digest_stripe(&self, digest: &Digest) -> usize {
        u16::from_le_bytes([digest.0[0], digest.0[1]]) as usize % self.digest_locks.len()
    }

    pub(crate) fn digest_lock(&self, digest: &Digest) -> &Mutex<()> {
        &self.digest_locks[self.digest_stripe(digest)]
    }

    /// The paths' locks of `stripes` ([`Cache::path_stripe`]), in the one
    /// order every holder of several takes them (see [`lock_stripes`]).
    pub(crate) async fn lock_path_stripes(&self, stripes: Vec<usize>) -> Vec<MutexGuard<'_, ()>> {
        lock_stripes(&self.path_locks, stripes).await
    }

    /// The digests' locks of `digests`, in the one order (see [`lock_stripes`]).
    pub(crate) async fn lock_digests<'d>(
        &self,
        digests: impl IntoIterator<Item = &'d Digest>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let stripes = digests.into_iter().map(|d| self.digest_stripe(d)).collect();
        lock_stripes(&self.digest_locks, stripes).await
    }

    /// Runs `work` on the local store on this thread: for a file operation
    /// of a few microseconds on the page cache (creating a small fill's
    /// temp file), which costs less than the hop to the blocking pool and
    /// back.
    pub fn store_now<T>(
        &self,
        work: impl FnOnce(&ContentStore) -> std::io::Result<T>,
    ) -> Result<T, ProxyError> {
        work(&self.store).map_err(|e| ProxyError::Store(e.to_string()))
    }

    /// Runs blocking store work (creating and writing temp files) off the
    /// async threads.
    pub async fn store_blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&ContentStore) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, ProxyError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| ProxyError::Store(e.to_string()))?
            .map_err(|e| ProxyError::Store(e.to_string()))
    }
}

/// The locks of `stripes` in `locks`, each once, in ascending order: the one
/// order every holder of several takes them in, so no two deadlock.
async fn lock_stripes(locks: &[Mutex<()>], mut stripes: Vec<usize>) -> Vec<MutexGuard<'_, ()>> {
    stripes.sort_unstable();
    stripes.dedup();
    let mut guards = Vec::with_capacity(stripes.len());
    for stripe in stripes {
        guards.push(locks[stripe].lock().await);
    }
    guards
}
