//! The rows a bundle carries (`mirrorcache export` / `import`), and the
//! queries that read and add them. Rows are added through
//! [`crate::cache::Cache::commit_entry`], like a fill's, so the blob, the
//! row, the size count and the in-memory tiers stay in step; only declared
//! digests, which have no blob, are inserted here (and only where the
//! database has none: what a running server learned is never overwritten).

use serde::{Deserialize, Serialize};

use crate::error::ProxyError;
use crate::meta::sql::db_error;
use crate::meta::MetadataStore;

/// One cached entry as a bundle's manifest lists it: the row without the
/// access times and hit counts, which belong to the machine it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundledEntry {
    pub remote: String,
    /// As the row stores it: the path below the remote, with `?variant` for
    /// a content-negotiated document.
    pub path: String,
    /// sha256, hex.
    pub digest: String,
    pub size: u64,
    pub content_type: Option<String>,
    pub upstream_etag: Option<String>,
    pub upstream_last_modified: Option<String>,
    pub fetched_at_ms: i64,
}

/// A declared digest (`algo:hex`) an index document taught, by the key its
/// ecosystem keeps it under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundledDeclared {
    pub remote: String,
    pub artifact: String,
    pub digest: String,
    pub learned_at_ms: i64,
}

type BundledRow = (
    String,
    String,
    String,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
);

/// The rows of `remote` whose path starts with `prefix`, fetched or
/// revalidated at or after `since_ms`, sorted by path.
pub async fn entries(
    meta: &MetadataStore,
    remote: &str,
    prefix: &str,
    since_ms: i64,
) -> Result<Vec<BundledEntry>, ProxyError> {
    let rows: Vec<BundledRow> = sqlx::query_as(
        "SELECT remote, path, digest, size, content_type, upstream_etag, upstream_last_modified, fetched_at \
         FROM entries WHERE remote = $1 AND substr(path, 1, CAST($2 AS INTEGER)) = $3 AND fetched_at >= $4 \
         ORDER BY path",
    )
    .bind(remote)
    .bind(prefix.chars().count() as i64)
    .bind(prefix)
    .bind(since_ms)
    .fetch_all(meta.db.pool())
    .await
    .map_err(db_error)?;
    Ok(rows
        .into_iter()
        .map(
            |(remote, path, digest, size, content_type, etag, modified, fetched)| BundledEntry {
                remote,
                path,
                digest,
                size: size as u64,
                content_type,
                upstream_etag: etag,
                upstream_last_modified: modified,
                fetched_at_ms: fetched,
            },
        )
        .collect())
}

/// The declared digests of `remote` learned at or after `since_ms`.
pub async fn declared(
    meta: &MetadataStore,
    remote: &str,
    since_ms: i64,
) -> Result<Vec<BundledDeclared>, ProxyError> {
    let rows: Vec<(String, String, String, i64)> = sqlx::query_as(
        "SELECT remote, artifact, digest, learned_at FROM declared \
         WHERE remote = $1 AND learned_at >= $2 ORDER BY artifact",
    )
    .bind(remote)
    .bind(since_ms)
    .fetch_all(meta.db.pool())
    .await
    .map_err(db_error)?;
    Ok(rows
        .into_iter()
        .map(
            |(remote, artifact, digest, learned_at_ms)| BundledDeclared {
                remote,
                artifact,
                digest,
                learned_at_ms,
            },
        )
        .collect())
}

/// Adds the declared digests the database does not have (one known for
/// the same artifact is kept, whatever it says); returns how many.
pub async fn add_declared_if_absent(
    meta: &MetadataStore,
    items: &[BundledDeclared],
) -> Result<usize, ProxyError> {
    let mut tx = meta.db.pool().begin().await.map_err(db_error)?;
    let mut added = 0;
    for item in items {
        meta.memory.declared_keys.add(&item.remote, &item.artifact);
        let done = sqlx::query(
            "INSERT INTO declared (remote, artifact, digest, learned_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (remote, artifact) DO NOTHING",
        )
        .bind(&item.remote)
        .bind(&item.artifact)
        .bind(&item.digest)
        .bind(item.learned_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        added += done.rows_affected() as usize;
    }
    tx.commit().await.map_err(db_error)?;
    meta.memory.others.wrote();
    Ok(added)
}
