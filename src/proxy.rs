//! The proxy's shared state: remotes, content store, metadata, fills in
//! progress, health, metrics. Built once from a validated [`Config`] and
//! reloaded in place; knows nothing of HTTP.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;

use crate::access::Access;
use crate::advisories::{self, Advisories};
use crate::cache::Cache;
use crate::config::{Config, ServerConfig};
use crate::documents::Documents;
use crate::fill::FillRegistry;
use crate::history::{History, Totals};
use crate::metrics::Metrics;
use crate::upstream::health::HealthRegistry;
use crate::upstream::select::GaugeRegistry;
use crate::upstream::Remote;

/// By name, hashed by foldhash: every request looks its remote up, and
/// the names are the operator's.
pub type Remotes = HashMap<String, Arc<Remote>, foldhash::fast::RandomState>;

/// What a request needs, each room's part handed over whole: the handlers
/// take `cache`, `fills` and a remote from here; the rooms below never see
/// `Proxy`.
pub struct Proxy {
    /// Swapped whole on reload (`public_url`, `admin_token` and
    /// `shutdown_timeout` apply at once); read per request with `server()`.
    server: ArcSwap<ServerConfig>,
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
    /// Who is asking (`[auth]`); reloaded with the htpasswd file.
    pub access: Arc<Access>,
    /// Publish times (unix ms; `None`: the document gives none) of the
    /// artifacts a cooldown was checked for, by key: a publish time never
    /// changes, so a hit on an artifact under `min_release_age` is judged from
    /// memory instead of re-reading its package's document. Kept 10 minutes,
    /// so a time a document gains later is seen.
    pub publish_times: moka::sync::Cache<String, Option<i64>>,
    /// Checksums computed for checksum paths (`x.jar.sha1`), by the ETag of
    /// the bytes served for the file and the function: a file is hashed
    /// once per process, not per request for its sidecar.
    pub checksums: moka::sync::Cache<(String, &'static str), String>,
    /// Index documents as served (filtered, rewritten), built once per
    /// what they are a function of.
    pub documents: Documents,
    /// The dashboard's per-minute history, sampled from the counters once a
    /// minute by [`Proxy::sample_history`] (never by a request).
    pub history: Arc<History>,
    /// The advisory indexes the remotes' `quarantine` judges by.
    pub advisories: Arc<Advisories>,
    /// Which clients lfs remotes' batches admitted, and their grants.
    pub lfs_grants: crate::access::lfs::LfsGrants,
}

impl Proxy {
    /// Opens the cache (store, metadata, blobs, cluster, evictor), builds
    /// every remote, and starts the active probes.
    pub async fn build(config: &Config) -> anyhow::Result<Arc<Proxy>> {
        let metrics = Arc::new(Metrics::new());
        let cache = Cache::open(config, metrics.clone()).await?;
        // The one process that trusts its memory of the rows (and is told
        // of other processes' writes: `meta::other_writers`).
        cache.meta.memory.others.serve();
        let gauges = GaugeRegistry::default();
        let health = HealthRegistry::default();
        let remotes = build_remotes(config, &gauges, &health, &metrics)?;
        let advisories = Arc::new(Advisories::new(advisories::feed_dir(&config.storage.path)));
        // The saved feeds are in force before the first request is served.
        let loading = advisories.clone();
        tokio::task::spawn_blocking(move || loading.load_saved())
            .await
            .context("reading the saved advisory feeds")?;
        tokio::spawn(advisories::watch_saved(Arc::downgrade(&advisories)));
        let proxy = Arc::new(Proxy {
            server: ArcSwap::from_pointee(config.server.clone()),
            remotes: ArcSwap::from_pointee(remotes),
            config: ArcSwap::from_pointee(config.clone()),
            gauges,
            health,
            fills: Arc::new(FillRegistry::new(
                cache.clone(),
                metrics.clone(),
                config.server.max_fills,
            )),
            access: Arc::new(Access::new(config.auth.as_ref(), cache.clone())),
            metrics,
            cache,
            publish_times: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(std::time::Duration::from_secs(600))
                .build(),
            checksums: moka::sync::Cache::builder().max_capacity(100_000).build(),
            documents: Documents::default(),
            history: Arc::new(History::default()),
            advisories,
            lfs_grants: crate::access::lfs::LfsGrants::new(),
        });
        proxy.start_probes();
        tokio::spawn(history_sampler(Arc::downgrade(&proxy)));
        Ok(proxy)
    }

