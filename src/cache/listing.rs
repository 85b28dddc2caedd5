//! What is cached, as `mirrorcache ls` lists it: rows of the metadata
//! database with their size, times and hit counts (written in batches with
//! the access times; see `MetadataStore::flush_access_times`).

use super::meta::MetadataStore;
use crate::error::ProxyError;

/// One row as `mirrorcache ls` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listed {
    pub remote: String,
    pub path: String,
    pub size: u64,
    /// When the body was fetched or last revalidated (unix ms).
    pub fetched_at_ms: i64,
    /// Last hit (unix ms), as last flushed.
    pub last_access_ms: i64,
    /// Hits, as last flushed (every 30 s, and at shutdown).
    pub hits: u64,
}

impl MetadataStore {
    /// The rows of `remote` (every remote when `None`) whose path starts with
    /// `prefix`, sorted by remote and path. Prefix matching with `substr`
    /// rather than `LIKE`: no wildcard to escape, and both backends have it.
    pub async fn list(
        &self,
        remote: Option<&str>,
        prefix: &str,
    ) -> Result<Vec<Listed>, ProxyError> {
        let rows: Vec<(String, String, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT remote, path, size, fetched_at, last_access, hits FROM entries \
             WHERE ($1 = '' OR remote = $1) AND substr(path, 1, CAST($2 AS INTEGER)) = $3 \
             ORDER BY remote, path",
        )
        .bind(remote.unwrap_or(""))
        .bind(prefix.chars().count() as i64)
        .bind(prefix)
        .fetch_all(self.pool())
        .await
        .map_err(|e| ProxyError::Metadata(e.to_string()))?;
        Ok(rows
            .into_iter()
            .map(
                |(remote, path, size, fetched_at_ms, last_access_ms, hits)| Listed {
                    remote,
                    path,
                    size: size as u64,
                    fetched_at_ms,
                    last_access_ms,
                    hits: hits as u64,
                },
            )
            .collect())
    }
}
