//! Configuration: the TOML file as written (`Raw*`, serde, unknown keys refused),
//! then one validated [`Config`] built once, with errors that name the key and line.
//! This file holds the validated types; [`raw`] the serde structs, [`validate`]
//! the checks that turn one into the other.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use url::Url;

mod auth;
mod mirror_urls;
mod quarantine;
pub use quarantine::valid_feed_name;
mod raw;
mod rules;
mod upstream_credentials;
mod validate;

pub use auth::{
    is_user_name, load_htpasswd, AuthConfig, HtpasswdUser, IpBlock, RemoteAccess, TlsConfig,
};

use crate::kind::guard::GuardConfig;
use crate::kind::{Kind, VersionPolicy};

use raw::RawConfig;
use validate::Validator;

/// The most mirrors one remote may list: attempt orders are built on the stack
/// up to this many (see `select::AttemptOrder`).
pub const MAX_MIRRORS: usize = 16;

/// A configuration that has passed every check; nothing downstream re-validates it.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub log: LogConfig,
    /// Cross-instance coordination; `None` = this instance works alone.
    pub redis: Option<RedisConfig>,
    pub storage: StorageConfig,
    pub metadata: MetadataConfig,
    pub remotes: Vec<RemoteConfig>,
    /// `[auth]`; `None` = every remote is anonymous.
    pub auth: Option<AuthConfig>,
    /// `[[advisories]]`: the OSV feeds the remotes' `quarantine` judges by.
    pub advisories: Vec<AdvisoryFeed>,
    /// What `check` warns about (and `serve` logs) without refusing the file.
    pub warnings: Vec<String>,
}

/// One `[[advisories]]` feed: an OSV export (a zip of records) fetched
/// through the cache as [`AdvisoryFeed::PATH`] of its own remote
/// ([`AdvisoryFeed::remote_name`], whose mirrors are `urls`), every `refresh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvisoryFeed {
    pub name: String,
    pub urls: Vec<Url>,
    pub refresh: Duration,
}

impl AdvisoryFeed {
    /// The path the feed is cached under in its remote.
    pub const PATH: &'static str = "all.zip";

    /// The remote the feed is fetched and cached through, one of
    /// [`Config::remotes`] with [`RemoteConfig::feed`] set.
    pub fn remote_name(&self) -> String {
        format!("advisories.{}", self.name)
    }
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Base for URLs the proxy writes; `None` = derived from the request's Host.
    pub public_url: Option<Url>,
    pub admin_token: Option<String>,
    /// How long shutdown waits for in-flight requests before it cuts them.
    pub shutdown_timeout: Duration,
    /// A client must finish sending its request head within this (slow-loris bound).
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// Upstream fills in progress at once; beyond it a miss gets 503.
    pub max_fills: usize,
    /// A client that takes nothing of its response for this long is dropped
    /// (the fill it was reading goes on).
    pub send_timeout: Duration,
    /// A request body (a pass-through POST) must arrive whole within this:
    /// one trickled a byte at a time would otherwise hold its connection
    /// slot for as long as the client likes. Then 408, and the connection
    /// is closed.
    pub body_read_timeout: Duration,
    /// The oci remote that answers `/v2/<repository>/…` without a remote
    /// prefix (docker's `registry-mirrors` cannot add one).
    pub oci_root_remote: Option<String>,
    /// With a certificate, the listener speaks only TLS (read at start).
    pub tls: Option<TlsConfig>,
    /// Peers whose `X-Forwarded-For`/`-Proto`/`-Host` count.
    pub trusted_proxies: Vec<IpBlock>,
    /// The dashboard's per-minute history (a sampler reading the counters
    /// once a minute); `false` stops the sampler.
    pub history: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub url: String,
    /// Longest wait for any one Redis operation before going on without it.
    pub timeout: Duration,
    /// Lease of an artifact lock; renewed every third of it while filling.
    pub lock_ttl: Duration,
    /// How long an instance waits for another's fill before fetching itself.
    pub lock_wait: Duration,
    /// Lifetime of a shared metadata entry in Redis.
    pub entry_ttl: Duration,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A `tracing` filter (`info`, `mirrorcache=debug,warn`); `RUST_LOG` overrides it.
    pub level: String,
    /// Bytes of log lines that are written at once (0: every line).
    pub buffer: u64,
    /// The longest a line waits in memory (a warning or an error: none).
    pub flush: Duration,
}

