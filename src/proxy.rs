//! The proxy's shared state: remotes, content store, metadata, fills in
//! progress, health, metrics. Built once from a validated [`Config`] and
//! reloaded in place; knows nothing of HTTP.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;

use crate::cache::Cache;
use crate::config::{Config, ServerConfig};
use crate::fill::FillRegistry;
use crate::metrics::Metrics;
use crate::upstream::health::HealthRegistry;
use crate::upstream::select::GaugeRegistry;
use crate::upstream::Remote;

pub type Remotes = HashMap<String, Arc<Remote>>;

/// What a request needs, each room's part handed over whole: the handlers
/// take `cache`, `fills` and a remote from here; the rooms below never see
/// `Proxy`.
pub struct Proxy {
    pub server: ServerConfig,
    /// Swapped whole on reload; a request keeps the `Arc<Remote>` it started with.
    remotes: ArcSwap<Remotes>,
    /// The config the proxy runs with, for reload comparisons.
    config: ArcSwap<Config>,
    /// In-flight gauges and health by mirror URL: kept across reloads.
    gauges: GaugeRegistry,
    health: HealthRegistry,
    pub metrics: Arc<Metrics>,
    pub cache: Arc<Cache>,
    pub fills: Arc<FillRegistry>,
}

impl Proxy {
    /// Opens the cache (store, metadata, blobs, cluster, evictor), builds
    /// every remote, and starts the active probes.
    pub async fn build(config: &Config) -> anyhow::Result<Arc<Proxy>> {
        let metrics = Arc::new(Metrics::new());
        let cache = Cache::open(config, metrics.clone()).await?;
        let gauges = GaugeRegistry::default();
        let health = HealthRegistry::default();
        let remotes = build_remotes(config, &gauges, &health, &metrics)?;
        let proxy = Arc::new(Proxy {
            server: config.server.clone(),
            remotes: ArcSwap::from_pointee(remotes),
            config: ArcSwap::from_pointee(config.clone()),
            gauges,
            health,
            fills: Arc::new(FillRegistry::new(
                cache.clone(),
                metrics.clone(),
                config.server.max_fills,
            )),
            metrics,
            cache,
        });
        proxy.start_probes();
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
                tokio::spawn(crate::upstream::probe::probe_loop(Arc::downgrade(remote)));
            }
        }
    }

    pub fn remote(&self, name: &str) -> Option<Arc<Remote>> {
        self.remotes.load().get(name).cloned()
    }

    pub fn remotes(&self) -> Arc<Remotes> {
        self.remotes.load_full()
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
