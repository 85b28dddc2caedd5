//! [`Cache`]: what the façade holds (the store's bytes, the rows, the
//! commit queue, the [`Locks`] the invariant "never a row without its blob"
//! rests on), and its size.

use std::sync::Arc;

use super::commit_queue::Commits;
use super::evictor::Evictor;
use super::locks::Locks;
use crate::error::ProxyError;
use crate::meta::MetadataStore;
use crate::metrics::Metrics;
use crate::store::{BlobStore, Budget, ContentStore, HotBlobs};

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
    /// The striped locks the invariant rests on, and the size accounting's.
    pub(crate) locks: Locks,
    /// The group commit's queue and what it has in flight (see
    /// [`super::commit`]).
    pub commits: Commits,
    pub metrics: Arc<Metrics>,
}

impl Cache {
    /// Whether a body of `size` bytes is small enough for the in-memory tier
    /// (a fill holds such a body back until it is verified).
    pub fn is_small(&self, size: u64) -> bool {
        self.hot.admits(size)
    }

    /// Bytes of committed blobs: each digest the metadata references, once,
    /// and the dead bytes of packs not yet compacted.
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

    /// How many blobs were read into the in-memory tier (for tests).
    pub fn memory_loads(&self) -> u64 {
        self.hot.loads()
    }

    /// `storage.max_size`.
    pub fn max_size(&self) -> u64 {
        self.budget.max()
    }

    /// Sets the committed count from the database, the source of truth: at
    /// start-up, and by every eviction round (which also picks up what other
    /// instances sharing the database committed and deleted).
    pub async fn rederive_size(&self) -> Result<u64, ProxyError> {
        let _exclusive = self.locks.accounting.write().await;
        // What the rows reference, plus what packs hold that nothing
        // references any more, until compacted: the bytes on disk.
        let bytes = self.meta.stored_bytes().await? + self.blobs.dead_bytes();
        self.budget.set_committed(bytes);
        Ok(bytes)
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
