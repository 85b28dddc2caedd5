//! The group commit's statements (see `crate::cache::commit`): the batch's
//! two reads, one `IN (…)` list each, and its rows and [`Pin`]s written in
//! one transaction.

use std::collections::{HashMap, HashSet};

use super::entry::Entry;
use super::index::Found;
use super::metadata::MetadataStore;
use super::sql::{db_error, placeholders, value_rows};
use crate::error::ProxyError;
use crate::kind::declared::Declared;
use crate::kind::{CachedAt, Kind};
use crate::path::ArtifactPath;
use crate::store::{Digest, PlaceRow};

/// Keys per `IN (…)` list of the batch's reads: far below either backend's
/// parameter limit.
const ROWS_PER_STATEMENT: usize = 100;
/// Rows per `INSERT` of the batch's writes (10 parameters a row, 4 a pin):
/// sqlx binds a parameter after asking SQLite its name, found by a scan of
/// the statement's parameters, so binding costs their square (at 100 rows,
/// 5.7 % of a sustained miss's CPU: BENCHMARKS.md).
const ROWS_PER_INSERT: usize = 16;

/// A digest pinned on first use ([`crate::fill::learn::pin_key`]), written
/// with its entry's row in the batch's transaction: the pin is durable
/// exactly when the entry is, at no statement of its own.
pub struct Pin {
    pub remote: String,
    pub kind: Kind,
    /// The key the digest is declared under.
    pub artifact: String,
    pub declared: Declared,
}

impl MetadataStore {
    /// The digests the rows of `paths` reference now, by key: from the
    /// entry index while it is complete and no other process wrote (no
    /// query), else read.
    pub(crate) async fn stored_digests(
        &self,
        paths: &[&ArtifactPath],
    ) -> Result<HashMap<String, Digest>, ProxyError> {
        if self.memory.index.is_complete() && self.memory.memory_trusted() {
            let mut found = HashMap::new();
            let whole = paths
                .iter()
                .all(|path| match self.memory.index.get(path.key()) {
                    Found::Entry(entry) => {
                        found.insert(path.key().to_string(), entry.digest);
                        true
                    }
                    Found::Absent => true,
                    Found::Unknown => false,
                });
            if whole {
                return Ok(found);
            }
        }
        let mut by_remote: HashMap<&str, Vec<&ArtifactPath>> = HashMap::new();
        for path in paths {
            by_remote.entry(path.remote()).or_default().push(path);
        }
        let mut found = HashMap::new();
        for (remote, paths) in by_remote {
            for chunk in paths.chunks(ROWS_PER_STATEMENT) {
                let sql = format!(
                    "SELECT path, digest FROM entries WHERE remote = $1 AND path IN ({})",
                    placeholders(2, chunk.len())
                );
                let mut query = sqlx::query_as::<_, (String, String)>(&sql).bind(remote);
                for path in chunk {
                    query = query.bind(path.stored_path());
                }
                for (path, digest) in query.fetch_all(&self.db.pool).await.map_err(db_error)? {
                    if let Some(digest) = Digest::from_hex(&digest) {
                        found.insert(format!("{remote}/{path}"), digest);
                    }
                }
            }
        }
        Ok(found)
    }

    /// Which of `digests` some row references now.
    pub(crate) async fn referenced_digests(
        &self,
        digests: &[Digest],
    ) -> Result<HashSet<Digest>, ProxyError> {
        let mut found = HashSet::new();
        if self.memory.digests_in_memory() {
            found.extend(digests.iter().filter(|d| self.memory.index.references(d)));
            return Ok(found);
        }
        for chunk in digests.chunks(ROWS_PER_STATEMENT) {
            self.db
                .digest_reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let sql = format!(
                "SELECT DISTINCT digest FROM entries WHERE digest IN ({})",
                placeholders(1, chunk.len())
            );
            let mut query = sqlx::query_as::<_, (String,)>(&sql);
            for digest in chunk {
                query = query.bind(digest.to_hex());
            }
            for (hex,) in query.fetch_all(&self.db.pool).await.map_err(db_error)? {
                found.extend(Digest::from_hex(&hex));
            }
        }
        Ok(found)
    }

