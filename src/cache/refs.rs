//! The queries blob lifetime rests on: which digest a row references, rows
//! deleted only while they still reference the digest whose lock the caller
//! holds, and the store's size as the database knows it (the one source of
//! truth, [`super::budget`]).

use super::cluster;
use super::meta::{db_error, MetadataStore};
use crate::error::ProxyError;

impl MetadataStore {
    /// Deletes one row by its parts (maintenance paths hold rows, not
    /// requests).
    pub async fn forget_row(&self, remote: &str, path: &str) -> Result<(), ProxyError> {
        self.forget_row_of(remote, path, None).await.map(drop)
    }

    /// Whether any row still references the blob `digest` (hex).
    pub async fn digest_referenced(&self, digest: &str) -> Result<bool, ProxyError> {
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

    /// Deletes the row of `remote`/`path` — only if it still references
    /// `digest` (hex), when one is given; returns whether it did.
    pub async fn forget_row_of(
        &self,
        remote: &str,
        path: &str,
        digest: Option<&str>,
    ) -> Result<bool, ProxyError> {
        let key = format!("{remote}/{path}");
        self.index.remove(&key);
        self.cache.invalidate(&key);
        let done = sqlx::query(
            "DELETE FROM entries WHERE remote = $1 AND path = $2 AND ($3 IS NULL OR digest = $3)",
        )
        .bind(remote)
        .bind(path)
        .bind(digest.map(str::to_string))
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        self.shared_changed(&key, None).await;
        Ok(done.rows_affected() > 0)
    }

    /// The digests (hex) the rows of `remote` reference, each once.
    pub async fn remote_digests(&self, remote: &str) -> Result<Vec<String>, ProxyError> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT DISTINCT digest FROM entries WHERE remote = $1")
                .bind(remote)
                .fetch_all(&self.pool)
                .await
                .map_err(db_error)?;
        Ok(rows.into_iter().map(|(d,)| d).collect())
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
    pub(super) async fn delete_remote_digest(
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
        if let Some(digest) = super::Digest::from_hex(digest) {
            self.index.remove_digest(remote, &digest);
        }
        Ok(done.rows_affected())
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
}
