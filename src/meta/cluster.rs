//! Coordination between instances through Redis (`[redis] url`, optional):
//! a lock per artifact so concurrent cold misses on several instances make one
//! upstream fetch, a shared cache of metadata entries in front of the
//! database, and invalidations published to every instance's in-memory cache.
//!
//! Redis is a help, never a dependency: every operation has a short timeout,
//! and when Redis is down or slow the instance falls back to what it does
//! alone (local single-flight, database lookups), with a warning and the
//! `redis_errors_total` metric — never a 5xx to a client. The connection is
//! re-established in the background.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures_util::StreamExt;
use prometheus_client::metrics::counter::Counter;
use redis::aio::ConnectionManager;
use redis::AsyncCommands;

use super::entry::Entry;
use super::purge::Scope;
use crate::config::RedisConfig;
use crate::store::Digest;

pub const CHANNEL: &str = "mirrorcache:invalidate";
/// Invalidation message meaning "drop every cached entry".
pub(crate) const ALL: &str = "*";
/// The start of a purge message: `purge␟<instance>␟key:<key>`,
/// `…␟remote:<remote>` or `…␟all`. Unlike a change, a purge makes every
/// instance take its generation (see `super::purge`), so its fills of the
/// scope are neither joined nor committed.
const PURGE: &str = "purge\u{1f}";

/// The message telling every instance of a purge of `scope` by `instance`.
pub fn purge_message(instance: &str, scope: &Scope) -> String {
    let what = match scope {
        Scope::Key(key) => format!("key:{key}"),
        Scope::Remote(remote) => format!("remote:{remote}"),
        Scope::All => "all".to_string(),
    };
    format!("{PURGE}{instance}\u{1f}{what}")
}

/// The scope of a purge message and the instance that sent it.
pub(crate) fn purge_scope(message: &str) -> Option<(&str, Scope)> {
    let (instance, what) = message.strip_prefix(PURGE)?.split_once('\u{1f}')?;
    let scope = if what == "all" {
        Scope::All
    } else if let Some(key) = what.strip_prefix("key:") {
        Scope::Key(key.to_string())
    } else {
        Scope::Remote(what.strip_prefix("remote:")?.to_string())
    };
    Some((instance, scope))
}

pub struct Cluster {
    client: redis::Client,
    conn: ArcSwapOption<ConnectionManager>,
    config: RedisConfig,
    /// Unique per process: lock tokens start with it.
    instance: String,
    next_token: AtomicU64,
    pub errors: Counter,
}

/// The outcome of asking for an artifact's lock.
pub enum LockOutcome {
    Acquired(Lock),
    /// Another instance is filling this artifact.
    Held,
    /// Redis did not answer: go on alone.
    Unavailable,
}

/// A held lock; renewed by [`Cluster::hold`], given back by [`Cluster::release`].
pub struct Lock {
    key: String,
    token: String,
}

const RENEW: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

impl Cluster {
    /// Starts connecting (in the background when Redis is not up yet) and
    /// subscribing to invalidations, which are passed to `on_invalidate`.
    pub fn start(
        config: &RedisConfig,
        errors: Counter,
        on_invalidate: impl Fn(&str) + Send + Sync + 'static,
    ) -> anyhow::Result<Arc<Cluster>> {
        let client = redis::Client::open(config.url.as_str())?;
        let cluster = Arc::new(Cluster {
            client,
            conn: ArcSwapOption::empty(),
            config: config.clone(),
            instance: format!("{}-{}", std::process::id(), crate::clock::now_ms()),
            next_token: AtomicU64::new(0),
            errors,
        });
        tokio::spawn(connect_loop(Arc::downgrade(&cluster)));
        tokio::spawn(subscribe_loop(
            Arc::downgrade(&cluster),
            Arc::new(on_invalidate),
        ));
        Ok(cluster)
    }