    /// Applies a new config: its remotes, rebuilt without dropping
    /// connections (mirrors that stay keep their in-flight gauges and health,
    /// both keyed by URL), and its `[server]` keys but the listener's. A
    /// config that changes a key only a restart can apply is refused whole,
    /// naming the keys, and the running config stays.
    pub fn reload(&self, config: &Config) -> anyhow::Result<()> {
        let needs_restart = restart_only_changes(&self.config.load(), config);
        if !needs_restart.is_empty() {
            anyhow::bail!(
                "{} changed, which only a restart applies; reload refused",
                needs_restart
                    .iter()
                    .map(|key| format!("`{key}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let remotes = build_remotes(config, &self.gauges, &self.health, &self.metrics)?;
        self.remotes.store(Arc::new(remotes));
        self.server.store(Arc::new(config.server.clone()));
        self.config.store(Arc::new(config.clone()));
        self.start_probes();
        tracing::info!(remotes = config.remotes.len(), "config reloaded");
        Ok(())
    }

    /// Reads every remote's counters once into the history (the sampler's
    /// tick; tests call it with the history's clock moved).
    pub fn sample_history(&self) {
        let remotes = self.remotes.load();
        for (name, remote) in remotes.iter() {
            let counts = remote.counters.snapshot();
            let mut totals = Totals {
                requests: counts.hits + counts.misses + counts.errors,
                hits: counts.hits,
                bytes_from_cache: counts.bytes_from_cache,
                bytes_from_upstream: counts.bytes_from_upstream,
                ..Totals::default()
            };
            for metrics in remote.mirror_sets().flat_map(|set| set.metrics.iter()) {
                totals.upstream_errors += metrics.failures.get();
                totals.first_byte_us += metrics.first_byte_us.get();
                totals.first_bytes += metrics.first_bytes.get();
            }
            self.history.record(name, totals);
        }
        self.history.retain(|name| remotes.contains_key(name));
    }

    /// The `[server]` settings in force now.
    pub fn server(&self) -> Arc<ServerConfig> {
        self.server.load_full()
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
    let mut remotes = Remotes::default();
    let tls = crate::upstream::clients::tls_config();
    for rc in &config.remotes {
        let remote = Remote::new(rc, &tls, gauges, health, metrics)
            .with_context(|| format!("building remote {:?}", rc.name))?;
        remotes.insert(rc.name.clone(), Arc::new(remote));
    }
    Ok(remotes)
}

/// The keys that differ between `old` and `new` and are read only at start:
/// the listener, logging, the store, the metadata database and Redis. Only
/// names, never values (some hold passwords).
fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    /// Whether a field of an optional table (`[redis]`, S3 storage) differs;
    /// adding or removing the table changes every field.
    fn differs<C, T: PartialEq>(old: Option<&C>, new: Option<&C>, field: fn(&C) -> &T) -> bool {
        old.map(field) != new.map(field)
    }
    let (o, n) = (old, new);
    let (o_s3, n_s3) = (o.storage.s3.as_ref(), n.storage.s3.as_ref());
    let (o_redis, n_redis) = (o.redis.as_ref(), n.redis.as_ref());
    [
        ("server.listen", o.server.listen != n.server.listen),
        (
            "server.tls_cert",
            o.server.tls.is_some() != n.server.tls.is_some(),
        ),
        (
            "server.trusted_proxies",
            o.server.trusted_proxies != n.server.trusted_proxies,
        ),
        (
            "server.header_read_timeout",
            o.server.header_read_timeout != n.server.header_read_timeout,
        ),
        (
            "server.max_connections",
            o.server.max_connections != n.server.max_connections,
        ),
        ("server.max_fills", o.server.max_fills != n.server.max_fills),
        (
            "server.send_timeout",
            o.server.send_timeout != n.server.send_timeout,
        ),
        ("log.format", o.log.format != n.log.format),
        ("log.level", o.log.level != n.log.level),
        ("log.buffer", o.log.buffer != n.log.buffer),
        ("log.flush", o.log.flush != n.log.flush),
        ("storage.path", o.storage.path != n.storage.path),
        // Feeds are refreshed by tasks started with the listener.
        ("advisories", o.advisories != n.advisories),
        ("storage.max_size", o.storage.max_size != n.storage.max_size),
        (
            "storage.memory_cache_size",
            o.storage.memory_cache_size != n.storage.memory_cache_size,
        ),
        (
            "storage.memory_object_max",
            o.storage.memory_object_max != n.storage.memory_object_max,
        ),
        (
            "storage.pack_below",
            o.storage.pack_below != n.storage.pack_below,
        ),
        (
            "storage.open_files",
            o.storage.open_files != n.storage.open_files,
        ),
        ("storage.url", differs(o_s3, n_s3, |s| &s.url)),
        ("storage.endpoint", differs(o_s3, n_s3, |s| &s.endpoint)),
        ("storage.region", differs(o_s3, n_s3, |s| &s.region)),
        (
            "storage.access_key_id",
            differs(o_s3, n_s3, |s| &s.access_key_id),
        ),
        (
            "storage.secret_access_key",
            differs(o_s3, n_s3, |s| &s.secret_access_key),
        ),
        (
            "storage.delete_delay",
            differs(o_s3, n_s3, |s| &s.delete_delay),
        ),
        ("metadata.url", o.metadata.url != n.metadata.url),
        (
            "metadata.cache_entries",
            o.metadata.cache_entries != n.metadata.cache_entries,
        ),
        (
            "metadata.cache_memory",
            o.metadata.cache_memory != n.metadata.cache_memory,
        ),
        ("redis.url", differs(o_redis, n_redis, |r| &r.url)),
        ("redis.timeout", differs(o_redis, n_redis, |r| &r.timeout)),
        ("redis.lock_ttl", differs(o_redis, n_redis, |r| &r.lock_ttl)),
        (
            "redis.lock_wait",
            differs(o_redis, n_redis, |r| &r.lock_wait),
        ),
        (
            "redis.entry_ttl",
            differs(o_redis, n_redis, |r| &r.entry_ttl),
        ),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

/// Samples the history at the start of every minute while `server.history`
/// is on (a reload may turn it on or off); ends with the proxy.
async fn history_sampler(proxy: std::sync::Weak<Proxy>) {
    loop {
        // Just before the minute ends, so what it saw lands in its own bucket.
        let wait = (59_950 - crate::clock::now_ms().rem_euclid(60_000)).rem_euclid(60_000);
        tokio::time::sleep(std::time::Duration::from_millis(wait.max(100) as u64)).await;
        let Some(proxy) = proxy.upgrade() else {
            return;
        };
        if proxy.server().history {
            proxy.sample_history();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Config {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:8080\"\n{extra}\n[[remote]]\nname = \"r\"\nmirrors = [\"http://127.0.0.1:1\"]\n"
        );
        Config::parse(&text, "t.toml").unwrap()
    }

    #[test]
    fn reload_names_the_keys_only_a_restart_applies() {
        let old = parse("admin_token = \"a\"\n[redis]\nurl = \"redis://:one@127.0.0.1\"\n");
        let applied = parse("admin_token = \"b\"\npublic_url = \"http://x\"\n[redis]\nurl = \"redis://:one@127.0.0.1\"\n");
        assert!(restart_only_changes(&old, &applied).is_empty());
        let restart =
            parse("[storage]\nmax_size = \"1GiB\"\n[redis]\nurl = \"redis://:two@127.0.0.1\"\n");
        assert_eq!(
            restart_only_changes(&old, &restart),
            ["storage.max_size", "redis.url"]
        );
        // Read once, when the S3 blob store is built: a reload cannot apply it.
        let s3 = |delay: &str| {
            parse(&format!(
                "[storage]\nurl = \"s3://b/p\"\ndelete_delay = \"{delay}\"\n"
            ))
        };
        assert_eq!(
            restart_only_changes(&s3("1h"), &s3("2h")),
            ["storage.delete_delay"]
        );
        assert_eq!(
            restart_only_changes(&old, &parse("")),
            [
                "redis.url",
                "redis.timeout",
                "redis.lock_ttl",
                "redis.lock_wait",
                "redis.entry_ttl"
            ]
        );
    }
}
