//! The config file as written: serde structs that mirror the TOML, with
//! `deny_unknown_fields`, spans for error lines, and the defaults. Only the
//! validator reads them.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{LogFormat, Strategy};
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) storage: RawStorage,
    #[serde(default)]
    pub(super) metadata: RawMetadata,
    #[serde(default)]
    pub(super) log: RawLog,
    pub(super) redis: Option<RawRedis>,
    #[serde(default, rename = "remote")]
    pub(super) remotes: Vec<Spanned<RawRemote>>,
    pub(super) auth: Option<RawAuth>,
    #[serde(default)]
    pub(super) advisories: Vec<Spanned<RawAdvisories>>,
}

/// One `[[advisories]]` feed as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdvisories {
    pub(super) name: Spanned<String>,
    pub(super) urls: Spanned<Vec<Spanned<String>>>,
    #[serde(default = "default_advisory_refresh")]
    pub(super) refresh: HumanDuration,
}

fn default_advisory_refresh() -> HumanDuration {
    HumanDuration(Duration::from_secs(3600))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawServer {
    pub(super) listen: Spanned<String>,
    pub(super) public_url: Option<Spanned<String>>,
    pub(super) admin_token: Option<String>,
    pub(super) shutdown_timeout: HumanDuration,
    pub(super) header_read_timeout: HumanDuration,
    pub(super) max_connections: usize,
    pub(super) max_fills: usize,
    pub(super) send_timeout: HumanDuration,
    pub(super) body_read_timeout: HumanDuration,
    pub(super) oci_root_remote: Option<Spanned<String>>,
    pub(super) tls_cert: Option<Spanned<String>>,
    pub(super) tls_key: Option<Spanned<String>>,
    pub(super) trusted_proxies: Vec<Spanned<String>>,
    pub(super) history: bool,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: Spanned::new(0..0, "127.0.0.1:8080".to_string()),
            public_url: None,
            admin_token: None,
            shutdown_timeout: HumanDuration(Duration::from_secs(10)),
            max_fills: 256,
            send_timeout: HumanDuration(Duration::from_secs(60)),
            body_read_timeout: HumanDuration(Duration::from_secs(60)),
            header_read_timeout: HumanDuration(Duration::from_secs(10)),
            max_connections: 4096,
            oci_root_remote: None,
            tls_cert: None,
            tls_key: None,
            trusted_proxies: Vec::new(),
            history: true,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRedis {
    pub(super) url: Spanned<String>,
    #[serde(default = "default_redis_timeout")]
    pub(super) timeout: HumanDuration,
    #[serde(default = "default_lock_ttl")]
    pub(super) lock_ttl: HumanDuration,
    #[serde(default = "default_lock_wait")]
    pub(super) lock_wait: HumanDuration,
    #[serde(default = "default_entry_ttl")]
    pub(super) entry_ttl: HumanDuration,
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
pub(super) struct RawLog {
    pub(super) format: LogFormat,
    pub(super) level: String,
    pub(super) buffer: HumanSize,
    pub(super) flush: Spanned<HumanDuration>,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            format: LogFormat::Text,
            level: "info".to_string(),
            buffer: HumanSize(64 * 1024),
            flush: Spanned::new(0..0, HumanDuration(Duration::from_secs(1))),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawStorage {
    pub(super) path: PathBuf,
    pub(super) max_size: HumanSize,
    pub(super) memory_cache_size: HumanSize,
    pub(super) memory_object_max: HumanSize,
    pub(super) pack_below: HumanSize,
    pub(super) open_files: usize,
    pub(super) url: Option<Spanned<String>>,
    pub(super) endpoint: Option<Spanned<String>>,
    pub(super) region: String,
    pub(super) access_key_id: Option<String>,
    pub(super) secret_access_key: Option<String>,
    pub(super) delete_delay: HumanDuration,
}

impl Default for RawStorage {
    fn default() -> Self {
        RawStorage {
            path: PathBuf::from("data/store"),
            max_size: HumanSize(20 * 1024 * 1024 * 1024),
            memory_cache_size: HumanSize(48 * 1024 * 1024),
            memory_object_max: HumanSize(1024 * 1024),
            pack_below: HumanSize(64 * 1024),
            open_files: 4096,
            url: None,
            endpoint: None,
            region: "us-east-1".to_string(),
            access_key_id: None,
            secret_access_key: None,
            delete_delay: HumanDuration(Duration::from_secs(3600)),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawMetadata {
    pub(super) url: Spanned<String>,
    pub(super) cache_entries: u64,
    pub(super) cache_memory: HumanSize,
}

impl Default for RawMetadata {
    fn default() -> Self {
        RawMetadata {
            url: Spanned::new(0..0, "sqlite://data/meta.db".to_string()),
            cache_entries: 100_000,
            cache_memory: HumanSize(32 * 1024 * 1024),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRemote {
    pub(super) name: Spanned<String>,
    #[serde(default = "default_kind")]
    pub(super) kind: Spanned<String>,
    pub(super) mirrors: Spanned<Vec<Spanned<String>>>,
    pub(super) files: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) sumdb: Option<Spanned<Vec<Spanned<String>>>>,
    /// The registry hostnames a terraform remote serves (`{hostname}/…`).
    pub(super) hostnames: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default = "default_max_document_size")]
    pub(super) max_document_size: HumanSize,
    #[serde(default = "default_max_learned_size")]
    pub(super) max_learned_size: HumanSize,
    #[serde(default = "default_strategy")]
    pub(super) strategy: Strategy,
    #[serde(default = "default_latency_decay")]
    pub(super) latency_decay: HumanDuration,
    #[serde(default = "default_connect_timeout")]
    pub(super) connect_timeout: HumanDuration,
    #[serde(default = "default_first_byte_timeout")]
    pub(super) first_byte_timeout: HumanDuration,
    #[serde(default = "default_idle_timeout")]
    pub(super) idle_timeout: HumanDuration,
    pub(super) max_attempts: Option<Spanned<usize>>,
    pub(super) hedge_after: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) immutable: Vec<Spanned<String>>,
    #[serde(default = "default_revalidate_after")]
    pub(super) revalidate_after: HumanDuration,
    #[serde(default = "default_max_stale")]
    pub(super) max_stale: HumanDuration,
    #[serde(default = "default_negative_ttl")]
    pub(super) negative_ttl: HumanDuration,
    #[serde(default)]
    pub(super) keep_deleted: bool,
    #[serde(default = "default_max_body_size")]
    pub(super) max_body_size: HumanSize,
    #[serde(default)]
    pub(super) mirror_max_in_flight: usize,
    pub(super) require_declared_hash: Option<Spanned<bool>>,
    /// Immutable artifacts nothing declares a digest for keep the sha256 of
    /// their first download as their declared digest.
    #[serde(default = "default_pin_on_first_use")]
    pub(super) pin_on_first_use: bool,
    /// `releases`, `snapshots` or `both` (kinds with snapshots: maven).
    pub(super) version_policy: Option<Spanned<String>>,
    #[serde(default = "default_eject_after")]
    pub(super) eject_after: u32,
    #[serde(default = "default_eject_cooldown")]
    pub(super) eject_cooldown: HumanDuration,
    #[serde(default = "default_eject_cooldown_max")]
    pub(super) eject_cooldown_max: HumanDuration,
    pub(super) probe_path: Option<String>,
    #[serde(default = "default_probe_interval")]
    pub(super) probe_interval: HumanDuration,
    pub(super) username: Option<String>,
    pub(super) password: Option<Spanned<String>>,
    pub(super) password_env: Option<Spanned<String>>,
    pub(super) bearer_token: Option<Spanned<String>>,
    pub(super) bearer_token_env: Option<Spanned<String>>,
    pub(super) registry: Option<Spanned<String>>,
    /// An lfs remote's upload batches: `refuse` (405) or `pass`.
    pub(super) lfs_uploads: Option<Spanned<String>>,
    /// How long an lfs remote takes an upstream's yes for a repository and
    /// credential as still good.
    pub(super) lfs_grant_ttl: Option<Spanned<HumanDuration>>,
    pub(super) token_realms: Option<Spanned<Vec<Spanned<String>>>>,
    /// `files` or `sumdb` bases on another origin than the mirrors that get
    /// the remote's credentials too.
    pub(super) credentials_for: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) min_release_age: Option<HumanDuration>,
    #[serde(default)]
    pub(super) cooldown_exempt: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) deny: Vec<Spanned<String>>,
    pub(super) allow: Option<Vec<Spanned<String>>>,
    /// Advisory classes (`malicious`, `critical`, …) and ids refused.
    pub(super) quarantine: Option<Spanned<Vec<Spanned<String>>>>,
    /// Advisory ids and `pkg@version`s served whatever the quarantine says.
    pub(super) quarantine_allow: Option<Spanned<Vec<Spanned<String>>>>,
    /// A date (`2025-09-08`) or RFC 3339 time: only versions published after it are quarantined.
    pub(super) quarantine_since: Option<Spanned<String>>,
    pub(super) access: Option<Spanned<RawAccess>>,
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
pub(super) struct HumanDuration(pub(super) Duration);

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
pub(super) struct HumanSize(pub(super) u64);

impl<'de> Deserialize<'de> for HumanSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse::<bytesize::ByteSize>()
            .map(|s| HumanSize(s.as_u64()))
            .map_err(|e| serde::de::Error::custom(format!("invalid size {text:?}: {e}")))
    }
}

fn default_pin_on_first_use() -> bool {
    true
}

fn default_max_learned_size() -> HumanSize {
    HumanSize(crate::kind::unpack::DEFAULT_MAX_UNPACKED)
}

/// `[auth]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    pub(super) htpasswd: Spanned<String>,
}

/// `access = "authenticated"` or `access = ["ci", "release"]`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawAccess {
    One(String),
    Many(Vec<String>),
}
