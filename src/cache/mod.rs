//! The cache room: everything that remembers bytes and what they are.
//!
//! [`Cache`] owns the local content store ([`store`]), where committed blobs
//! live ([`blobs`]: local disk or S3, with an in-memory tier for small hot
//! blobs), the metadata ([`meta`]: SQLite/Postgres behind an in-memory entry
//! cache), the cross-instance coordination ([`cluster`], Redis) and the
//! evictor ([`evict`]); [`verify`] re-hashes the store offline. The rest of
//! the proxy asks the `Cache` to open, commit and release blobs and never sees
//! a file path.
//!
//! **Invariant:** this room knows nothing of HTTP requests, remotes' mirrors
//! or the fill; it imports only `kind` (declared digests and where an
//! artifact's rows may be), `config`, `error`, `path`, `clock` and `metrics`.
//!
//! **Invariant: never a row without its blob.** A blob is committed and its
//! row recorded (a batch of them, [`commit`]), and a blob's references checked
//! and the blob deleted ([`Cache::release_blob`]), each under the lock of
//! the digest's stripe: a release cannot fall between a commit's rename and
//! its row. The same lock makes the size accounting exact ([`budget`]).

mod alias;
pub mod blobs;
pub mod budget;
pub mod cluster;
pub mod commit;
mod commit_sql;
mod declared;
pub mod declared_keys;
pub mod evict;
pub mod index;
mod layout;
pub mod listing;
mod lookup;
pub mod meta;
mod others;
mod owner;
mod prepared;
pub mod prune;
pub mod purge;
pub mod references;
mod refs;
mod spool;
mod sql;
pub(crate) mod sqlite;
pub mod store;
pub mod verify;

use std::sync::{Arc, OnceLock};

use anyhow::Context;
use tokio::sync::{Mutex, MutexGuard, RwLock};

use crate::config::Config;
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::path::ArtifactPath;
pub use blobs::{Blob, BlobStore, HotBlobs};
use blobs::{LocalBlobs, S3Blobs};
pub use budget::Budget;
use cluster::Cluster;
pub use commit::{CommitSlot, Committing};
pub use declared::Learned;
pub use evict::Evictor;
pub use meta::{Entry, MetadataStore};
pub use prepared::Prepared;
pub use purge::{Scope, Ticket};
pub use spool::FillBody;
pub use store::{ContentStore, Digest, TempBlob};

pub struct Cache {
    /// The local store: fills in progress (and blobs, by default).
    store: Arc<ContentStore>,
    /// Where committed blobs live (local disk or S3).
    blobs: Arc<dyn BlobStore>,
    /// Small hot blobs in memory.
    hot: HotBlobs,
    pub meta: MetadataStore,
    pub evictor: Evictor,
    /// Committed and in-progress bytes against `storage.max_size`.
    budget: Arc<Budget>,
    /// One lock per stripe of digests, held across a commit and its row, and
    /// across a reference check and the deletion. Tokio mutexes: they are
    /// held across awaits (the upload, the queries).
    digest_locks: Box<[Mutex<()>]>,
    /// One lock per stripe of paths, held by a commit from reading the row
    /// it replaces to writing its own, so two commits of one path cannot
    /// both miss the other's digest (and leave it unreleased). Taken before
    /// the digest's lock.
    path_locks: Box<[Mutex<()>]>,
    /// Held shared by every change of the committed count, exclusively while
    /// it is re-derived from the database, so no change is lost or counted
    /// twice by a re-derivation.
    accounting: RwLock<()>,
    /// Redis coordination, when `[redis]` is configured.
    cluster: OnceLock<Arc<Cluster>>,
    /// The group commit's queue (see [`commit`]).
    commits: commit::Queue,
    /// Taken by the committer for each batch (and by a test to hold it).
    commit_hold: Mutex<()>,
    /// Digests whose blobs are durable and whose rows are not written yet
    /// (see `commit`), with how many batches have each and the blob's size:
    /// changed under the digest's lock; a release keeps such a blob.
    committing: std::sync::Mutex<std::collections::HashMap<Digest, (usize, u64)>>,
    pub metrics: Arc<Metrics>,
}

/// Stripes of the path lock: enough that unrelated commits rarely wait on
/// each other, few enough to cost nothing.
const PATH_STRIPES: usize = 64;
/// Stripes of the digest lock, one per value of a digest's first two
/// bytes: the blobs of one batch are committed while the previous batch
/// holds the locks of its digests (`commit`), and two batches of 128
/// digests share a stripe one time in five (with 64 stripes, always).
/// About 3 MiB.
const DIGEST_STRIPES: usize = 1 << 16;

/// Rows above which `Cache::open` counts the stored bytes in the background.
const DEFER_ABOVE_ROWS: usize = 100_000;

