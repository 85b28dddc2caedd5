//! What is cached, a page at a time, as the browse pages show it: rows of
//! the metadata database with their size, times and hit counts (the counts
//! the hit path keeps in memory added to the flushed ones; see
//! `MetadataStore::flush_access_times`).

use super::metadata::MetadataStore;
use crate::error::ProxyError;

/// One row as the browse page (`/-/browse/{remote}/{prefix}`) shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Browsed {
    /// As stored: below the remote, with `?variant` for a negotiated document.
    pub path: String,
    pub digest: String,
    pub size: u64,
    pub fetched_at_ms: i64,
    pub last_access_ms: i64,
    pub hits: u64,
}

/// A page of a remote's rows.
#[derive(Debug, Clone, Default)]
pub struct BrowsePage {
    pub rows: Vec<Browsed>,
    /// Whether rows follow the last one.
    pub more: bool,
    /// Rows and bytes under the prefix, all pages.
    pub total_entries: u64,
    pub total_bytes: u64,
}

impl MetadataStore {
    /// Up to `limit` rows of `remote` whose path starts with `prefix`, after
    /// the path `after` (keyset paging: a page is one index range however
    /// deep), sorted by path.
    pub async fn browse(
        &self,
        remote: &str,
        prefix: &str,
        after: &str,
        limit: usize,
    ) -> Result<BrowsePage, ProxyError> {
        let rows: Vec<(String, String, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT path, digest, size, fetched_at, last_access, hits FROM entries \
             WHERE remote = $1 AND substr(path, 1, CAST($2 AS INTEGER)) = $3 AND path > $4 \
             ORDER BY path LIMIT $5",
        )
        .bind(remote)
        .bind(prefix.chars().count() as i64)
        .bind(prefix)
        .bind(after)
        .bind(limit as i64 + 1)
        .fetch_all(self.db.pool())
        .await
        .map_err(|e| ProxyError::Metadata(e.to_string()))?;
        let (total_entries, total_bytes): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM entries \
             WHERE remote = $1 AND substr(path, 1, CAST($2 AS INTEGER)) = $3",
        )
        .bind(remote)
        .bind(prefix.chars().count() as i64)
        .bind(prefix)
        .fetch_one(self.db.pool())
        .await
        .map_err(|e| ProxyError::Metadata(e.to_string()))?;
        let more = rows.len() > limit;
        Ok(BrowsePage {
            rows: rows
                .into_iter()
                .take(limit)
                .map(
                    |(path, digest, size, fetched_at_ms, last_access_ms, hits)| {
                        // Hits and the access time the hit path kept in memory
                        // and has not flushed yet.
                        let (pending, in_memory) =
                            self.memory.unflushed(&format!("{remote}/{path}"));
                        Browsed {
                            path,
                            digest,
                            size: size as u64,
                            fetched_at_ms,
                            last_access_ms: last_access_ms.max(in_memory),
                            hits: hits as u64 + pending,
                        }
                    },
                )
                .collect(),
            more,
            total_entries: total_entries as u64,
            total_bytes: total_bytes as u64,
        })
    }
}
