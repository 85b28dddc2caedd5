//! The queries a blob's lifetime rests on: which digest a row references,
//! rows deleted only while they still reference the digest whose lock the
//! caller holds, and the store's size as the database knows it (the one
//! source of truth, [`crate::store::budget`]).

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

    /// Bytes of the blobs the rows reference, each digest counted once:
    /// summed as the records come and go where the entry index's counts
    /// are the rows' (`digests_in_memory`), else by the database, which
    /// reads every row (0.75–0.95 s a million on SQLite, while commits wait
    /// for the size's lock).
    pub async fn stored_bytes(&self) -> Result<u64, ProxyError> {
        if self.memory.digests_in_memory() {
            return Ok(self.memory.index.stored_bytes());
        }
        self.db.stored_bytes().await
    }

    /// Whether any row still references the blob `digest` (hex).
    pub async fn digest_referenced(&self, digest: &str) -> Result<bool, ProxyError> {
        if let Some(parsed) = Digest::from_hex(digest) {
            if self.memory.digests_in_memory() {
                return Ok(self.memory.index.references(&parsed));
            }
        }
        self.db
            .digest_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let row: Option<(i64,)> = sqlx::query_as("SELECT 1 FROM entries WHERE digest = $1 LIMIT 1")
            .bind(digest)
            .fetch_optional(self.db.pool())
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
        self.memory.cache.remove(&key);
        let deleted: Vec<(String,)> = sqlx::query_as(
            "DELETE FROM entries WHERE remote = $1 AND path = $2 AND ($3 IS NULL OR digest = $3) \
             RETURNING digest",
        )
        .bind(remote)
        .bind(path)
        .bind(digest.map(str::to_string))
        .fetch_all(&self.db.pool)
        .await
        .map_err(db_error)?;
        // The record after the row, and only the record of the bytes the
        // row named: taken before, a failed deletion would leave a row the
        // index's digest counts miss; by key alone, it could take a record
        // a commit put since (see `crate::store::DigestTable`).
        let gone = match deleted.first() {
            Some((hex,)) => Digest::from_hex(hex),
            None => digest.and_then(Digest::from_hex),
        };
        self.memory.forget_deleted(&key, gone.as_ref());
        if !deleted.is_empty() {
            self.memory.others.wrote();
        }
        self.memory.shared_changed(&key, None).await;
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
            let deleted = query.fetch_all(&self.db.pool).await.map_err(db_error)?;
            rows += deleted.len() as u64;
            for (path,) in deleted {
                self.memory
                    .forget_deleted(&format!("{remote}/{path}"), named.as_ref());
            }
        }
        if rows > 0 {
            self.memory.others.wrote();
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
        self.memory.others.wrote();
        self.memory.invalidate_local(cluster::ALL);
        self.memory.shared_changed(cluster::ALL, None).await;
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
                .execute(&self.db.pool)
                .await
                .map_err(db_error)?;
        if let Some(digest) = Digest::from_hex(digest) {
            self.memory
                .purges
                .deleted(None, || self.memory.index.remove_digest(remote, &digest));
        }
        Ok(done.rows_affected())
    }
}
