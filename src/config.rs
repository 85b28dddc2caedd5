//! Configuration: the TOML file as written (`Raw*`, serde, unknown keys refused),
//! then one validated [`Config`] built once, with errors that name the key and line.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use url::Url;

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
}

#[derive(Debug, Clone)]
pub struct MetadataConfig {
    pub url: String,
    /// Entries held by the in-memory metadata cache in front of the database.
    pub cache_entries: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteKind {
    Generic,
    Pypi,
    Npm,
    Cargo,
    Apt,
    Go,
}

impl RemoteKind {
    pub fn parse(name: &str) -> Option<RemoteKind> {
        Some(match name {
            "generic" => RemoteKind::Generic,
            "pypi" => RemoteKind::Pypi,
            "npm" => RemoteKind::Npm,
            "cargo" => RemoteKind::Cargo,
            "apt" => RemoteKind::Apt,
            "go" => RemoteKind::Go,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RemoteKind::Generic => "generic",
            RemoteKind::Pypi => "pypi",
            RemoteKind::Npm => "npm",
            RemoteKind::Cargo => "cargo",
            RemoteKind::Apt => "apt",
            RemoteKind::Go => "go",
        }
    }

    /// The separate download host of the public registry, when it has one.
    pub fn default_files(self) -> &'static [&'static str] {
        match self {
            RemoteKind::Pypi => &["https://files.pythonhosted.org"],
            RemoteKind::Cargo => &["https://static.crates.io/crates"],
            _ => &[],
        }
    }
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
    pub kind: RemoteKind,
    /// Mirror base URLs, without a trailing slash.
    pub mirrors: Vec<Url>,
    /// Mirrors of the separate download host (pypi's files host, cargo's
    /// `dl`); served under `/{name}/~files/…`. Empty when there is none.
    pub files: Vec<Url>,
    /// Index documents rewritten in memory are refused (502) beyond this size.
    pub max_document_size: u64,
    pub strategy: Strategy,
    /// `fastest`: how quickly old first-byte latency observations fade.
    pub latency_decay: Duration,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    /// Upstream attempts per miss, across mirrors (at least 1).
    pub max_attempts: usize,
    pub immutable: Vec<String>,
    pub revalidate_after: Duration,
    /// When every mirror fails, a cached copy up to this old is served (`STALE`).
    pub max_stale: Duration,
    /// How long a 404 from every mirror is answered from memory.
    pub negative_ttl: Duration,
    /// Upstream bodies larger than this are refused (502) and never cached.
    pub max_body_size: u64,
    /// Requests one mirror may have in flight from this proxy; `None` = no limit.
    pub mirror_max_in_flight: Option<usize>,
    pub health: HealthConfig,
    pub auth: UpstreamAuth,
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

// ---- the file as written ----------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    storage: RawStorage,
    #[serde(default)]
    metadata: RawMetadata,
    #[serde(default)]
    log: RawLog,
    redis: Option<RawRedis>,
    #[serde(default, rename = "remote")]
    remotes: Vec<Spanned<RawRemote>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawServer {
    listen: Spanned<String>,
    public_url: Option<Spanned<String>>,
    admin_token: Option<String>,
    shutdown_timeout: HumanDuration,
    header_read_timeout: HumanDuration,
    max_connections: usize,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: Spanned::new(0..0, "127.0.0.1:8080".to_string()),
            public_url: None,
            admin_token: None,
            shutdown_timeout: HumanDuration(Duration::from_secs(10)),
            header_read_timeout: HumanDuration(Duration::from_secs(10)),
            max_connections: 4096,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedis {
    url: Spanned<String>,
    #[serde(default = "default_redis_timeout")]
    timeout: HumanDuration,
    #[serde(default = "default_lock_ttl")]
    lock_ttl: HumanDuration,
    #[serde(default = "default_lock_wait")]
    lock_wait: HumanDuration,
    #[serde(default = "default_entry_ttl")]
    entry_ttl: HumanDuration,
}

fn default_redis_timeout() -> HumanDuration {
    HumanDuration(Duration::from_millis(250))
}
fn default_lock_ttl() -> HumanDuration {
    HumanDuration(Duration::from_secs(10))
}
fn default_lock_wait() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}
fn default_entry_ttl() -> HumanDuration {
    HumanDuration(Duration::from_secs(3600))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLog {
    format: LogFormat,
    level: String,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            format: LogFormat::Text,
            level: "info".to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawStorage {
    path: PathBuf,
    max_size: HumanSize,
    memory_cache_size: HumanSize,
    memory_object_max: HumanSize,
    url: Option<Spanned<String>>,
    endpoint: Option<String>,
    region: String,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
}

impl Default for RawStorage {
    fn default() -> Self {
        RawStorage {
            path: PathBuf::from("data/store"),
            max_size: HumanSize(20 * 1024 * 1024 * 1024),
            memory_cache_size: HumanSize(48 * 1024 * 1024),
            memory_object_max: HumanSize(1024 * 1024),
            url: None,
            endpoint: None,
            region: "us-east-1".to_string(),
            access_key_id: None,
            secret_access_key: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawMetadata {
    url: Spanned<String>,
    cache_entries: u64,
}

impl Default for RawMetadata {
    fn default() -> Self {
        RawMetadata {
            url: Spanned::new(0..0, "sqlite://data/meta.db".to_string()),
            cache_entries: 100_000,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRemote {
    name: Spanned<String>,
    #[serde(default = "default_kind")]
    kind: Spanned<String>,
    mirrors: Spanned<Vec<Spanned<String>>>,
    files: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default = "default_max_document_size")]
    max_document_size: HumanSize,
    #[serde(default = "default_strategy")]
    strategy: Strategy,
    #[serde(default = "default_latency_decay")]
    latency_decay: HumanDuration,
    #[serde(default = "default_connect_timeout")]
    connect_timeout: HumanDuration,
    #[serde(default = "default_first_byte_timeout")]
    first_byte_timeout: HumanDuration,
    #[serde(default = "default_idle_timeout")]
    idle_timeout: HumanDuration,
    max_attempts: Option<Spanned<usize>>,
    #[serde(default)]
    immutable: Vec<Spanned<String>>,
    #[serde(default = "default_revalidate_after")]
    revalidate_after: HumanDuration,
    #[serde(default = "default_max_stale")]
    max_stale: HumanDuration,
    #[serde(default = "default_negative_ttl")]
    negative_ttl: HumanDuration,
    #[serde(default = "default_max_body_size")]
    max_body_size: HumanSize,
    #[serde(default)]
    mirror_max_in_flight: usize,
    #[serde(default = "default_eject_after")]
    eject_after: u32,
    #[serde(default = "default_eject_cooldown")]
    eject_cooldown: HumanDuration,
    #[serde(default = "default_eject_cooldown_max")]
    eject_cooldown_max: HumanDuration,
    probe_path: Option<String>,
    #[serde(default = "default_probe_interval")]
    probe_interval: HumanDuration,
    username: Option<String>,
    password: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    bearer_token: Option<Spanned<String>>,
    bearer_token_env: Option<Spanned<String>>,
}

fn default_max_document_size() -> HumanSize {
    HumanSize(64 * 1024 * 1024)
}
fn default_max_stale() -> HumanDuration {
    HumanDuration(Duration::from_secs(7 * 24 * 3600))
}
fn default_negative_ttl() -> HumanDuration {
    HumanDuration(Duration::from_secs(60))
}
fn default_max_body_size() -> HumanSize {
    HumanSize(8 * 1024 * 1024 * 1024)
}
fn default_eject_after() -> u32 {
    3
}
fn default_eject_cooldown() -> HumanDuration {
    HumanDuration(Duration::from_secs(10))
}
fn default_eject_cooldown_max() -> HumanDuration {
    HumanDuration(Duration::from_secs(300))
}
fn default_probe_interval() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}

fn default_kind() -> Spanned<String> {
    Spanned::new(0..0, "generic".to_string())
}
fn default_strategy() -> Strategy {
    Strategy::Single
}
fn default_latency_decay() -> HumanDuration {
    HumanDuration(Duration::from_secs(10))
}
fn default_connect_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(5))
}
fn default_first_byte_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}
fn default_idle_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}
fn default_revalidate_after() -> HumanDuration {
    HumanDuration(Duration::from_secs(600))
}

/// A duration written for people ("5m", "30s"), parsed by `humantime`.
#[derive(Clone, Copy)]
struct HumanDuration(Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text)
            .map(HumanDuration)
            .map_err(|e| serde::de::Error::custom(format!("invalid duration {text:?}: {e}")))
    }
}

/// A size written for people ("20GiB", "512MB"), parsed by `bytesize`.
#[derive(Clone, Copy)]
struct HumanSize(u64);

impl<'de> Deserialize<'de> for HumanSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse::<bytesize::ByteSize>()
            .map(|s| HumanSize(s.as_u64()))
            .map_err(|e| serde::de::Error::custom(format!("invalid size {text:?}: {e}")))
    }
}