    /// Writes (or replaces) the rows of a batch in one transaction, durable
    /// when it returns. Always tried, even while lookups back off: the rows
    /// are what make the fills worth it.
    pub(crate) async fn record_batch(
        &self,
        rows: &[(&ArtifactPath, &Entry)],
    ) -> Result<(), ProxyError> {
        self.write_batch(rows, &[], &[]).await
    }

    /// [`MetadataStore::record_batch`], with the batch's pins and the
    /// places of the blobs it packed in the same transaction.
    pub(crate) async fn write_batch(
        &self,
        rows: &[(&ArtifactPath, &Entry)],
        pins: &[&Pin],
        places: &[PlaceRow],
    ) -> Result<(), ProxyError> {
        for pin in pins {
            self.memory.declared_keys.add(&pin.remote, &pin.artifact);
        }
        // SQLite's own durable connection, or a pool connection set to
        // `synchronous = FULL` for this transaction (an in-memory SQLite).
        let pool = self.db.durable.as_ref().unwrap_or(&self.db.pool);
        let mut conn = pool.acquire().await.map_err(|e| self.db.failed(e))?;
        let toggle =
            self.db.durable.is_none() && conn.backend_name().eq_ignore_ascii_case("sqlite");
        if toggle {
            // The WAL synced at this commit (and with it every earlier
            // commit): the batch is on disk when its fills are answered.
            sqlx::query("PRAGMA synchronous = FULL")
                .execute(&mut *conn)
                .await
                .map_err(|e| self.db.failed(e))?;
        }
        let written = insert_rows(&mut conn, rows, pins, places).await;
        if written.is_ok() {
            self.memory.others.wrote();
        }
        if toggle {
            let _ = sqlx::query("PRAGMA synchronous = NORMAL")
                .execute(&mut *conn)
                .await;
        }
        written.map_err(|e| self.db.failed(e))
    }
}

async fn insert_rows(
    conn: &mut sqlx::pool::PoolConnection<sqlx::Any>,
    rows: &[(&ArtifactPath, &Entry)],
    pins: &[&Pin],
    places: &[PlaceRow],
) -> Result<(), sqlx::Error> {
    use sqlx::Connection as _;
    let mut tx = conn.begin().await?;
    // First: a row never names a blob whose place is not written.
    super::places::insert_places(&mut tx, places).await?;
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO entries (remote, path, digest, size, content_type, upstream_etag, upstream_last_modified, fetched_at, last_access, kept_headers) \
             VALUES {} \
             ON CONFLICT (remote, path) DO UPDATE SET digest = excluded.digest, size = excluded.size, \
             content_type = excluded.content_type, upstream_etag = excluded.upstream_etag, \
             upstream_last_modified = excluded.upstream_last_modified, fetched_at = excluded.fetched_at, \
             last_access = excluded.last_access, kept_headers = excluded.kept_headers",
            value_rows(chunk.len(), 10)
        );
        let mut insert = sqlx::query(&sql);
        for (path, entry) in chunk {
            insert = insert
                .bind(path.remote())
                .bind(path.stored_path())
                .bind(entry.digest.to_hex())
                .bind(entry.size as i64)
                .bind(entry.content_type.clone())
                .bind(entry.upstream_etag.clone())
                .bind(entry.upstream_last_modified.clone())
                .bind(entry.fetched_at_ms)
                .bind(entry.fetched_at_ms)
                .bind(entry.kept_headers.clone());
        }
        insert.execute(&mut *tx).await?;
    }
    let now = crate::clock::now_ms();
    for chunk in pins.chunks(ROWS_PER_INSERT) {
        let sql = super::declared_rows::upsert_sql(chunk.len());
        let mut insert = sqlx::query(&sql);
        for pin in chunk {
            insert = insert
                .bind(pin.remote.as_str())
                .bind(pin.artifact.as_str())
                .bind(pin.declared.to_string())
                .bind(now);
        }
        insert.execute(&mut *tx).await?;
    }
    tx.commit().await
}

impl Pin {
    /// Whether a cached row other than the one it is committed with may be
    /// of its artifact (and then must match it): only where the ecosystem
    /// finds an artifact's rows elsewhere than at its key, or the key is
    /// not the row's own path. Otherwise the only row is the batch's.
    pub(crate) fn may_contradict(&self, path: &ArtifactPath) -> bool {
        self.kind.digests().is_some_and(|digests| {
            !matches!(digests.cached_at(&self.artifact), CachedAt::Path)
                || self.artifact != path.stored_path()
        })
    }
}
