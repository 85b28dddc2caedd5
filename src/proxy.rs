//! The proxy's shared state: remotes, content store, metadata and the fills
//! in progress. Built once from a validated [`Config`]; knows nothing of HTTP.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;

use crate::config::{Config, ServerConfig};
use crate::error::ProxyError;
use crate::fill::FillRegistry;
use crate::meta::MetadataStore;
use crate::remote::Remote;
use crate::select::GaugeRegistry;
use crate::store::ContentStore;

pub struct Proxy {
    pub server: ServerConfig,
    pub remotes: HashMap<String, Arc<Remote>>,
    pub gauges: GaugeRegistry,
    pub store: Arc<ContentStore>,
    pub meta: MetadataStore,
    pub fills: FillRegistry,
}

impl Proxy {
    /// Opens the store (cleaning temp files), connects and migrates the
    /// metadata database, and builds every remote.
    pub async fn build(config: &Config) -> anyhow::Result<Arc<Proxy>> {
        let store = ContentStore::open(&config.storage.path).with_context(|| {
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
        let gauges = GaugeRegistry::default();
        let mut remotes = HashMap::new();
        for rc in &config.remotes {
            let remote = Remote::new(rc, &gauges)
                .with_context(|| format!("building remote {:?}", rc.name))?;
            remotes.insert(rc.name.clone(), Arc::new(remote));
        }
        Ok(Arc::new(Proxy {
            server: config.server.clone(),
            remotes,
            gauges,
            store: Arc::new(store),
            meta,
            fills: FillRegistry::default(),
        }))
    }

    pub fn remote(&self, name: &str) -> Option<&Arc<Remote>> {
        self.remotes.get(name)
    }

    /// Opens a committed blob off the async threads; `NotFound` if it is gone.
    pub async fn open_blob(
        &self,
        digest: &crate::store::Digest,
    ) -> std::io::Result<Arc<std::fs::File>> {
        let store = self.store.clone();
        let digest = *digest;
        tokio::task::spawn_blocking(move || store.open_blob(&digest).map(Arc::new))
            .await
            .map_err(std::io::Error::other)?
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