    /// This process's name in lock tokens and purge messages.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Tells every instance of a purge of `scope`: the shared entries it
    /// covers are deleted, and the message published.
    pub async fn purge(&self, scope: &Scope) {
        let Some(mut conn) = self.conn() else { return };
        let pattern = match scope {
            Scope::Key(key) => {
                let del = conn.del::<_, ()>(format!("mirrorcache:entry:{key}"));
                self.run("entry delete", del).await;
                None
            }
            Scope::Remote(remote) => Some(format!("mirrorcache:entry:{}/*", glob_escape(remote))),
            Scope::All => Some("mirrorcache:entry:*".to_string()),
        };
        if let Some(pattern) = pattern {
            let keys = conn.keys::<_, Vec<String>>(pattern);
            if let Some(keys) = self.run("entry scan", keys).await.filter(|k| !k.is_empty()) {
                self.run("entry purge", conn.del::<_, ()>(keys)).await;
            }
        }
        let message = purge_message(&self.instance, scope);
        self.run("purge", conn.publish::<_, _, ()>(CHANNEL, message))
            .await;
    }

    /// How long to wait for another instance's fill.
    pub fn lock_wait(&self) -> Duration {
        self.config.lock_wait
    }

    fn conn(&self) -> Option<ConnectionManager> {
        self.conn.load_full().map(|c| (*c).clone())
    }

    /// Runs one Redis operation with the configured timeout; `None` (and a
    /// counted, logged error) when Redis fails or is slow.
    async fn run<T>(
        &self,
        what: &str,
        op: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Option<T> {
        match tokio::time::timeout(self.config.timeout, op).await {
            Ok(Ok(value)) => Some(value),
            Ok(Err(error)) => {
                self.errors.inc();
                tracing::warn!(%error, what, "redis failed; going on without it");
                None
            }
            Err(_) => {
                self.errors.inc();
                tracing::warn!(timeout = ?self.config.timeout, what, "redis too slow; going on without it");
                None
            }
        }
    }

    pub async fn try_lock(&self, key: &str) -> LockOutcome {
        let Some(mut conn) = self.conn() else {
            return LockOutcome::Unavailable;
        };
        let lock = Lock {
            key: format!("mirrorcache:lock:{key}"),
            token: format!(
                "{}-{}",
                self.instance,
                self.next_token.fetch_add(1, Ordering::Relaxed)
            ),
        };
        let ttl = self.config.lock_ttl.as_millis() as u64;
        let mut set = redis::cmd("SET");
        set.arg(&lock.key)
            .arg(&lock.token)
            .arg("NX")
            .arg("PX")
            .arg(ttl);
        match self
            .run("lock", set.query_async::<Option<String>>(&mut conn))
            .await
        {
            Some(Some(_)) => LockOutcome::Acquired(lock),
            Some(None) => LockOutcome::Held,
            None => LockOutcome::Unavailable,
        }
    }

    /// Whether some instance holds the lock of `key` (false if Redis is down:
    /// then nobody can be waited for).
    pub async fn is_locked(&self, key: &str) -> bool {
        let Some(mut conn) = self.conn() else {
            return false;
        };
        let exists = conn.exists::<_, bool>(format!("mirrorcache:lock:{key}"));
        self.run("lock check", exists).await.unwrap_or(false)
    }

    /// Keeps renewing `lock` until the returned guard is dropped.
    pub fn hold(self: &Arc<Self>, lock: &Lock) -> tokio::task::JoinHandle<()> {
        let cluster = Arc::downgrade(self);
        let (key, token) = (lock.key.clone(), lock.token.clone());
        tokio::spawn(async move {
            loop {
                let Some(c) = cluster.upgrade() else { return };
                let every = c.config.lock_ttl / 3;
                drop(c);
                tokio::time::sleep(every).await;
                let Some(c) = cluster.upgrade() else { return };
                let Some(mut conn) = c.conn() else { continue };
                let ttl = c.config.lock_ttl.as_millis() as u64;
                let script = redis::Script::new(RENEW);
                let mut renew = script.key(&key);
                renew.arg(&token).arg(ttl);
                c.run("lock renewal", renew.invoke_async::<i64>(&mut conn))
                    .await;
            }
        })
    }

    pub async fn release(&self, lock: Lock) {
        let Some(mut conn) = self.conn() else { return };
        let script = redis::Script::new(RELEASE);
        let mut release = script.key(&lock.key);
        release.arg(&lock.token);
        self.run("lock release", release.invoke_async::<i64>(&mut conn))
            .await;
    }

    /// The shared copy of a metadata entry, if Redis has one.
    pub(crate) async fn get_entry(&self, key: &str) -> Option<Entry> {
        let mut conn = self.conn()?;
        let get = conn.get::<_, Option<String>>(format!("mirrorcache:entry:{key}"));
        let text = self.run("entry lookup", get).await??;
        decode_entry(&text)
    }

    pub(crate) async fn put_entry(&self, key: &str, entry: &Entry) {
        let Some(mut conn) = self.conn() else { return };
        let ttl = self.config.entry_ttl.as_secs().max(1);
        let set =
            conn.set_ex::<_, _, ()>(format!("mirrorcache:entry:{key}"), encode_entry(entry), ttl);
        self.run("entry store", set).await;
    }

    /// Records that `key` changed: its shared entry is replaced (or dropped,
    /// for `None`), and every instance is told to drop its in-memory copy.
    pub async fn changed(&self, key: &str, entry: Option<&Entry>) {
        match entry {
            Some(entry) => {
                self.put_entry(key, entry).await;
                if let Some(mut conn) = self.conn() {
                    self.run("invalidate", conn.publish::<_, _, ()>(CHANNEL, key))
                        .await;
                }
            }
            None => self.invalidate(key).await,
        }
    }

    /// Drops the shared entry of `key` (or all, for [`ALL`]) and tells every
    /// instance to drop its in-memory copy.
    pub async fn invalidate(&self, key: &str) {
        let Some(mut conn) = self.conn() else { return };
        if key == ALL {
            let keys = conn.keys::<_, Vec<String>>("mirrorcache:entry:*");
            if let Some(keys) = self.run("entry scan", keys).await.filter(|k| !k.is_empty()) {
                self.run("entry purge", conn.del::<_, ()>(keys)).await;
            }
        } else {
            self.run(
                "entry delete",
                conn.del::<_, ()>(format!("mirrorcache:entry:{key}")),
            )
            .await;
        }
        self.run("invalidate", conn.publish::<_, _, ()>(CHANNEL, key))
            .await;
    }
}

/// `text` with Redis's glob characters escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn encode_entry(e: &Entry) -> String {
    serde_json::json!({
        "digest": e.digest.to_hex(),
        "size": e.size,
        "content_type": e.content_type,
        "etag": e.upstream_etag,
        "last_modified": e.upstream_last_modified,
        "fetched_at": e.fetched_at_ms,
        "kept_headers": e.kept_headers,
    })
    .to_string()
}

