//! [`MetadataStore`]: which `remote/path` maps to which blob, with the headers
//! and times needed to serve and revalidate it. SQLite or Postgres through
//! sqlx, with a bounded in-memory cache (moka) in front so a hot hit costs no
//! query; its connection, migrations and back-off from a failing database.
//!
//! Queries are plain `sqlx::query` on the `Any` driver rather than the
//! compile-time-checked macros: the macros need a live database (or committed
//! offline data) at build time, and one SQL text that both backends accept is
//! tested against both instead. Migrations are embedded with `include_str!`
//! and applied at start-up by sqlx's migrator.

use std::borrow::Cow;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::AnyPool;

use super::cluster::{self, Cluster};
use super::declared_keys::DeclaredKeys;
use super::entry::{entry_cache, Entry, EntryCache, NegativeCache};
use super::index::Index;
use super::other_writers::Others;
use super::purge::{Purges, Ticket};
use super::sql::db_error;
use super::touched::Touched;
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::path::ArtifactPath;

fn migrator() -> Migrator {
    let migrations = vec![
        Migration::new(
            1,
            Cow::Borrowed("entries"),
            MigrationType::Simple,
            Cow::Borrowed(include_str!("../../migrations/0001_entries.sql")),
            false,
        ),
        Migration::new(
            3,
            Cow::Borrowed("hits"),
            MigrationType::Simple,
            Cow::Borrowed(include_str!("../../migrations/0003_hits.sql")),
            false,
        ),
        Migration::new(
            4,
            Cow::Borrowed("declared"),
            MigrationType::Simple,
            Cow::Borrowed(include_str!("../../migrations/0004_declared.sql")),
            false,
        ),
        Migration::new(
            5,
            Cow::Borrowed("tokens"),
            MigrationType::Simple,
            Cow::Borrowed(include_str!("../../migrations/0005_tokens.sql")),
            false,
        ),
        Migration::new(
            6,
            Cow::Borrowed("kept_headers"),
            MigrationType::Simple,
            Cow::Borrowed(include_str!("../../migrations/0006_kept_headers.sql")),
            false,
        ),
        Migration::new(
            7,
            Cow::Borrowed("declared_listed"),
            MigrationType::Simple,
            Cow::Borrowed(include_str!("../../migrations/0007_declared_listed.sql")),
            false,
        ),
    ];
    Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    }
}

pub struct MetadataStore {
    pub(crate) pool: AnyPool,
    pub(crate) cache: EntryCache,
    pub(crate) negative: NegativeCache,
    /// While the database is failing, the request path skips it until this
    /// time (unix ms) instead of waiting out a connect timeout per request:
    /// hits in `cache` are served, misses are proxied uncached.
    unavailable_until_ms: AtomicI64,
    /// Redis, when instances share state: a second-level entry cache and the
    /// channel that keeps every instance's `cache` coherent.
    pub(crate) cluster: std::sync::OnceLock<Arc<Cluster>>,
    /// The purge generations that keep what began before a purge from
    /// showing after it (see [`super::purge`]).
    pub purges: Purges,
    /// Every row, compactly, once loaded (`load_index`; see `super::index`).
    pub index: Index,
    /// Rows read by lookups: an entry's (`read_row`: what the index saves)
    /// or a declared digest's (`declared`: what the declared keys save).
    pub(crate) row_reads: AtomicU64,
    /// Digest questions the database answered (`super::lifetime`).
    pub(crate) digest_reads: AtomicU64,
    /// The SQLite database's URL, for the index loader's own typed
    /// connections (`None` on Postgres and for an in-memory database).
    pub(crate) sqlite_url: Option<String>,
    /// Rows when it connected (what `Cache::open` defers work on).
    pub(crate) rows_at_start: usize,
    /// Hits on entries served from the index (see [`super::lookup`]).
    pub(crate) touched: Touched,
    /// The keys of the `declared` table (see `super::declared_keys`).
    pub declared_keys: DeclaredKeys,
    /// Other processes' writes (see `super::other_writers`).
    pub others: Arc<Others>,
    /// On a SQLite file, one connection of its own with `synchronous =
    /// FULL` for the group commit's transactions (durable when they
    /// return), so a batch sets no pragma: two statements fewer a batch.
    pub(crate) durable: Option<AnyPool>,
}