#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// The local store: blobs (unless `s3` is set) and fills in progress.
    pub path: PathBuf,
    pub max_size: u64,
    /// The in-memory tier of small hot blobs: total bytes (0 = off).
    pub memory_cache_size: u64,
    /// Largest blob the in-memory tier holds.
    pub memory_object_max: u64,
    /// Blobs shorter than this are packed together (0 = none).
    pub pack_below: u64,
    /// Blob files held open for hits (0 = none), at most a quarter of the
    /// process's descriptor limit.
    pub open_files: usize,
    /// Committed blobs in S3-compatible storage instead of `path/blobs`.
    pub s3: Option<S3Config>,
}

#[derive(Debug, Clone)]
pub struct S3Config {
    /// `s3://bucket/prefix`.
    pub url: String,
    /// For S3-compatible servers (MinIO, moto, Ceph): their base URL.
    pub endpoint: Option<String>,
    pub region: String,
    /// Unset: taken from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`.
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<Secret>,
    /// How long an object stays in the bucket after its last row went, so
    /// that reads other instances started on it can finish.
    pub delete_delay: Duration,
}

#[derive(Debug, Clone)]
pub struct MetadataConfig {
    pub url: String,
    /// Entries held by the in-memory metadata cache in front of the database.
    pub cache_entries: u64,
    /// Bytes that cache holds at most (`meta::Entry::cached_bytes`).
    pub cache_memory: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    Single,
    RoundRobin,
    LeastConn,
    Fastest,
}

#[derive(Debug, Clone)]
pub struct RemoteConfig {
    pub name: String,
    /// The remote's ecosystem: its paths, documents, digests, packages.
    pub kind: Kind,
    /// Mirror base URLs, without a trailing slash.
    pub mirrors: Vec<Url>,
    /// Mirrors of the separate download host (pypi's files host, cargo's
    /// `dl`); served under `/{name}/~files/…`. Empty when there is none.
    pub files: Vec<Url>,
    /// Mirrors of the go checksum database, served under
    /// `/{name}/sumdb/{db}/…` (go remotes only; empty = none).
    pub sumdb: Vec<Url>,
    /// The registry hostnames served (lower case): a path naming another
    /// ([`Plan::registry_host`](crate::kind::Plan::registry_host)) is 404.
    pub hostnames: Vec<String>,
    /// Index documents rewritten in memory are refused (502) beyond this size.
    pub max_document_size: u64,
    /// The most an index document is unpacked to while the digests it
    /// declares are learned (`kind::unpack`); past it learning stops.
    pub max_learned_size: u64,
    pub strategy: Strategy,
    /// `fastest`: how quickly old first-byte latency observations fade.
    pub latency_decay: Duration,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    /// Upstream attempts per miss, across mirrors (at least 1), hedges included.
    pub max_attempts: usize,
    /// When to start the next mirror beside one that has not answered yet.
    pub hedge: Hedge,
    pub immutable: Vec<String>,
    pub revalidate_after: Duration,
    /// When every mirror fails, a cached copy up to this old is served (`STALE`).
    pub max_stale: Duration,
    /// How long a 404 from every mirror is answered from memory.
    pub negative_ttl: Duration,
    /// A cached path the mirrors now answer 404 (or 410) for is still
    /// served, `STALE`, whatever its age.
    pub keep_deleted: bool,
    /// Upstream bodies larger than this are refused (502) and never cached.
    pub max_body_size: u64,
    /// Requests one mirror may have in flight from this proxy; `None` = no limit.
    pub mirror_max_in_flight: Option<usize>,
    /// Artifacts whose digest no index declared are refused (403).
    pub require_declared_hash: bool,
    /// The sha256 of an immutable artifact's first download becomes its
    /// declared digest when nothing else declares one (`pin_on_first_use`).
    pub pin_on_first_use: bool,
    /// Which versions are served (snapshots, releases or both); the other
    /// kind is 404 without asking upstream.
    pub version_policy: VersionPolicy,
    pub health: HealthConfig,
    pub auth: UpstreamAuth,
    /// An oci remote's registry host as containerd names it in `?ns=`
    /// (`docker.io`, `ghcr.io`): requests carrying it come here.
    pub registry: Option<String>,
    /// Token services on other hosts than the mirrors that an oci remote's
    /// credentials may be sent to (a challenge naming any other gets none).
    pub token_realms: Vec<Url>,
    /// `files` or `sumdb` bases that get `auth` too although they are on
    /// another origin than every mirror (`credentials_for`).
    pub credentials_for: Vec<Url>,
    /// What the remote refuses to serve: young releases, denied packages.
    pub guard: GuardConfig,
    /// Who may read it.
    pub access: RemoteAccess,
    /// An lfs remote's batch rules (defaults elsewhere, where unused).
    pub lfs: LfsConfig,
    /// The remote of an `[[advisories]]` feed: each mirror URL is the
    /// feed's file itself (asked for as it is, no path appended), and no
    /// client request reaches it.
    pub feed: bool,
}

