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
//! or the fill; it imports only `config`, `error`, `path`, `clock` and
//! `metrics`.

pub mod blobs;
pub mod cluster;
pub mod evict;
pub mod listing;
pub mod meta;
pub mod store;
pub mod verify;

use std::sync::{Arc, OnceLock};

use anyhow::Context;

use crate::config::Config;
use crate::error::ProxyError;
use crate::metrics::Metrics;
pub use blobs::{Blob, BlobStore, HotBlobs};
use blobs::{LocalBlobs, S3Blobs};
use cluster::Cluster;
pub use evict::Evictor;
pub use meta::{Entry, MetadataStore};
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
    /// Redis coordination, when `[redis]` is configured.
    cluster: OnceLock<Arc<Cluster>>,
    pub metrics: Arc<Metrics>,
}

impl Cache {
    /// Opens the store (cleaning temp files of dead processes), connects and
    /// migrates the metadata database, opens the blob store, joins the
    /// cluster when `[redis]` is set, and starts the evictor.
    pub async fn open(config: &Config, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Cache>> {
        let store_path = config.storage.path.clone();
        let store = tokio::task::spawn_blocking(move || ContentStore::open(&store_path))
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
        let cache = Arc::new(Cache {
            store,
            blobs,
            hot: HotBlobs::new(
                config.storage.memory_cache_size,
                config.storage.memory_object_max,
            ),
            meta,
            evictor: Evictor::new(config.storage.max_size),
            cluster: OnceLock::new(),
            metrics,
        });
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
        tokio::spawn(Evictor::run(Arc::downgrade(&cache)));
        cache.evictor.wake_if_over(cache.size());
        Ok(cache)
    }

    /// Redis coordination, when configured.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.get()
    }

    /// Bytes of committed blobs.
    pub fn size(&self) -> u64 {
        self.blobs.size()
    }

    /// Bytes of blobs committed to the local disk store (0 when blobs live
    /// in S3).
    pub fn local_size(&self) -> u64 {
        self.store.size()
    }

    /// `storage.max_size`.
    pub fn max_size(&self) -> u64 {
        self.evictor.max_size()
    }

    /// Opens a committed blob of `size` bytes; `NotFound` if it is gone. A
    /// small one is read whole into the in-memory tier on its first hit and
    /// served from memory after that.
    pub async fn open_blob(&self, digest: &Digest, size: u64) -> std::io::Result<Blob> {
        if let Some(bytes) = self.hot.get(digest) {
            return Ok(Blob::Memory(bytes));
        }
        let blob = self.blobs.open(digest).await?;
        if !self.hot.admits(size) {
            return Ok(blob);
        }
        let bytes = bytes::Bytes::from(blob.read_all(size).await?);
        // Read whole anyway, so check it: a blob damaged on disk is never
        // served from memory; it is dropped and fetched again.
        if Digest::of(&bytes) != *digest {
            tracing::error!(?digest, "corrupt blob on disk; dropping it");
            self.hot.remove(digest);
            let _ = self.blobs.remove(digest).await;
            return Err(std::io::ErrorKind::NotFound.into());
        }
        self.hot.insert(*digest, bytes.clone());
        Ok(Blob::Memory(bytes))
    }

    /// Makes a fully written temp file visible as the blob `digest`.
    pub async fn commit(&self, temp: TempBlob, digest: Digest) -> std::io::Result<()> {
        self.blobs.commit(temp, digest).await
    }

    /// Deletes the blob if no metadata row references it any more; returns
    /// the bytes freed.
    pub async fn release_blob(&self, digest: &Digest) -> u64 {
        match self.meta.digest_referenced(&digest.to_hex()).await {
            Ok(false) => {
                self.hot.remove(digest);
                self.blobs.remove(digest).await.unwrap_or_else(|error| {
                    tracing::warn!(%error, "could not delete a blob");
                    0
                })
            }
            Ok(true) => 0,
            Err(error) => {
                tracing::warn!(%error, "cannot tell whether a blob is still referenced; keeping it");
                0
            }
        }
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
