//! A remote as the request path uses it: its mirrors with their gauges, health
//! and metrics, its selector, its cache policy and its HTTP client, built once
//! from the config (and again on reload, keeping gauges and health by URL).

use std::sync::Arc;

use crate::config::RemoteConfig;
use crate::health::{HealthRegistry, MirrorHealth};
use crate::metrics::{Metrics, MirrorMetrics, RemoteCounters};
use crate::policy::CachePolicy;
use crate::select::{GaugeRegistry, Mirror, Selector};
use crate::upstream;

#[derive(Debug)]
pub struct Remote {
    pub name: String,
    pub config: RemoteConfig,
    pub mirrors: Vec<Arc<Mirror>>,
    /// Parallel to `mirrors`.
    pub health: Vec<Arc<MirrorHealth>>,
    /// Parallel to `mirrors`.
    pub mirror_metrics: Vec<MirrorMetrics>,
    pub counters: RemoteCounters,
    pub selector: Selector,
    pub policy: CachePolicy,
    pub client: reqwest::Client,
}

impl Remote {
    pub fn new(
        config: &RemoteConfig,
        gauges: &GaugeRegistry,
        health: &HealthRegistry,
        metrics: &Metrics,
    ) -> Result<Remote, reqwest::Error> {
        let mirrors: Vec<Arc<Mirror>> = config
            .mirrors
            .iter()
            .map(|u| Arc::new(Mirror::new(u.clone(), gauges)))
            .collect();
        Ok(Remote {
            name: config.name.clone(),
            health: mirrors.iter().map(|m| health.get(m.base())).collect(),
            mirror_metrics: mirrors
                .iter()
                .map(|m| metrics.mirror_metrics(&config.name, m.base()))
                .collect(),
            counters: metrics.remote_counters(&config.name),
            selector: Selector::new(config.strategy),
            policy: CachePolicy::new(config),
            client: upstream::client_for(config)?,
            mirrors,
            config: config.clone(),
        })
    }
}