/// Loads memory (the entry index, the declared keys) while the server
/// answers (from the database, meanwhile), then marks it complete if it
/// may be; where it may, loads it again each time another process wrote
/// the database (see `others`).
async fn load_index(cache: Arc<Cache>, complete: bool, size_first: bool) {
    let started = std::time::Instant::now();
    if size_first {
        match cache.rederive_size().await {
            Ok(bytes) => tracing::info!(bytes, took = ?started.elapsed(), "stored bytes counted"),
            Err(error) => {
                tracing::warn!(%error, "could not count the stored bytes; the evictor will")
            }
        }
        cache.budget.wake_if_over();
    }
    load_memory(&cache, complete, started).await;
    if !complete {
        return;
    }
    let (others, cache) = (cache.meta.others.clone(), Arc::downgrade(&cache));
    loop {
        others.reloads().await;
        let Some(cache) = cache.upgrade() else {
            return;
        };
        // Begun before the rows are read: what the server writes meanwhile
        // is noted (see `index`).
        cache.meta.index.begin_load();
        load_memory(&cache, true, std::time::Instant::now()).await;
    }
}

/// One load of memory (the caller began the index's). Complete only if no
/// other process's write was seen since it began: that write may be in a
/// range already read.
async fn load_memory(cache: &Cache, complete: bool, started: std::time::Instant) {
    let meta = &cache.meta;
    let generation = meta.others.generation();
    let (entries, keys) = futures_util::join!(meta.load_index(), meta.load_declared_keys());
    let complete = complete && generation == meta.others.generation();
    match entries {
        Ok(entries) => {
            meta.index.end_load(complete);
            tracing::info!(entries, took = ?started.elapsed(), complete, "entry index loaded");
        }
        Err(error) => {
            // Unlisted keys keep being read from the database.
            meta.index.end_load(false);
            tracing::warn!(%error, "could not load the entry index; looking rows up instead");
        }
    }
    match keys {
        Ok(keys) => {
            meta.declared_keys.set_complete(complete);
            tracing::info!(keys, complete, "declared keys loaded");
        }
        Err(error) => {
            tracing::warn!(%error, "could not load the declared keys; looking them up instead")
        }
    }
}

impl Cache {
    /// Opens the store (cleaning temp files of dead processes), connects and
    /// migrates the metadata database, opens the blob store, joins the
    /// cluster when `[redis]` is set, and starts the evictor.
    pub async fn open(config: &Config, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Cache>> {
        let store_path = config.storage.path.clone();
        let budget = Arc::new(Budget::new(config.storage.max_size));
        let store_budget = budget.clone();
        let store =
            tokio::task::spawn_blocking(move || ContentStore::open(&store_path, store_budget))
                .await?
                .with_context(|| {
                    format!(
                        "opening the content store at {}",
                        config.storage.path.display()
                    )
                })?;
        let meta = MetadataStore::connect(&config.metadata.url, config.metadata.cache_entries)
            .await
            .with_context(|| {
                format!(
                    "opening the metadata database {}",
                    redact_url(&config.metadata.url)
                )
            })?;
        // Complete once loaded only where no other instance writes rows the
        // server must see at once (another process's import tells the
        // server: `others`).
        let sqlite = config.metadata.url.starts_with("sqlite:");
        let complete = sqlite && config.redis.is_none();
        if sqlite {
            meta.index_digests(!complete)
                .await
                .context("indexing the metadata database's digests")?;
        }
        // Before the cache is shared: no writer can change a row unnoticed
        // by the load (see `index`).
        meta.index.begin_load();
        let store = Arc::new(store);
        let blobs: Arc<dyn BlobStore> = match &config.storage.s3 {
            None => Arc::new(LocalBlobs(store.clone())),
            Some(s3) => Arc::new(
                S3Blobs::connect(s3)
                    .await
                    .with_context(|| format!("opening the blob store {}", s3.url))?,
            ),
        };
        metrics.store_max_bytes.set(config.storage.max_size as i64);
        // As many commits may wait as fills may run.
        let (commits, queued) = commit::queue(config.server.max_fills);
        let cache = Arc::new(Cache {
            store,
            blobs,
            hot: HotBlobs::new(
                config.storage.memory_cache_size,
                config.storage.memory_object_max,
            ),
            meta,
            evictor: Evictor::new(budget.clone()),
            budget,
            digest_locks: (0..DIGEST_STRIPES).map(|_| Mutex::new(())).collect(),
            path_locks: (0..PATH_STRIPES).map(|_| Mutex::new(())).collect(),
            accounting: RwLock::new(()),
            cluster: OnceLock::new(),
            commits,
            commit_hold: Mutex::new(()),
            committing: Default::default(),
            metrics,
        });
        tokio::spawn(commit::run(Arc::downgrade(&cache), queued));
        // Summing the blobs' sizes reads every row (about 0.6 s a million
        // on SQLite): with many rows it is done beside the index's load,
        // and until then the store counts only what commits add (fills are
        // not held back by the limit meanwhile; commits wait while the sum
        // runs, which holds the count's lock, then it is exact).
        let deferred = cache.meta.rows_at_start > DEFER_ABOVE_ROWS;
        if !deferred {
            cache
                .rederive_size()
                .await
                .context("counting the stored bytes in the metadata database")?;
        }
        if let Some(redis) = &config.redis {
            let weak = Arc::downgrade(&cache);
            let cluster = Cluster::start(redis, cache.metrics.redis_errors.clone(), move |key| {
                if let Some(cache) = weak.upgrade() {
                    cache.meta.invalidate_local(key);
                }
            })
            .context("configuring redis")?;
            cache.meta.attach_cluster(cluster.clone());
            let _ = cache.cluster.set(cluster);
        }
        tokio::spawn(load_index(cache.clone(), complete, deferred));
        let declaring: Arc<[_]> = (config.remotes.iter())
            .filter(|r| r.kind.digests().is_some())
            .cloned()
            .collect();
        tokio::spawn(prune::run(Arc::downgrade(&cache), declaring));
        tokio::spawn(Evictor::run(Arc::downgrade(&cache)));
        cache.budget.wake_if_over();
        Ok(cache)
    }

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

    pub(super) fn path_stripe(&self, path: &ArtifactPath) -> usize {
        self.key_stripe(path.key())
    }

    pub(super) fn key_stripe(&self, key: &str) -> usize {
        // FNV-1a: any spread will do.
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        hash as usize % self.path_locks.len()
    }

    fn digest_stripe(&self, digest: &Digest) -> usize {
        u16::from_le_bytes([digest.0[0], digest.0[1]]) as usize % self.digest_locks.len()
    }

    fn digest_lock(&self, digest: &Digest) -> &Mutex<()> {
        &self.digest_locks[self.digest_stripe(digest)]
    }

    /// The paths' locks of `stripes` ([`Cache::path_stripe`]), in the one
    /// order every holder of several takes them (see [`lock_stripes`]).
    pub(super) async fn lock_path_stripes(&self, stripes: Vec<usize>) -> Vec<MutexGuard<'_, ()>> {
        lock_stripes(&self.path_locks, stripes).await
    }

