//! A remote as the request path uses it: its mirrors with their gauges, its
//! selector, its cache policy and its HTTP client, built once from the config.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{RemoteConfig, RemoteKind};
use crate::policy::CachePolicy;
use crate::select::{GaugeRegistry, Mirror, Selector};
use crate::upstream;

#[derive(Debug)]
pub struct Remote {
    pub name: String,
    pub kind: RemoteKind,
    pub mirrors: Vec<Arc<Mirror>>,
    pub selector: Selector,
    pub policy: CachePolicy,
    pub client: reqwest::Client,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_attempts: usize,
}

impl Remote {
    pub fn new(config: &RemoteConfig, gauges: &GaugeRegistry) -> Result<Remote, reqwest::Error> {
        Ok(Remote {
            name: config.name.clone(),
            kind: config.kind,
            mirrors: config
                .mirrors
                .iter()
                .map(|u| Arc::new(Mirror::new(u.clone(), gauges)))
                .collect(),
            selector: Selector::new(config.strategy, config.latency_decay),
            policy: CachePolicy::new(config),
            client: upstream::client_for(config)?,
            first_byte_timeout: config.first_byte_timeout,
            idle_timeout: config.idle_timeout,
            max_attempts: config.max_attempts,
        })
    }
}
