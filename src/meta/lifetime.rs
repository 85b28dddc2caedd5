//! The queries a blob's lifetime rests on: which digest a row references,
//! rows deleted only while they still reference the digest whose lock the
//! caller holds, and the store's size as the database knows it (the one
//! source of truth, [`crate::store::budget`]).

use std::collections::BTreeMap;

use super::cluster;
use super::metadata::MetadataStore;
use super::sql::{db_error, placeholders};
use crate::error::ProxyError;
use crate::store::Digest;

impl MetadataStore {
    /// Deletes one row by its parts (maintenance paths hold rows, not
    /// requests).
    pub async fn forget_row(&self, remote: &str, path: &str) -> Result<(), ProxyError> {
        self.forget_row_of(remote, path, None).await.map(drop)
    }

    /// Digest questions the database has answered so far (the entry
    /// index answers the rest).
    pub fn digest_reads(&self) -> u64 {
        self.digest_reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether any row still references the blob `digest` (hex).
    pub async fn digest_referenced(&self, digest: &str) -> Result<bool, ProxyError> {
        if let Some(parsed) = Digest::from_hex(digest) {
            if self.digests_in_memory() {
                return Ok(self.index.references(&parsed));
            }
        }
        self.digest_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let row: Option<(i64,)> = sqlx::query_as("SELECT 1 FROM entries WHERE digest = $1 LIMIT 1")
            .bind(digest)
            .fetch_optional(self.pool())
            .await
            .map_err(db_error)?;
        Ok(row.is_some())
    }

    /// Deletes every row that references `digest` (hex); returns how many.
    pub async fn forget_digest(&self, digest: &str) -> Result<u64, ProxyError> {
        self.forget_remote_digest(None, digest).await
    }

    /// Deletes the row of `remote`/`path` — only if it still references
    /// `digest` (hex), when one is given; returns whether it did.
    pub async fn forget_row_of(
        &self,
        remote: &str,
        path: &str,
        digest: Option<&str>,
    ) -> Result<bool, ProxyError> {
        let key = format!("{remote}/{path}");
        self.cache.invalidate(&key);
        let deleted: Vec<(String,)> = sqlx::query_as(
            "DELETE FROM entries WHERE remote = $1 AND path = $2 AND ($3 IS NULL OR digest = $3) \
             RETURNING digest",
        )
        .bind(remote)
        .bind(path)
        .bind(digest.map(str::to_string))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        // The record after the row, and only the record of the bytes the
        // row named: taken before, a failed deletion would leave a row the
        // index's digest counts miss; by key alone, it could take a record
        // a commit put since (see `super::digest_counts`).
        let gone = match deleted.first() {
            Some((hex,)) => Digest::from_hex(hex),
            None => digest.and_then(Digest::from_hex),
        };
        self.forget_deleted(&key, gone.as_ref());
        if !deleted.is_empty() {
            self.others.wrote();
        }
        self.shared_changed(&key, None).await;
        Ok(!deleted.is_empty())
    }

    /// Deletes the rows of `remote` at `paths` that still reference
    /// `digest` (hex), by their keys; returns how many.
    pub(crate) async fn delete_remote_paths(
        &self,
        remote: &str,
        digest: &str,
        paths: &[String],
    ) -> Result<u64, ProxyError> {
        let named = Digest::from_hex(digest);
        let mut rows = 0;
        for chunk in paths.chunks(100) {
            let sql = format!(
                "DELETE FROM entries WHERE remote = $1 AND digest = $2 AND path IN ({}) \
                 RETURNING path",
                placeholders(3, chunk.len())
            );
            let mut query = sqlx::query_as::<_, (String,)>(&sql)
                .bind(remote)
                .bind(digest);
            for path in chunk {
                query = query.bind(path);
            }
            let deleted = query.fetch_all(&self.pool).await.map_err(db_error)?;
            rows += deleted.len() as u64;
            for (path,) in deleted {
                self.forget_deleted(&format!("{remote}/{path}"), named.as_ref());
            }
        }
        if rows > 0 {
            self.others.wrote();
        }
        Ok(rows)
    }

    /// Deletes the rows (of `remote`, when given) that reference `digest`
    /// (hex); returns how many.
    pub async fn forget_remote_digest(
        &self,
        remote: Option<&str>,
        digest: &str,
    ) -> Result<u64, ProxyError> {
        let rows = self.delete_remote_digest(remote, digest).await?;
        self.others.wrote();
        self.invalidate_local(cluster::ALL);
        self.shared_changed(cluster::ALL, None).await;
        Ok(rows)
    }

    /// [`MetadataStore::forget_remote_digest`] without telling memory or
    /// other instances (a purge does, for its whole scope).
    pub(crate) async fn delete_remote_digest(
        &self,
        remote: Option<&str>,
        digest: &str,
    ) -> Result<u64, ProxyError> {
        let done =
            sqlx::query("DELETE FROM entries WHERE ($1 IS NULL OR remote = $1) AND digest = $2")
                .bind(remote.map(str::to_string))
                .bind(digest)
                .execute(&self.pool)
                .await
                .map_err(db_error)?;
        if let Some(digest) = Digest::from_hex(digest) {
            self.purges
                .deleted(None, || self.index.remove_digest(remote, &digest));
        }
        Ok(done.rows_affected())
    }
}

impl MetadataStore {
    /// Whether the embedded database keeps an index on `entries.digest`
    /// (made, or dropped, now; the migrations make one). Not where the
    /// entry index, complete once loaded, answers digest questions: its
    /// random inserts cost a page of the write-ahead log for every row
    /// committed (BENCHMARKS.md). Where it is not complete
    /// (with Redis, other instances write rows), the database answers them.
    pub(crate) async fn index_digests(&self, wanted: bool) -> Result<(), sqlx::Error> {
        let sql = match wanted {
            true => "CREATE INDEX IF NOT EXISTS entries_digest ON entries (digest)",
            false => "DROP INDEX IF EXISTS entries_digest",
        };
        sqlx::query(sql).execute(&self.pool).await.map(drop)
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

    /// Whether the entry index answers digest questions: it is complete
    /// and no other process wrote. Then its counts are the rows' (the
    /// embedded database keeps no index on `entries.digest`, so asking it
    /// reads every row).
    pub(crate) fn digests_in_memory(&self) -> bool {
        self.index.is_complete() && self.memory_trusted()
    }

    /// Drops from memory the row of `key` just deleted (its record only if
    /// it names `digest`, and its cached entry), taking a deletion
    /// generation so a read of the row from before is not remembered after.
    pub(crate) fn forget_deleted(&self, key: &str, digest: Option<&Digest>) {
        self.purges.deleted(Some(key), || {
            self.index.remove_named(key, digest);
            self.cache.invalidate(key);
        });
    }
}