    /// The digests' locks of `digests`, in the one order (see [`lock_stripes`]).
    pub(super) async fn lock_digests<'d>(
        &self,
        digests: impl IntoIterator<Item = &'d Digest>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let stripes = digests.into_iter().map(|d| self.digest_stripe(d)).collect();
        lock_stripes(&self.digest_locks, stripes).await
    }

    /// Opens a committed blob of `size` bytes; `NotFound` if it is gone. A
    /// small one is read whole into the in-memory tier on its first hit and
    /// served from memory after that; first hits arriving together read it
    /// once (the others wait for that read and take it from the tier).
    pub async fn open_blob(&self, digest: &Digest, size: u64) -> std::io::Result<Blob> {
        if let Some(bytes) = self.hot.get(digest) {
            return Ok(Blob::Memory(bytes));
        }
        let blob = self.blobs.open(digest).await?;
        if !self.hot.admits(size) {
            return Ok(blob);
        }
        let _loading = self.hot.loading(digest).await;
        if let Some(bytes) = self.hot.get(digest) {
            return Ok(Blob::Memory(bytes));
        }
        let bytes = bytes::Bytes::from(blob.read_all(size).await?);
        // Read whole anyway, so check it: a blob damaged on disk is never
        // served from memory; it is dropped and fetched again.
        if Digest::of(&bytes) != *digest {
            tracing::error!(?digest, "corrupt blob on disk; dropping it and its rows");
            self.hot.remove(digest);
            let _counting = self.accounting.read().await;
            let _digest = self.digest_lock(digest).lock().await;
            if self.meta.forget_digest(&digest.to_hex()).await.is_ok() {
                self.delete_blob(digest).await;
            }
            return Err(std::io::ErrorKind::NotFound.into());
        }
        self.hot.insert(*digest, bytes.clone());
        Ok(Blob::Memory(bytes))
    }

    /// Deletes the blob if no metadata row references it any more; returns
    /// the bytes freed. The check and the deletion hold the digest's lock,
    /// so a commit of the same digest happens wholly before (and the blob
    /// stays) or wholly after (and puts it back).
    pub async fn release_blob(&self, digest: &Digest) -> u64 {
        let _counting = self.accounting.read().await;
        let _digest = self.digest_lock(digest).lock().await;
        self.release_held(digest).await
    }

    /// [`Cache::release_blob`] for a caller that holds the digest's lock and
    /// a shared `accounting` (across the deletion of the row and this
    /// release, so neither a commit nor a re-derivation ever sees the row
    /// gone and the blob still counted).
    async fn release_held(&self, digest: &Digest) -> u64 {
        match self.meta.digest_referenced(&digest.to_hex()).await {
            Ok(false) => match self.committing_size(digest) {
                // Its row is about to be written (see `commit`): the blob
                // stays, uncounted until that row counts it again.
                Some(size) => {
                    self.budget.sub_committed(size);
                    0
                }
                None => self.delete_blob(digest).await,
            },
            Ok(true) => 0,
            Err(error) => {
                tracing::warn!(%error, "cannot tell whether a blob is still referenced; keeping it");
                0
            }
        }
    }

    /// Drops the entry for `path` and releases its blob (the one the deleted
    /// row referenced); returns the bytes freed.
    pub async fn forget_entry(&self, path: &ArtifactPath) -> Result<u64, ProxyError> {
        self.forget_row(path.remote(), path.stored_path()).await
    }

    /// [`Cache::forget_entry`] by the row's parts (eviction holds rows).
    /// Every row is deleted under its digest's lock, then that blob
    /// released under the same lock.
    pub async fn forget_row(&self, remote: &str, path: &str) -> Result<u64, ProxyError> {
        Ok(self.forget_row_counted(remote, path).await?.unwrap_or(0))
    }

    /// [`Cache::forget_row`]: `None` when there was no row, else the bytes
    /// freed.
    pub async fn forget_row_counted(
        &self,
        remote: &str,
        path: &str,
    ) -> Result<Option<u64>, ProxyError> {
        let _counting = self.accounting.read().await;
        self.forget_row_held(remote, path).await
    }

    /// [`Cache::forget_row_counted`] for a caller holding `accounting`
    /// shared.
    async fn forget_row_held(&self, remote: &str, path: &str) -> Result<Option<u64>, ProxyError> {
        loop {
            let Some(hex) = self.meta.stored_digest(remote, path).await? else {
                return Ok(None);
            };
            let Some(digest) = Digest::from_hex(&hex) else {
                self.meta.forget_row(remote, path).await?;
                return Ok(Some(0));
            };
            let _digest = self.digest_lock(&digest).lock().await;
            if self.meta.forget_row_of(remote, path, Some(&hex)).await? {
                return Ok(Some(self.release_held(&digest).await));
            }
            // Replaced since it was read: look again.
        }
    }

    /// Drops every entry of `remote` (rows recorded while this runs may
    /// stay: a purge makes them stale first, `purge`) and releases their
    /// blobs, digest by digest under its lock; returns how many rows went,
    /// how many digests they referenced and the bytes freed. Memory and
    /// other instances are the purge's business.
    pub async fn forget_remote(&self, remote: &str) -> Result<(u64, usize, u64), ProxyError> {
        let _counting = self.accounting.read().await;
        self.forget_remote_held(remote).await
    }

    /// [`Cache::forget_remote`] for a caller holding `accounting` shared.
    async fn forget_remote_held(&self, remote: &str) -> Result<(u64, usize, u64), ProxyError> {
        // By their keys, a digest's rows at a time: the embedded database
        // has no index on `entries.digest` to find them by.
        let by_digest = self.meta.remote_rows(remote).await?;
        let (mut rows, mut freed) = (0, 0);
        for (hex, paths) in &by_digest {
            let digest = Digest::from_hex(hex);
            let _digest = match &digest {
                Some(digest) => Some(self.digest_lock(digest).lock().await),
                None => None,
            };
            rows += self.meta.delete_remote_paths(remote, hex, paths).await?;
            if let Some(digest) = &digest {
                freed += self.release_held(digest).await;
            }
        }
        Ok((rows, by_digest.len(), freed))
    }

    /// Deletes an unreferenced blob and uncounts it. The caller holds the
    /// digest's lock and a shared `accounting`.
    async fn delete_blob(&self, digest: &Digest) -> u64 {
        let freed = self.remove_blob(digest).await;
        self.budget.sub_committed(freed);
        freed
    }

    /// Deletes a blob (and its copy in memory), counting nothing: for
    /// [`Cache::delete_blob`], and for one that is no longer counted.
    /// Returns the bytes freed.
    async fn remove_blob(&self, digest: &Digest) -> u64 {
        self.hot.remove(digest);
        self.blobs.remove(digest).await.unwrap_or_else(|error| {
            tracing::warn!(%error, "could not delete a blob");
            0
        })
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

/// A database URL with any password replaced, for logs and errors.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests;

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
