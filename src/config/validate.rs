//! The validator: raw structs in, one checked [`Config`] out, or an error
//! naming the key and its line.

use std::net::SocketAddr;
use std::time::Duration;

use toml::Spanned;
use url::Url;

use super::raw::*;
use super::*;
use crate::kind::oci::same_registry;
use crate::kind::{Kind, Protocol, VersionPolicy};
pub(super) struct Validator<'a> {
    pub(super) text: &'a str,
    pub(super) origin: &'a str,
}

impl Validator<'_> {
    pub(super) fn error<T>(
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

    pub(super) fn config(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let oci_root_remote = raw.server.oci_root_remote.clone();
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
        self.oci_keys(&remotes, oci_root_remote.as_ref())?;
        let auth = self.auth_table(raw.auth)?;
        let advisories = self.advisories(raw.advisories)?;
        let warnings = self.access_needs_users(&remotes, auth.as_ref())?;
        let feed_remotes = self.feed_remotes(&advisories, &remotes)?;
        remotes.extend(feed_remotes);
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
                buffer: raw.log.buffer.0,
                flush: match *raw.log.flush.get_ref() {
                    HumanDuration(flush) if !flush.is_zero() => flush,
                    _ => {
                        return self.error(
                            "log.flush",
                            raw.log.flush.span(),
                            "must be more than 0 (`log.buffer = \"0\"` writes every line at once)",
                        )
                    }
                },
            },
            storage: StorageConfig {
                s3: match raw.storage.url {
                    None => None,
                    Some(url) if url.get_ref().starts_with("s3://") && url.get_ref().len() > 5 => {
                        for (key, value) in [
                            ("storage.url", Some(&url)),
                            ("storage.endpoint", raw.storage.endpoint.as_ref()),
                        ] {
                            if let Some(value) = value
                                .filter(|v| Url::parse(v.get_ref()).is_ok_and(|u| has_userinfo(&u)))
                            {
                                return self.error(
                                    key,
                                    value.span(),
                                    "must not carry credentials (`user:password@`); give them as \
                                     `storage.access_key_id` and `storage.secret_access_key`",
                                );
                            }
                        }
                        Some(S3Config {
                            url: url.get_ref().clone(),
                            endpoint: raw.storage.endpoint.map(Spanned::into_inner),
                            region: raw.storage.region,
                            access_key_id: raw.storage.access_key_id,
                            secret_access_key: raw.storage.secret_access_key.map(Secret),
                            delete_delay: raw.storage.delete_delay.0,
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
                pack_below: raw.storage.pack_below.0,
                open_files: raw.storage.open_files,
            },
            metadata: MetadataConfig {
                url: metadata_url,
                cache_entries: raw.metadata.cache_entries.max(1),
                cache_memory: raw.metadata.cache_memory.0.max(1),
            },
            remotes,
            auth,
            advisories,
            warnings,
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
                Ok(u) if has_userinfo(&u) => {
                    return self.error(
                        "server.public_url",
                        s.span(),
                        "must not carry credentials (`user:password@`): it is written into \
                         documents served to every client",
                    )
                }
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
        let tls = self.tls(raw.tls_cert.as_ref(), raw.tls_key.as_ref())?;
        let trusted_proxies = self.trusted_proxies(&raw.trusted_proxies)?;
        Ok(ServerConfig {
            tls,
            trusted_proxies,
            listen,
            public_url,
            admin_token: raw.admin_token.filter(|t| !t.is_empty()),
            shutdown_timeout: raw.shutdown_timeout.0,
            header_read_timeout: raw.header_read_timeout.0,
            max_connections: raw.max_connections.max(1),
            max_fills: raw.max_fills.max(1),
            send_timeout: raw.send_timeout.0,
            body_read_timeout: raw.body_read_timeout.0,
            oci_root_remote: raw.oci_root_remote.map(Spanned::into_inner),
            history: raw.history,
        })
    }

    pub(super) fn remote(&self, i: usize, raw: RawRemote) -> Result<RemoteConfig, ConfigError> {
        let auth = self.auth(i, &raw)?;
        let guard = self.guard(i, &raw)?;
        let access = self.access(i, raw.access.as_ref())?;
        let name = raw.name.get_ref().clone();
        // `/v2/…` is the container registry API (`http::oci`).
        let name_ok = !name.is_empty()
            && name != "-"
            && name != "v2"
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok {
            return self.error(
                format!("remote[{i}].name"),
                raw.name.span(),
                format!("{name:?} is not a valid remote name (letters, digits, '-', '_', '.'; not \"-\" nor \"v2\")"),
            );
        }
        let kind = match Kind::named(raw.kind.get_ref()) {
            Some(kind) => kind,
            None => {
                let known: Vec<&str> = Kind::all().map(Kind::name).collect();
                return self.error(
                    format!("remote[{i}].kind"),
                    raw.kind.span(),
                    format!(
                        "unknown kind {:?}; expected one of {}",
                        raw.kind.get_ref(),
                        known.join(", ")
                    ),
                );
            }
        };
        let ecosystem = kind.ecosystem();
        let mirrors = self.mirror_list(&format!("remote[{i}].mirrors"), &raw.mirrors)?;
        // `files = []` says: this registry has no separate files host.
        let files = self.optional_mirror_list(
            &format!("remote[{i}].files"),
            raw.files.as_ref(),
            ecosystem.default_files(),
        )?;
        if let (Some(list), Some(refusal)) = (&raw.sumdb, ecosystem.refuses_key("sumdb")) {
            return self.error(format!("remote[{i}].sumdb"), list.span(), refusal);
        }
        // `sumdb = []`: `sumdb/…` paths go to the index mirrors as they are.
        let sumdb = self.optional_mirror_list(
            &format!("remote[{i}].sumdb"),
            raw.sumdb.as_ref(),
            ecosystem.default_sumdb(),
        )?;
        let hostnames = self.hostnames(i, &raw, ecosystem)?;
        if let (UpstreamAuth::Bearer(_), Some(refusal)) =
            (&auth, ecosystem.refuses_key("bearer_token"))
        {
            return self.error(format!("remote[{i}].bearer_token"), 0..0, refusal);
        }
        let registry = match (&raw.registry, ecosystem.refuses_key("registry")) {
            (Some(host), Some(refusal)) => {
                return self.error(format!("remote[{i}].registry"), host.span(), refusal);
            }
            (Some(host), None) if !is_registry_host(host.get_ref()) => {
                return self.error(
                    format!("remote[{i}].registry"),
                    host.span(),
                    "must be a registry host as containerd names it (`docker.io`, \
                     `registry.example.com:5000`), without a scheme or path",
                )
            }
            (Some(host), None) => Some(host.get_ref().to_ascii_lowercase()),
            (None, _) => None,
        };
        let lfs = self.lfs(i, &raw, ecosystem)?;
        let token_realms = self.optional_mirror_list(
            &format!("remote[{i}].token_realms"),
            raw.token_realms.as_ref(),
            &[],
        )?;
        let credentials_for = self.credentials_for(i, &raw, [&mirrors, &files, &sumdb])?;
        let max_document_size = raw.max_document_size.0;
        let max_attempts = match raw.max_attempts {
            // Every mirror of the largest set once: a files host with more
            // mirrors than the index gets to try them all.
            None => mirrors.len().max(files.len()).max(sumdb.len()),
            Some(n) if *n.get_ref() >= 1 => *n.get_ref(),
            Some(n) => {
                return self.error(
                    format!("remote[{i}].max_attempts"),
                    n.span(),
                    "must be at least 1",
                )
            }
        };
        let hedge = match &raw.hedge_after {
            None => Hedge::Auto,
            Some(text) => match text.get_ref().as_str() {
                "auto" => Hedge::Auto,
                "off" => Hedge::Off,
                other => match humantime::parse_duration(other) {
                    Ok(delay) if !delay.is_zero() => Hedge::After(delay),
                    _ => {
                        return self.error(
                            format!("remote[{i}].hedge_after"),
                            text.span(),
                            format!(
                                "{other:?} is not a duration (e.g. \"500ms\"), \"auto\" or \"off\""
                            ),
                        )
                    }
                },
            },
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
        let require_declared_hash = match raw.require_declared_hash {
            Some(flag) if *flag.get_ref() => {
                if let Some(refusal) = ecosystem.refuses_key("require_declared_hash") {
                    return self.error(
                        format!("remote[{i}].require_declared_hash"),
                        flag.span(),
                        refusal,
                    );
                }
                true
            }
            Some(flag) => *flag.get_ref(),
            None => false,
        };
        let version_policy = match &raw.version_policy {
            None => VersionPolicy::default(),
            Some(text) => match ecosystem.refuses_key("version_policy") {
                None => VersionPolicy::parse(text.get_ref()),
                Some(refusal) => Err(refusal),
            }
            .or_else(|e| self.error(format!("remote[{i}].version_policy"), text.span(), e))?,
        };
        Ok(RemoteConfig {
            name,
            kind,
            mirrors,
            files,
            sumdb,
            hostnames,
            max_document_size,
            max_learned_size: raw.max_learned_size.0,
            strategy: raw.strategy,
            latency_decay: raw.latency_decay.0,
            connect_timeout: raw.connect_timeout.0,
            first_byte_timeout: raw.first_byte_timeout.0,
            idle_timeout: raw.idle_timeout.0,
            max_attempts,
            hedge,
            immutable,
            revalidate_after: raw.revalidate_after.0,
            max_stale: raw.max_stale.0,
            negative_ttl: raw.negative_ttl.0,
            keep_deleted: raw.keep_deleted,
            max_body_size: raw.max_body_size.0,
            mirror_max_in_flight: (raw.mirror_max_in_flight > 0)
                .then_some(raw.mirror_max_in_flight),
            require_declared_hash,
            pin_on_first_use: raw.pin_on_first_use,
            version_policy,
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
            registry,
            token_realms,
            credentials_for,
            guard,
            access,
            lfs,
            feed: false,
        })
    }

    /// `lfs_uploads` (`refuse` or `pass`) and `lfs_grant_ttl`, lfs remotes only.
    fn lfs(
        &self,
        i: usize,
        raw: &RawRemote,
        ecosystem: &dyn crate::kind::Ecosystem,
    ) -> Result<LfsConfig, ConfigError> {
        let refusal = |key| ecosystem.refuses_key(key);
        let mut lfs = LfsConfig::default();
        if let Some(uploads) = &raw.lfs_uploads {
            let key = format!("remote[{i}].lfs_uploads");
            if let Some(refusal) = refusal("lfs_uploads") {
                return self.error(key, uploads.span(), refusal);
            }
            lfs.pass_uploads = match uploads.get_ref().as_str() {
                "refuse" => false,
                "pass" => true,
                _ => return self.error(key, uploads.span(), "must be \"refuse\" or \"pass\""),
            };
        }
        if let Some(ttl) = &raw.lfs_grant_ttl {
            if let Some(refusal) = refusal("lfs_grant_ttl") {
                return self.error(format!("remote[{i}].lfs_grant_ttl"), ttl.span(), refusal);
            }
            lfs.grant_ttl = ttl.get_ref().0;
        }
        Ok(lfs)
    }

    /// `server.oci_root_remote` names an oci remote; no two oci remotes
    /// answer for one `registry` host.
    fn oci_keys(
        &self,
        remotes: &[RemoteConfig],
        root: Option<&Spanned<String>>,
    ) -> Result<(), ConfigError> {
        if let Some(root) = root {
            let named = remotes.iter().find(|r| &r.name == root.get_ref());
            if !named.is_some_and(|r| r.kind.ecosystem().protocol() == Protocol::Registry) {
                return self.error(
                    "server.oci_root_remote",
                    root.span(),
                    format!("{:?} is not the name of an oci remote", root.get_ref()),
                );
            }
        }
        for (i, r) in remotes.iter().enumerate() {
            let Some(host) = &r.registry else { continue };
            let same = |o: &RemoteConfig| {
                o.registry
                    .as_deref()
                    .is_some_and(|h| same_registry(h, host))
            };
            if remotes[..i].iter().any(same) {
                return self.error(
                    format!("remote[{i}].registry"),
                    0..0,
                    format!("{host:?} is already the registry of another remote"),
                );
            }
        }
        Ok(())
    }

    /// `hostnames`: registry hosts as a provider source address names them
    /// (`registry.terraform.io`), lower case; the ecosystem's default when
    /// unset.
    fn hostnames(
        &self,
        i: usize,
        raw: &RawRemote,
        ecosystem: &dyn crate::kind::Ecosystem,
    ) -> Result<Vec<String>, ConfigError> {
        let Some(list) = &raw.hostnames else {
            return Ok(ecosystem
                .default_hostnames()
                .iter()
                .map(|h| h.to_string())
                .collect());
        };
        if let Some(refusal) = ecosystem.refuses_key("hostnames") {
            return self.error(format!("remote[{i}].hostnames"), list.span(), refusal);
        }
        let mut hostnames = Vec::with_capacity(list.get_ref().len());
        for (j, host) in list.get_ref().iter().enumerate() {
            let text = host.get_ref().trim();
            let ok = !text.is_empty()
                && text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':'));
            if !ok {
                return self.error(
                    format!("remote[{i}].hostnames[{j}]"),
                    host.span(),
                    "must be a registry hostname as a provider address names it \
                     (`registry.terraform.io`), without a scheme or path",
                );
            }
            hostnames.push(text.to_ascii_lowercase());
        }
        Ok(hostnames)
    }
}

/// A host, perhaps with a port: what containerd sends as `?ns=`.
fn is_registry_host(host: &str) -> bool {
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
}

/// Whether `url` has a user name or password (`https://user:pass@host`).
/// Credentials in a URL travel with it into every place the URL is shown;
/// they have keys of their own instead.
pub(super) fn has_userinfo(url: &Url) -> bool {
    !url.username().is_empty() || url.password().is_some()
}
