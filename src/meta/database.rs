//! [`Database`]: the metadata database itself: its pool (and, on a SQLite
//! file, the group commit's durable connection), the embedded migrations,
//! the back-off from a failing database, and the queries of the `entries`
//! table that touch no memory.
//!
//! Queries are plain `sqlx::query` on the `Any` driver rather than the
//! compile-time-checked macros: the macros need a live database (or committed
//! offline data) at build time, and one SQL text that both backends accept is
//! tested against both instead. Migrations are embedded with `include_str!`
//! and applied at start-up by sqlx's migrator.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::AnyPool;

use super::sql::db_error;
use crate::clock::now_ms;
use crate::error::ProxyError;

pub struct Database {
    pub(crate) pool: AnyPool,
    /// On a SQLite file, one connection of its own with `synchronous =
    /// FULL` for the group commit's transactions (durable when they
    /// return), so a batch sets no pragma: two statements fewer a batch.
    pub(crate) durable: Option<AnyPool>,
    /// While the database is failing, the request path skips it until this
    /// time (unix ms) instead of waiting out a connect timeout per request:
    /// hits in memory are served, misses are proxied uncached.
    unavailable_until_ms: AtomicI64,
    /// The SQLite database's URL, for the index loader's own typed
    /// connections (`None` on Postgres and for an in-memory database).
    pub(crate) sqlite_url: Option<String>,
    /// SQLite (a file or in memory), not Postgres: for the statements whose
    /// text differs between the two.
    pub(crate) sqlite: bool,
    /// The SQLite file, whose changes by other processes are watched
    /// (`super::other_writers`).
    pub(crate) file: Option<PathBuf>,
    /// Rows when it connected (what `Cache::open` defers work on).
    pub(crate) rows_at_start: usize,
    /// Rows read by lookups: an entry's (`read_row`: what the index saves)
    /// or a declared digest's (`declared`: what the declared keys save).
    pub(crate) row_reads: AtomicU64,
    /// Digest questions the database answered (`super::lifetime`).
    pub(crate) digest_reads: AtomicU64,
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
        Migration::new(
            8,
            Cow::Borrowed("registry_keys"),
            MigrationType::Simple,
            Cow::Borrowed(include_str!("../../migrations/0008_registry_keys.sql")),
            false,
        ),
        Migration::new(
            9,
            Cow::Borrowed("blob_places"),
            MigrationType::Simple,
            Cow::Borrowed(include_str!("../../migrations/0009_blob_places.sql")),
            false,
        ),
        Migration::new(
            10,
            Cow::Borrowed("places_by_place"),
            MigrationType::Simple,
            Cow::Borrowed(include_str!("../../migrations/0010_places_by_place.sql")),
            false,
        ),
    ];
    Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    }
}

impl Database {
    /// Connects (creating a SQLite file and its directory if needed) and
    /// applies the embedded migrations, once (the caller tries again while
    /// SQLite says the database is locked).
    pub(crate) async fn connect(url: &str) -> Result<Database, sqlx::Error> {
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
        Ok(Database {
            pool,
            durable,
            unavailable_until_ms: AtomicI64::new(0),
            file: super::sqlite::sqlite_file(&url),
            sqlite_url: (is_sqlite && !url.contains(":memory:")).then(|| url.clone()),
            sqlite: is_sqlite,
            rows_at_start: rows,
            row_reads: AtomicU64::new(0),
            digest_reads: AtomicU64::new(0),
        })
    }

    /// The pool, for the queries of other rooms' tables (tokens, `ls`,
    /// bundles).
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

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

    /// Whether the embedded database keeps its indexes on `entries.digest`
    /// and `blob_places.digest` (made, or dropped, now; the migrations make
    /// them). Not where the entry index and the store's places, complete
    /// once loaded, answer digest questions: their random inserts cost a
    /// page of the write-ahead log for every row committed (BENCHMARKS.md).
    /// Where they are not complete (with Redis, other instances write
    /// rows), the database answers them.
    pub(crate) async fn index_digests(&self, wanted: bool) -> Result<(), sqlx::Error> {
        let statements = match wanted {
            true => [
                "CREATE INDEX IF NOT EXISTS entries_digest ON entries (digest)",
                "CREATE INDEX IF NOT EXISTS blob_places_digest ON blob_places (digest)",
            ],
            false => [
                "DROP INDEX IF EXISTS entries_digest",
                "DROP INDEX IF EXISTS blob_places_digest",
            ],
        };
        for sql in statements {
            sqlx::query(sql).execute(&self.pool).await?;
        }
        Ok(())
    }

    /// The digest (hex) the row of `remote`/`path` references, if any.
    pub async fn stored_digest(
        &self,
        remote: &str,
        path: &str,
    ) -> Result<Option<String>, ProxyError> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT digest FROM entries WHERE remote = $1 AND path = $2")
                .bind(remote)
                .bind(path)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_error)?;
        Ok(row.map(|(d,)| d))
    }

    /// The paths of the rows of `remote`, by the digest (hex) they reference.
    pub async fn remote_rows(
        &self,
        remote: &str,
    ) -> Result<BTreeMap<String, Vec<String>>, ProxyError> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT path, digest FROM entries WHERE remote = $1")
                .bind(remote)
                .fetch_all(&self.pool)
                .await
                .map_err(db_error)?;
        let mut by_digest: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (path, digest) in rows {
            by_digest.entry(digest).or_default().push(path);
        }
        Ok(by_digest)
    }

    /// Bytes of the blobs the rows reference, each digest counted once: the
    /// one source of truth of the store's size (shared when the database is).
    pub async fn stored_bytes(&self) -> Result<u64, ProxyError> {
        let (bytes,): (i64,) = sqlx::query_as(
            "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM \
             (SELECT digest, MAX(size) AS size FROM entries GROUP BY digest) AS blobs",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(bytes.max(0) as u64)
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

    /// Rows lookups (of entries and of declared digests) have read from the
    /// database so far.
    pub fn row_reads(&self) -> u64 {
        self.row_reads.load(Ordering::Relaxed)
    }

    /// Digest questions the database has answered so far (the entry
    /// index answers the rest).
    pub fn digest_reads(&self) -> u64 {
        self.digest_reads.load(std::sync::atomic::Ordering::Relaxed)
    }
}