fn decode_entry(text: &str) -> Option<Entry> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let field = |name: &str| v[name].as_str().map(str::to_string);
    let mut entry = Entry::new(
        Digest::from_hex(v["digest"].as_str()?)?,
        v["size"].as_u64()?,
        field("content_type"),
        field("etag"),
        field("last_modified"),
        v["fetched_at"].as_i64()?,
    );
    entry.kept_headers = field("kept_headers");
    Some(entry)
}

async fn connect_loop(cluster: std::sync::Weak<Cluster>) {
    let mut warned = false;
    loop {
        let Some(c) = cluster.upgrade() else { return };
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(c.config.timeout.max(Duration::from_millis(500))))
            .set_response_timeout(Some(c.config.timeout))
            .set_number_of_retries(1);
        match tokio::time::timeout(
            Duration::from_secs(5),
            c.client.get_connection_manager_with_config(config),
        )
        .await
        {
            Ok(Ok(conn)) => {
                c.conn.store(Some(Arc::new(conn)));
                tracing::info!("connected to redis");
                return;
            }
            Ok(Err(error)) if !warned => {
                warned = true;
                c.errors.inc();
                tracing::warn!(%error, "redis unavailable; working alone until it answers");
            }
            _ => {}
        }
        drop(c);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn subscribe_loop(
    cluster: std::sync::Weak<Cluster>,
    on_invalidate: Arc<dyn Fn(&str) + Send + Sync>,
) {
    loop {
        let Some(c) = cluster.upgrade() else { return };
        let client = c.client.clone();
        drop(c);
        if let Ok(Ok(mut pubsub)) =
            tokio::time::timeout(Duration::from_secs(2), client.get_async_pubsub()).await
        {
            if pubsub.subscribe(CHANNEL).await.is_ok() {
                // Anything missed while unsubscribed may be stale: start clean.
                on_invalidate(ALL);
                let mut messages = pubsub.into_on_message();
                while let Some(msg) = messages.next().await {
                    if let Ok(key) = msg.get_payload::<String>() {
                        on_invalidate(&key);
                    }
                }
            }
        }
        if cluster.upgrade().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