// ---- validation ---------------------------------------------------------------

struct Validator<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Validator<'_> {
    fn error<T>(
        &self,
        key: impl Into<String>,
        span: std::ops::Range<usize>,
        message: impl Into<String>,
    ) -> Result<T, ConfigError> {
        Err(ConfigError {
            origin: self.origin.to_string(),
            line: (span.end > 0).then(|| line_of(self.text, span.start)),
            key: key.into(),
            message: message.into(),
        })
    }

    fn config(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let server = self.server(raw.server)?;
        let metadata_url = raw.metadata.url.get_ref().trim().to_string();
        if !(metadata_url.starts_with("sqlite:")
            || metadata_url.starts_with("postgres://")
            || metadata_url.starts_with("postgresql://"))
        {
            return self.error(
                "metadata.url",
                raw.metadata.url.span(),
                "must start with sqlite:// or postgres://",
            );
        }
        if raw.remotes.is_empty() {
            return self.error(
                "remote",
                0..0,
                "no [[remote]] is configured; add at least one",
            );
        }
        let mut remotes: Vec<RemoteConfig> = Vec::with_capacity(raw.remotes.len());
        for (i, remote) in raw.remotes.into_iter().enumerate() {
            let remote = self.remote(i, remote.into_inner())?;
            remotes.push(remote);
        }
        for (i, r) in remotes.iter().enumerate() {
            if remotes[..i].iter().any(|o| o.name == r.name) {
                return self.error(
                    format!("remote[{i}].name"),
                    0..0,
                    format!("duplicate remote name {:?}", r.name),
                );
            }
        }
        let redis = match raw.redis {
            None => None,
            Some(r) => {
                let url = r.url.get_ref().trim().to_string();
                if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                    return self.error(
                        "redis.url",
                        r.url.span(),
                        "must start with redis:// or rediss://",
                    );
                }
                Some(RedisConfig {
                    url,
                    timeout: r.timeout.0,
                    lock_ttl: r.lock_ttl.0.max(Duration::from_millis(300)),
                    lock_wait: r.lock_wait.0,
                    entry_ttl: r.entry_ttl.0,
                })
            }
        };
        Ok(Config {
            server,
            redis,
            log: LogConfig {
                format: raw.log.format,
                level: raw.log.level,
            },
            storage: StorageConfig {
                s3: match raw.storage.url {
                    None => None,
                    Some(url) if url.get_ref().starts_with("s3://") && url.get_ref().len() > 5 => {
                        Some(S3Config {
                            url: url.get_ref().clone(),
                            endpoint: raw.storage.endpoint,
                            region: raw.storage.region,
                            access_key_id: raw.storage.access_key_id,
                            secret_access_key: raw.storage.secret_access_key.map(Secret),
                        })
                    }
                    Some(url) => {
                        return self.error(
                            "storage.url",
                            url.span(),
                            "must be s3://bucket[/prefix]",
                        )
                    }
                },
                path: raw.storage.path,
                max_size: raw.storage.max_size.0,
                memory_cache_size: raw.storage.memory_cache_size.0,
                memory_object_max: raw.storage.memory_object_max.0,
            },
            metadata: MetadataConfig {
                url: metadata_url,
                cache_entries: raw.metadata.cache_entries.max(1),
            },
            remotes,
        })
    }

    fn server(&self, raw: RawServer) -> Result<ServerConfig, ConfigError> {
        let listen = match raw.listen.get_ref().parse::<SocketAddr>() {
            Ok(addr) => addr,
            Err(e) => {
                return self.error(
                    "server.listen",
                    raw.listen.span(),
                    format!("{e}; expected host:port such as \"127.0.0.1:8080\""),
                )
            }
        };
        let public_url = match raw.public_url {
            None => None,
            Some(s) => match Url::parse(s.get_ref()) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => Some(u),
                Ok(_) => {
                    return self.error(
                        "server.public_url",
                        s.span(),
                        "must be an http:// or https:// URL",
                    )
                }
                Err(e) => {
                    return self.error("server.public_url", s.span(), format!("not a URL: {e}"))
                }
            },
        };
        Ok(ServerConfig {
            listen,
            public_url,
            admin_token: raw.admin_token.filter(|t| !t.is_empty()),
            shutdown_timeout: raw.shutdown_timeout.0,
            header_read_timeout: raw.header_read_timeout.0,
            max_connections: raw.max_connections.max(1),
        })
    }

    fn remote(&self, i: usize, raw: RawRemote) -> Result<RemoteConfig, ConfigError> {
        let auth = self.auth(i, &raw)?;
        let name = raw.name.get_ref().clone();
        let name_ok = !name.is_empty()
            && name != "-"
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok {
            return self.error(
                format!("remote[{i}].name"),
                raw.name.span(),
                format!("{name:?} is not a valid remote name (letters, digits, '-', '_', '.'; not \"-\")"),
            );
        }
        let kind = match RemoteKind::parse(raw.kind.get_ref()) {
            Some(kind) => kind,
            None => {
                return self.error(
                    format!("remote[{i}].kind"),
                    raw.kind.span(),
                    format!(
                        "unknown kind {:?}; expected one of generic, pypi, npm, cargo, apt, go",
                        raw.kind.get_ref()
                    ),
                );
            }
        };
        let mirrors = self.mirror_list(&format!("remote[{i}].mirrors"), &raw.mirrors)?;
        let files = match &raw.files {
            // `files = []` says: this registry has no separate files host.
            Some(files) if files.get_ref().is_empty() => Vec::new(),
            Some(files) => self.mirror_list(&format!("remote[{i}].files"), files)?,
            None => kind
                .default_files()
                .iter()
                .map(|u| Url::parse(u).expect("default URLs parse"))
                .collect(),
        };
        let max_document_size = raw.max_document_size.0;
        let max_attempts = match raw.max_attempts {
            None => mirrors.len(),
            Some(n) if *n.get_ref() >= 1 => *n.get_ref(),
            Some(n) => {
                return self.error(
                    format!("remote[{i}].max_attempts"),
                    n.span(),
                    "must be at least 1",
                )
            }
        };
        let mut immutable = Vec::with_capacity(raw.immutable.len());
        for (j, p) in raw.immutable.iter().enumerate() {
            if let Err(e) = globset::Glob::new(p.get_ref()) {
                return self.error(
                    format!("remote[{i}].immutable[{j}]"),
                    p.span(),
                    format!("bad pattern: {e}"),
                );
            }
            immutable.push(p.get_ref().clone());
        }
        Ok(RemoteConfig {
            name,
            kind,
            mirrors,
            files,
            max_document_size,
            strategy: raw.strategy,
            latency_decay: raw.latency_decay.0,
            connect_timeout: raw.connect_timeout.0,
            first_byte_timeout: raw.first_byte_timeout.0,
            idle_timeout: raw.idle_timeout.0,
            max_attempts,
            immutable,
            revalidate_after: raw.revalidate_after.0,
            max_stale: raw.max_stale.0,
            negative_ttl: raw.negative_ttl.0,
            max_body_size: raw.max_body_size.0,
            mirror_max_in_flight: (raw.mirror_max_in_flight > 0)
                .then_some(raw.mirror_max_in_flight),
            health: HealthConfig {
                eject_after: raw.eject_after.max(1),
                cooldown: raw.eject_cooldown.0,
                cooldown_max: raw.eject_cooldown_max.0.max(raw.eject_cooldown.0),
                probe_path: raw
                    .probe_path
                    .map(|p| p.trim_start_matches('/').to_string()),
                probe_interval: raw.probe_interval.0,
            },
            auth,
        })
    }

    /// A list of 1..=MAX_MIRRORS distinct http(s) base URLs.
    fn mirror_list(
        &self,
        key: &str,
        list: &Spanned<Vec<Spanned<String>>>,
    ) -> Result<Vec<Url>, ConfigError> {
        let raw = list.get_ref();
        if raw.is_empty() {
            return self.error(key, list.span(), "lists no mirror; give at least one URL");
        }
        if raw.len() > MAX_MIRRORS {
            return self.error(
                key,
                list.span(),
                format!(
                    "lists {} mirrors; at most {MAX_MIRRORS} are supported",
                    raw.len()
                ),
            );
        }
        let mut urls: Vec<Url> = Vec::with_capacity(raw.len());
        for (j, m) in raw.iter().enumerate() {
            let key = format!("{key}[{j}]");
            let url = match Url::parse(m.get_ref().trim_end_matches('/')) {
                Ok(u) => u,
                Err(e) => {
                    return self.error(
                        key,
                        m.span(),
                        format!("{:?} is not a URL: {e}", m.get_ref()),
                    )
                }
            };
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return self.error(
                    key,
                    m.span(),
                    "must be an http:// or https:// URL with a host",
                );
            }
            if url.query().is_some() || url.fragment().is_some() {
                return self.error(key, m.span(), "must not have a query or fragment");
            }
            if urls.contains(&url) {
                return self.error(key, m.span(), "is listed twice");
            }
            urls.push(url);
        }
        Ok(urls)
    }

    /// A secret given inline (`key`) or by environment variable (`key_env`), not both.
    fn secret(
        &self,
        i: usize,
        key: &str,
        inline: &Option<Spanned<String>>,
        env: &Option<Spanned<String>>,
    ) -> Result<Option<Secret>, ConfigError> {
        match (inline, env) {
            (Some(_), Some(e)) => self.error(
                format!("remote[{i}].{key}_env"),
                e.span(),
                format!("give `{key}` or `{key}_env`, not both"),
            ),
            (Some(v), None) => Ok(Some(Secret(v.get_ref().clone()))),
            (None, Some(e)) => match std::env::var(e.get_ref()) {
                Ok(v) => Ok(Some(Secret(v))),
                Err(_) => self.error(
                    format!("remote[{i}].{key}_env"),
                    e.span(),
                    format!("environment variable {} is not set", e.get_ref()),
                ),
            },
            (None, None) => Ok(None),
        }
    }

    fn auth(&self, i: usize, raw: &RawRemote) -> Result<UpstreamAuth, ConfigError> {
        let password = self.secret(i, "password", &raw.password, &raw.password_env)?;
        let token = self.secret(i, "bearer_token", &raw.bearer_token, &raw.bearer_token_env)?;
        match (&raw.username, password, token) {
            (Some(_), _, Some(_)) => self.error(
                format!("remote[{i}].bearer_token"),
                0..0,
                "give basic credentials (username) or a bearer token, not both",
            ),
            (Some(username), password, None) => Ok(UpstreamAuth::Basic {
                username: username.clone(),
                password: password.unwrap_or(Secret(String::new())),
            }),
            (None, Some(_), _) => self.error(
                format!("remote[{i}].username"),
                0..0,
                "a password needs a username",
            ),
            (None, None, Some(token)) => Ok(UpstreamAuth::Bearer(token)),
            (None, None, None) => Ok(UpstreamAuth::None),
        }
    }
}
