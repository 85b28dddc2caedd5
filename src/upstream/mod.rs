//! A remote as the request path uses it: its mirror sets (the index mirrors,
//! and the mirrors of a separate files host) with their gauges, health and
//! metrics, its cache policy and its HTTP client, built once from the config
//! (and again on reload, keeping gauges and health by URL).
//!
//! The room's files: [`select`] orders mirrors (one file per strategy),
//! [`health`] ejects failing mirrors for a while, [`fetch`] runs the attempts
//! with failover (`redirects`: the hops of `Protocol::SignedRedirects`
//! mirrors, followed here), [`probe`] the optional active probes.
//!
//! **Invariant:** this room knows nothing of the cache or of HTTP clients
//! downstream; it imports only `config`, `kind`, `error`, `clock` and
//! `metrics`.

pub mod clients;
pub mod fetch;
pub mod health;
pub mod hedge;
pub mod lfs;
mod outbound;
pub mod pass;
pub mod probe;
mod redirects;
pub mod registry;
pub mod select;
pub mod token;

use std::borrow::Cow;
use std::sync::Arc;

use url::Url;

use crate::config::RemoteConfig;
use crate::kind::policy::CachePolicy;
use crate::kind::FILES_PREFIX;
use crate::metrics::{Metrics, MirrorMetrics, RemoteCounters};
use health::{HealthRegistry, MirrorHealth};
use select::{GaugeRegistry, Mirror, Selector};

/// One list of interchangeable mirrors, selected among as a unit.
#[derive(Debug)]
pub struct MirrorSet {
    pub mirrors: Vec<Arc<Mirror>>,
    /// Parallel to `mirrors`.
    pub health: Vec<Arc<MirrorHealth>>,
    /// Parallel to `mirrors`.
    pub metrics: Vec<MirrorMetrics>,
    /// Parallel to `mirrors`: whether the remote's credentials go to it
    /// (`RemoteConfig::sends_credentials_to`).
    pub credentials: Vec<bool>,
    pub selector: Selector,
}

impl MirrorSet {
    fn new(
        remote: &RemoteConfig,
        urls: &[Url],
        gauges: &GaugeRegistry,
        health: &HealthRegistry,
        metrics: &Metrics,
    ) -> MirrorSet {
        let mirrors: Vec<Arc<Mirror>> = urls
            .iter()
            .map(|u| Arc::new(Mirror::new(u.clone(), gauges)))
            .collect();
        MirrorSet {
            health: mirrors.iter().map(|m| health.get(m.base())).collect(),
            metrics: mirrors
                .iter()
                .map(|m| metrics.mirror_metrics(&remote.name, m.base()))
                .collect(),
            credentials: urls
                .iter()
                .map(|u| remote.sends_credentials_to(u))
                .collect(),
            selector: Selector::new(remote.strategy, remote.latency_decay),
            mirrors,
        }
    }
}

/// Numbers each `Remote` built, so that what is derived from one remote's
/// config (a built document) is never taken for another's.
static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[derive(Debug)]
pub struct Remote {
    pub name: String,
    /// Unique to this build of the remote: a reload makes a new one.
    pub generation: u64,
    pub config: RemoteConfig,
    pub index: MirrorSet,
    /// The files host's mirrors, serving `/{name}/~files/…`.
    pub files: Option<MirrorSet>,
    /// The go checksum database's mirrors, serving `/{name}/sumdb/{db}/…`.
    pub sumdb: Option<MirrorSet>,
    pub counters: RemoteCounters,
    pub policy: CachePolicy,
    /// Its HTTP clients: [`Remote::client`] is the calling thread's.
    clients: clients::Clients,
    /// An oci remote's registry tokens (empty for other kinds).
    pub tokens: token::Tokens,
    /// An oci remote's tag HEADs in flight (shared by concurrent requests).
    pub tag_heads: registry::TagHeads,
    /// An lfs remote's download actions (empty for other kinds).
    pub lfs_actions: lfs::Actions,
}

impl Remote {
    /// `tls`: what its clients trust ([`clients::tls_config`], one for all
    /// the remotes of a config).
    pub fn new(
        config: &RemoteConfig,
        tls: &rustls::ClientConfig,
        gauges: &GaugeRegistry,
        health: &HealthRegistry,
        metrics: &Metrics,
    ) -> Result<Remote, reqwest::Error> {
        Ok(Remote {
            name: config.name.clone(),
            generation: GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            index: MirrorSet::new(config, &config.mirrors, gauges, health, metrics),
            files: (!config.files.is_empty())
                .then(|| MirrorSet::new(config, &config.files, gauges, health, metrics)),
            sumdb: (!config.sumdb.is_empty())
                .then(|| MirrorSet::new(config, &config.sumdb, gauges, health, metrics)),
            counters: metrics.remote_counters(&config.name),
            policy: CachePolicy::new(config.kind, &config.immutable, config.revalidate_after),
            clients: clients::Clients::new(config, tls)?,
            tokens: token::Tokens::default(),
            tag_heads: registry::TagHeads::default(),
            lfs_actions: lfs::Actions::default(),
            config: config.clone(),
        })
    }

    /// The HTTP client for requests made on the calling thread.
    pub fn client(&self) -> &reqwest::Client {
        self.clients.get(&self.config)
    }

    /// The mirror set that serves `path`, and the path to ask it for.
    /// Without a `sumdb` set, `sumdb/…` goes to the index mirrors as it is
    /// (proxy.golang.org serves the checksum database that way too). A path
    /// the ecosystem answers from another upstream document
    /// ([`Ecosystem::upstream_path`]) asks the index mirrors for that one.
    /// An advisory feed's remote asks its mirrors' URLs as they are.
    ///
    /// [`Ecosystem::upstream_path`]: crate::kind::Ecosystem::upstream_path
    pub fn route<'p>(&self, path: &'p str) -> (&MirrorSet, Cow<'p, str>) {
        if self.config.feed {
            // An advisory feed's mirrors are URLs of the file itself.
            return (&self.index, Cow::Borrowed(""));
        }
        if let (Some(files), Some(rest)) = (&self.files, path.strip_prefix(FILES_PREFIX)) {
            return (files, Cow::Borrowed(rest));
        }
        if let (Some(sumdb), Some((_db, rest))) = (&self.sumdb, self.config.kind.sumdb_path(path)) {
            return (sumdb, Cow::Borrowed(rest));
        }
        match self.config.kind.ecosystem().upstream_path(path) {
            Some(other) => (&self.index, Cow::Owned(other)),
            None => (&self.index, Cow::Borrowed(path)),
        }
    }

    /// `request` to mirror `mirror_idx` of `set`, with the remote's
    /// credentials when they may go to that mirror's origin.
    pub fn authorize(
        &self,
        request: reqwest::RequestBuilder,
        set: &MirrorSet,
        mirror_idx: usize,
    ) -> reqwest::RequestBuilder {
        if set.credentials[mirror_idx] {
            outbound::authorize(request, &self.config.auth)
        } else {
            request
        }
    }

    /// Whether the proxy may fetch from `url` off the remote's mirrors (an
    /// LFS download action's `href`), as a registry's blob redirect may go.
    pub fn may_leave_for(&self, url: &Url) -> bool {
        outbound::LeaveFor::of(&self.config).allows(url)
    }

    pub fn mirror_sets(&self) -> impl Iterator<Item = &MirrorSet> {
        std::iter::once(&self.index)
            .chain(self.files.as_ref())
            .chain(self.sumdb.as_ref())
    }
}
