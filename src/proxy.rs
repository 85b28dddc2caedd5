//! The proxy's shared state: remotes, content store, metadata, fills in
//! progress, health, metrics. Built once from a validated [`Config`] and
//! reloaded in place; knows nothing of HTTP.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;

use crate::blobs::{Blob, BlobStore, HotBlobs, LocalBlobs, S3Blobs};
use crate::config::{Config, ServerConfig};
use crate::error::ProxyError;
use crate::evict::Evictor;
use crate::fill::FillRegistry;
use crate::health::HealthRegistry;
use crate::meta::MetadataStore;
use crate::metrics::Metrics;
use crate::remote::Remote;
use crate::select::GaugeRegistry;
use crate::store::{ContentStore, Digest};

pub type Remotes = HashMap<String, Arc<Remote>>;

pub struct Proxy {
    pub server: ServerConfig,
    /// Swapped whole on reload; a request keeps the `Arc<Remote>` it started with.
    remotes: ArcSwap<Remotes>,
    /// The config the proxy runs with, for reload comparisons.
    config: ArcSwap<Config>,
    pub gauges: GaugeRegistry,
    pub health: HealthRegistry,
    pub metrics: Metrics,
    /// The local store: fills in progress (and blobs, by default).
    pub store: Arc<ContentStore>,
    /// Where committed blobs live (local disk or S3).
    pub blobs: Arc<dyn BlobStore>,
    /// Small hot blobs in memory.
    pub hot: HotBlobs,
    pub meta: MetadataStore,
    pub fills: FillRegistry,
    pub evictor: Arc<Evictor>,
    /// Redis coordination, when `[redis]` is configured.
    pub cluster: std::sync::OnceLock<Arc<crate::cluster::Cluster>>,
}

impl Proxy {
    /// Opens the store (cleaning temp files), connects and migrates the
    /// metadata database, builds every remote, and starts the background
    /// tasks (eviction, active probes).
    pub async fn build(config: &Config) -> anyhow::Result<Arc<Proxy>> {
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
        let gauges = GaugeRegistry::default();
        let health = HealthRegistry::default();
        let metrics = Metrics::new();
        let remotes = build_remotes(config, &gauges, &health, &metrics)?;
        metrics.store_max_bytes.set(config.storage.max_size as i64);
        let proxy = Arc::new(Proxy {
            server: config.server.clone(),
            remotes: ArcSwap::from_pointee(remotes),
            config: ArcSwap::from_pointee(config.clone()),
            gauges,
            health,
            metrics,
            store,
            blobs,
            hot: HotBlobs::new(
                config.storage.memory_cache_size,
                config.storage.memory_object_max,
            ),
            meta,
            fills: FillRegistry::default(),
            evictor: Arc::new(Evictor::new(config.storage.max_size)),
            cluster: std::sync::OnceLock::new(),
        });
        if let Some(redis) = &config.redis {
            let weak = Arc::downgrade(&proxy);
            let cluster = crate::cluster::Cluster::start(
                redis,
                proxy.metrics.redis_errors.clone(),
                move |key| {
                    if let Some(proxy) = weak.upgrade() {
                        proxy.meta.invalidate_local(key);
                    }
                },
            )
            .context("configuring redis")?;
            proxy.meta.attach_cluster(cluster.clone());
            let _ = proxy.cluster.set(cluster);
        }
        tokio::spawn(Evictor::run(Arc::downgrade(&proxy)));
        proxy.start_probes();
        proxy.evictor.wake_if_over(proxy.blobs.size());
        Ok(proxy)
    }

    /// Applies a new config's remotes without dropping connections: mirrors
    /// that stay keep their in-flight gauges and health (both are keyed by
    /// URL). Settings that need a restart (listen address, storage, metadata)
    /// are logged and left as they are.
    pub fn reload(&self, config: &Config) -> anyhow::Result<()> {
        let remotes = build_remotes(config, &self.gauges, &self.health, &self.metrics)?;
        let old = self.config.load();
        if old.server.listen != config.server.listen
            || old.storage.path != config.storage.path
            || old.metadata.url != config.metadata.url
        {
            tracing::warn!(
                "server.listen, storage.path and metadata.url take effect only after a restart"
            );
        }
        self.remotes.store(Arc::new(remotes));
        self.config.store(Arc::new(config.clone()));
        self.start_probes();
        tracing::info!(remotes = config.remotes.len(), "config reloaded");
        Ok(())
    }

    fn start_probes(&self) {
        for remote in self.remotes.load().values() {
            if remote.config.health.probe_path.is_some() {
                tokio::spawn(crate::upstream::probe_loop(Arc::downgrade(remote)));
            }
        }
    }

    pub fn remote(&self, name: &str) -> Option<Arc<Remote>> {
        self.remotes.load().get(name).cloned()
    }

    pub fn remotes(&self) -> Arc<Remotes> {
        self.remotes.load_full()
    }

    pub fn max_store_size(&self) -> u64 {
        self.config.load().storage.max_size
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

    /// Runs blocking store work off the async threads.
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

fn build_remotes(
    config: &Config,
    gauges: &GaugeRegistry,
    health: &HealthRegistry,
    metrics: &Metrics,
) -> anyhow::Result<Remotes> {
    let mut remotes = HashMap::new();
    for rc in &config.remotes {
        let remote = Remote::new(rc, gauges, health, metrics)
            .with_context(|| format!("building remote {:?}", rc.name))?;
        remotes.insert(rc.name.clone(), Arc::new(remote));
    }
    Ok(remotes)
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