/// How long the request path leaves a failing database alone.
const BACKOFF_MS: i64 = 5_000;

/// One row, as maintenance (eviction, verify, purge) sees it.
#[derive(Debug, Clone)]
pub struct Row {
    pub remote: String,
    pub path: String,
    pub digest: String,
    pub size: u64,
}

pub(crate) type EntryRow = (
    String,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<String>,
);

impl MetadataStore {
    /// Connects (creating a SQLite file and its directory if needed) and applies
    /// the embedded migrations, again while SQLite says the database is
    /// locked (a server or a command beside this process writes it).
    pub async fn connect(url: &str, cache_entries: u64) -> Result<MetadataStore, sqlx::Error> {
        super::sqlite::retrying_busy(|| Self::connect_once(url, cache_entries)).await
    }

    async fn connect_once(url: &str, cache_entries: u64) -> Result<MetadataStore, sqlx::Error> {
        sqlx::any::install_default_drivers();
        let is_sqlite = url.starts_with("sqlite:");
        let url = if is_sqlite {
            super::sqlite::sqlite_url(url)?
        } else {
            url.to_string()
        };
        let pool = AnyPoolOptions::new()
            .max_connections(if is_sqlite { 4 } else { 10 })
            .acquire_timeout(Duration::from_secs(2))
            // A SQLite connection cannot go stale; pinging it before each
            // query is one more round trip to its worker thread per query,
            // on the miss path.
            .test_before_acquire(!is_sqlite)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    if conn.backend_name().eq_ignore_ascii_case("sqlite") {
                        // WAL lets readers run beside the one writer; NORMAL is
                        // durable across process crashes, which is what we need:
                        // blobs are fsynced before their row is written.
                        // The busy timeout first: the others may wait for a lock.
                        for pragma in [
                            "PRAGMA busy_timeout = 5000",
                            "PRAGMA journal_mode = WAL",
                            "PRAGMA synchronous = NORMAL",
                        ] {
                            sqlx::query(pragma).execute(&mut *conn).await?;
                        }
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await?;
        migrator().run(&pool).await?;
        // The entry index is sized for the rows there are (it is filled by
        // `load_index`, in the background: `Cache::open`).
        let (rows,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM entries")
            .fetch_one(&pool)
            .await?;
        let rows = rows.max(0) as usize;
        let durable = match is_sqlite && !url.contains(":memory:") {
            true => Some(super::sqlite::durable_pool(&url).await?),
            false => None,
        };
        Ok(MetadataStore {
            pool,
            cache: entry_cache(cache_entries),
            // Kept a day at most: long enough to answer a known 404 while every
            // mirror is down, short enough not to matter for memory.
            negative: moka::sync::Cache::builder()
                .max_capacity(cache_entries)
                .time_to_live(Duration::from_secs(24 * 3600))
                .build(),
            unavailable_until_ms: AtomicI64::new(0),
            cluster: std::sync::OnceLock::new(),
            purges: Purges::default(),
            index: Index::with_room(rows),
            row_reads: AtomicU64::new(0),
            digest_reads: AtomicU64::new(0),
            touched: Touched::new(cache_entries),
            rows_at_start: rows,
            declared_keys: Default::default(),
            durable,
            others: Arc::new(Others::new(super::sqlite::sqlite_file(&url))),
            sqlite_url: (is_sqlite && !url.contains(":memory:")).then(|| url.clone()),
        })
    }

    /// Records (or replaces) the entry for `path` (a batch of one; fills
    /// go through the group commit, `crate::cache::commit`).
    pub async fn record(
        &self,
        path: &ArtifactPath,
        entry: Entry,
    ) -> Result<Arc<Entry>, ProxyError> {
        self.record_batch(&[(path, &entry)]).await?;
        Ok(self.recorded(path, entry).await)
    }

    /// After its row is written: `entry` in memory, and shared.
    pub(crate) async fn recorded(&self, path: &ArtifactPath, entry: Entry) -> Arc<Entry> {
        let entry = Arc::new(entry);
        self.index.insert(path.key(), &entry);
        self.cache.insert(path.key().to_string(), entry.clone());
        self.shared_changed(path.key(), Some(&entry)).await;
        entry
    }

    /// Marks the entry for `path` as revalidated now; returns the refreshed entry.
    /// Not remembered (in memory or Redis) if a purge of `path` came after
    /// `ticket` (taken when the revalidation began).
    pub async fn mark_revalidated(
        &self,
        path: &ArtifactPath,
        entry: &Entry,
        now_ms: i64,
        ticket: Ticket,
    ) -> Result<Arc<Entry>, ProxyError> {
        let updated =
            sqlx::query("UPDATE entries SET fetched_at = $1 WHERE remote = $2 AND path = $3")
                .bind(now_ms)
                .bind(path.remote())
                .bind(path.stored_path())
                .execute(&self.pool)
                .await
                .map_err(db_error)?;
        let mut fresh = entry.clone();
        fresh.fetched_at_ms = now_ms;
        let fresh = Arc::new(fresh);
        // No row updated: it was deleted meanwhile, and is not put back.
        if updated.rows_affected() == 1 && self.remember_read(path, &fresh, ticket) {
            self.shared_changed(path.key(), Some(&fresh)).await;
        }
        Ok(fresh)
    }

    /// Drops the entry for `path` (its blob is gone, or it was purged).
    pub async fn forget(&self, path: &ArtifactPath) -> Result<(), ProxyError> {
        self.forget_row(path.remote(), path.stored_path()).await
    }

    /// Writes the access times and hit counts of hot entries touched since
    /// the last flush, in one transaction. Returns how many rows it updated.
    pub async fn flush_access_times(&self) -> Result<usize, ProxyError> {
        let mut touched = Vec::new();
        for (key, entry) in self.cache.iter() {
            let last = entry.last_access_ms.load(Ordering::Relaxed);
            let hits = entry.pending_hits.load(Ordering::Relaxed);
            if last > entry.flushed_access_ms.load(Ordering::Relaxed) || hits > 0 {
                touched.push((key, entry, last, hits));
            }
        }
        // Taken now: a failed flush loses them (as it would lose nothing of
        // the entry cache's, which keeps its counts pending).
        let from_index = self.touched.take();
        if touched.is_empty() && from_index.is_empty() {
            return Ok(0);
        }
        let rows = touched
            .iter()
            .map(|(key, _, last, hits)| (key.as_str(), *last, *hits))
            .chain(
                from_index
                    .iter()
                    .map(|(key, last, hits)| (key.as_str(), *last, *hits)),
            );
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        for (key, last, hits) in rows {
            let (remote, path) = key.split_once('/').unwrap_or((key, ""));
            sqlx::query(
                "UPDATE entries SET hits = hits + $2, \
                 last_access = CASE WHEN last_access > $1 THEN last_access ELSE $1 END \
                 WHERE remote = $3 AND path = $4",
            )
            .bind(last)
            .bind(hits as i64)
            .bind(remote)
            .bind(path)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        for (_, entry, last, hits) in &touched {
            entry.flushed_access_ms.store(*last, Ordering::Relaxed);
            // Hits counted while the transaction ran stay pending.
            entry.pending_hits.fetch_sub(*hits, Ordering::Relaxed);
        }
        Ok(touched.len() + from_index.len())
    }
}

impl Drop for MetadataStore {
    fn drop(&mut self) {
        self.others.close();
    }
}

impl MetadataStore {
    pub(crate) fn check_available(&self) -> Result<(), ProxyError> {
        if now_ms() < self.unavailable_until_ms.load(Ordering::Relaxed) {
            return Err(ProxyError::Metadata(
                "database unavailable; retrying shortly".into(),
            ));
        }
        Ok(())
    }

    /// Maps a database error on the request path and backs off from the
    /// database. Not for a pool that is merely busy (every connection taken
    /// by a herd of lookups): that is load, not an outage, and backing off
    /// would drop the fills' entries for the whole back-off.
    pub(crate) fn failed(&self, e: sqlx::Error) -> ProxyError {
        if matches!(e, sqlx::Error::PoolTimedOut) {
            return db_error(e);
        }
        if self
            .unavailable_until_ms
            .swap(now_ms() + BACKOFF_MS, Ordering::Relaxed)
            == 0
        {
            tracing::warn!(error = %e, "metadata database failing; serving from memory and proxying misses uncached");
        }
        db_error(e)
    }

    pub(crate) fn recovered(&self) {
        if self.unavailable_until_ms.swap(0, Ordering::Relaxed) != 0 {
            tracing::info!("metadata database answers again");
        }
    }

    /// Whether the database answers (for readiness).
    /// Whether the database answers; an answer also ends the back-off.
    pub async fn ping(&self) -> bool {
        let ok = sqlx::query("SELECT 1").execute(&self.pool).await.is_ok();
        if ok {
            self.recovered();
        }
        ok
    }

    pub async fn close(&self) {
        if let Some(durable) = &self.durable {
            durable.close().await;
        }
        self.pool.close().await;
    }

    /// The pool, for the queries of other rooms' tables (tokens, `ls`,
    /// bundles).
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The least recently used rows, oldest first.
    pub async fn least_recently_used(&self, limit: i64) -> Result<Vec<Row>, ProxyError> {
        self.rows(
            "SELECT remote, path, digest, size FROM entries ORDER BY last_access ASC LIMIT $1",
            Some(limit),
        )
        .await
    }

    /// Every row (for `verify`).
    pub async fn all_rows(&self) -> Result<Vec<Row>, ProxyError> {
        self.rows("SELECT remote, path, digest, size FROM entries", None)
            .await
    }

    pub(crate) async fn rows(&self, sql: &str, limit: Option<i64>) -> Result<Vec<Row>, ProxyError> {
        let mut query = sqlx::query_as::<_, (String, String, String, i64)>(sql);
        if let Some(limit) = limit {
            query = query.bind(limit);
        }
        let rows = query.fetch_all(&self.pool).await.map_err(db_error)?;
        Ok(rows
            .into_iter()
            .map(|(remote, path, digest, size)| Row {
                remote,
                path,
                digest,
                size: size as u64,
            })
            .collect())
    }

    /// Shares entries and invalidations with other instances through Redis.
    pub fn attach_cluster(&self, cluster: Arc<Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// Drops this instance's in-memory knowledge of `key` (or of everything,
    /// for `cluster::ALL`): what another instance changed; or, for a purge
    /// message, takes the purge's generation here too.
    pub fn invalidate_local(&self, key: &str) {
        if let Some((from, scope)) = cluster::purge_scope(key) {
            // Our own purge took its generations already.
            if self.cluster.get().is_none_or(|c| c.instance() != from) {
                self.purge_memory(&scope);
            }
            return;
        }
        // A complete index is this process's own database's: what other
        // instances change is not in it.
        let index = !self.index.is_complete();
        if key == cluster::ALL {
            if index {
                self.index.clear();
            }
            self.cache.invalidate_all();
            self.negative.invalidate_all();
        } else {
            if index {
                self.index.remove(key);
            }
            self.cache.invalidate(key);
            self.negative.invalidate(key);
        }
    }

    pub(crate) async fn shared_changed(&self, key: &str, entry: Option<&Entry>) {
        if let Some(cluster) = self.cluster.get() {
            cluster.changed(key, entry).await;
        }
    }

    /// Remembers that every mirror answered `status` (404/410) for `path`
    /// now, unless a purge of it came after `ticket`.
    pub fn remember_absent(&self, path: &ArtifactPath, status: u16, now_ms: i64, ticket: Ticket) {
        self.purges.if_current(path.key(), ticket, || {
            self.negative
                .insert(path.key().to_string(), (status, now_ms));
        });
    }

    /// The last "not found" answer for `path`, if one is remembered: (status, unix ms).
    pub fn absent(&self, path: &ArtifactPath) -> Option<(u16, i64)> {
        self.negative.get(path.key())
    }

    pub fn forget_absent(&self, path: &ArtifactPath) {
        self.negative.invalidate(path.key());
    }
}