/// An lfs remote's batch rules: `lfs_uploads` and `lfs_grant_ttl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LfsConfig {
    /// Upload batches are forwarded upstream as sent (`pass`); else 405.
    pub pass_uploads: bool,
    /// An upstream's yes for a repository and credential is taken this long
    /// before the upstream is asked again (`lfs_grant_ttl`).
    pub grant_ttl: Duration,
}

impl Default for LfsConfig {
    fn default() -> LfsConfig {
        LfsConfig {
            pass_uploads: false,
            grant_ttl: Duration::from_secs(60),
        }
    }
}

impl RemoteConfig {
    /// Whether `auth` may go to `url`: it is on the origin (scheme, host,
    /// port) of one of the `mirrors` or of a `credentials_for` base. A
    /// `files` or `sumdb` host elsewhere (a CDN, a public checksum database)
    /// gets none.
    pub fn sends_credentials_to(&self, url: &Url) -> bool {
        let wanted = origin(url);
        self.mirrors
            .iter()
            .chain(&self.credentials_for)
            .any(|base| origin(base) == wanted)
    }
}

/// A URL's origin as credentials are scoped to it: scheme, host (both
/// lower-case) and port (the scheme's default when none is written).
pub fn origin(url: &Url) -> (String, String, Option<u16>) {
    (
        url.scheme().to_ascii_lowercase(),
        url.host_str().unwrap_or_default().to_ascii_lowercase(),
        url.port_or_known_default(),
    )
}

/// Hedged attempts (`hedge_after`): when the mirror tried first has not sent
/// its response head after this delay, the next mirror is started beside it
/// and the first head wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hedge {
    /// From what the proxy measured: a multiple of the mirror's peak-EWMA
    /// first-byte time, clamped (the default).
    Auto,
    /// A fixed delay.
    After(Duration),
    /// `"off"`: a mirror is given its whole `first_byte_timeout`.
    Off,
}

/// Passive (and optional active) health checking of a remote's mirrors.
#[derive(Debug, Clone)]
pub struct HealthConfig {
    /// Consecutive failures that eject a mirror.
    pub eject_after: u32,
    /// First ejection's length; each repeat doubles it, up to `cooldown_max`.
    pub cooldown: Duration,
    pub cooldown_max: Duration,
    /// Active probe: `GET {mirror}/{probe_path}` every `probe_interval`.
    pub probe_path: Option<String>,
    pub probe_interval: Duration,
}

/// A value that must never be printed: `Debug` shows `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Credentials sent to a remote's mirrors (and to no other host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAuth {
    None,
    Basic { username: String, password: Secret },
    Bearer(Secret),
}

/// A configuration error: where (file, line) and which key, then what is wrong.
#[derive(Debug)]
pub struct ConfigError {
    pub origin: String,
    pub line: Option<usize>,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: ", self.origin, line)?,
            None => write!(f, "{}: ", self.origin)?,
        }
        if self.key.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "`{}`: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            origin: origin.clone(),
            line: None,
            key: String::new(),
            message: format!("cannot read the file: {e}"),
        })?;
        Config::parse(&text, &origin)
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            ConfigError {
                origin: origin.to_string(),
                line,
                key: String::new(),
                message: e.message().to_string(),
            }
        })?;
        Validator { text, origin }.config(raw)
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}
