//! Declared digests kept with the metadata: what index documents said each
//! artifact's hash must be (see each ecosystem's `kind::Digests`), so that a restart or
//! another instance sharing the database checks fills against them too. A
//! newly learned digest that contradicts a cached artifact drops that entry,
//! so the next request fetches it again.

use std::collections::HashMap;

use futures_util::StreamExt as _;

use super::meta::{db_error, MetadataStore};
use super::sql::{placeholders, value_rows};
use super::{Blob, Cache, Digest};
use crate::error::ProxyError;
use crate::kind::declared::{Algo, Declared, Hashers};
use crate::kind::{CachedAt, Kind};

/// Rows per statement: 4 parameters each stays far below SQLite's limit.
const CHUNK: usize = 200;

/// What one document taught.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    /// Digests the document declared.
    pub declared: usize,
    /// Of those, new or different from what was known.
    pub changed: usize,
    /// Cached artifacts dropped because they contradict a new digest.
    pub evicted: usize,
}

impl MetadataStore {
    /// The digest declared for `artifact` (an [`artifact_key`]) of `remote`.
    pub async fn declared(
        &self,
        remote: &str,
        artifact: &str,
    ) -> Result<Option<Declared>, ProxyError> {
        if self.declared_keys.surely_absent(remote, artifact) && self.memory_trusted() {
            return Ok(None);
        }
        self.row_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let row: Option<(String,)> =
            sqlx::query_as("SELECT digest FROM declared WHERE remote = $1 AND artifact = $2")
                .bind(remote)
                .bind(artifact)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_error)?;
        Ok(row.and_then(|(text,)| Declared::parse(&text)))
    }

    /// Forgets the digest declared (or pinned) for `artifact` of `remote`;
    /// returns whether there was one.
    pub async fn forget_declared(&self, remote: &str, artifact: &str) -> Result<bool, ProxyError> {
        let done = sqlx::query("DELETE FROM declared WHERE remote = $1 AND artifact = $2")
            .bind(remote)
            .bind(artifact)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(done.rows_affected() > 0)
    }

    /// Stores `items`; returns those that were new or changed.
    pub async fn record_declared<'a>(
        &self,
        remote: &str,
        items: &'a [(String, Declared)],
        now_ms: i64,
    ) -> Result<Vec<&'a (String, Declared)>, ProxyError> {
        let mut changed = Vec::new();
        for chunk in items.chunks(CHUNK) {
            let sql = format!(
                "SELECT artifact, digest FROM declared WHERE remote = $1 AND artifact IN ({})",
                placeholders(2, chunk.len())
            );
            let mut query = sqlx::query_as::<_, (String, String)>(&sql).bind(remote);
            for (artifact, _) in chunk {
                query = query.bind(artifact.as_str());
            }
            let known: std::collections::HashMap<String, String> = query
                .fetch_all(&self.pool)
                .await
                .map_err(db_error)?
                .into_iter()
                .collect();
            let fresh: Vec<&(String, Declared)> = chunk
                .iter()
                .filter(|(artifact, declared)| {
                    known.get(artifact).map(String::as_str) != Some(&declared.to_string())
                })
                .collect();
            if fresh.is_empty() {
                continue;
            }
            let sql = upsert_sql(fresh.len());
            let mut insert = sqlx::query(&sql);
            for (artifact, declared) in &fresh {
                self.declared_keys.add(remote, artifact);
                insert = insert
                    .bind(remote)
                    .bind(artifact.as_str())
                    .bind(declared.to_string())
                    .bind(now_ms);
            }
            insert.execute(&self.pool).await.map_err(db_error)?;
            self.others.wrote();
            changed.extend(fresh);
        }
        Ok(changed)
    }

    /// Cached rows of `remote` that may be the artifact `artifact`, which is
    /// cached at `at`: (path, digest, size). For a `Like` place, every row a
    /// pattern matches (callers match each row's `artifact_key`).
    pub async fn rows_for_artifact(
        &self,
        remote: &str,
        artifact: &str,
        at: &CachedAt,
    ) -> Result<Vec<(String, String, i64)>, ProxyError> {
        let rows: Vec<(String, String, i64)> = match at {
            CachedAt::Like { patterns, .. } => {
                let like = (0..patterns.len())
                    .map(|n| format!("lower(path) LIKE ${}", n + 2))
                    .collect::<Vec<_>>()
                    .join(" OR ");
                let sql = format!(
                    "SELECT path, digest, size FROM entries WHERE remote = $1 AND ({like})"
                );
                let mut query = sqlx::query_as(&sql).bind(remote);
                for pattern in patterns {
                    query = query.bind(pattern);
                }
                query.fetch_all(&self.pool).await.map_err(db_error)?
            }
            CachedAt::Path => sqlx::query_as(
                "SELECT path, digest, size FROM entries WHERE remote = $1 AND path = $2",
            )
            .bind(remote)
            .bind(artifact)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?,
        };
        Ok(rows)
    }
}

/// The statement that stores `rows` declared digests (each row's
/// parameters: remote, artifact, digest, learned_at), replacing what was
/// declared before.
pub(super) fn upsert_sql(rows: usize) -> String {
    format!(
        "INSERT INTO declared (remote, artifact, digest, learned_at) VALUES {} \
         ON CONFLICT (remote, artifact) DO UPDATE SET digest = excluded.digest, \
         learned_at = excluded.learned_at",
        value_rows(rows, 4)
    )
}

impl Cache {
    /// Keeps what a document of `remote` declared, and drops cached
    /// artifacts that contradict a digest new to it.
    pub async fn learn_declared(
        &self,
        remote: &str,
        kind: Kind,
        items: &[(String, Declared)],
        now_ms: i64,
    ) -> Result<Learned, ProxyError> {
        let changed = self.meta.record_declared(remote, items, now_ms).await?;
        Ok(Learned {
            declared: items.len(),
            changed: changed.len(),
            evicted: self.evict_contradicting(remote, kind, changed).await?,
        })
    }

    /// Drops the cached artifacts of `remote` that contradict a digest in
    /// `changed` (new or different declarations); returns how many.
    pub(super) async fn evict_contradicting(
        &self,
        remote: &str,
        kind: Kind,
        changed: Vec<&(String, Declared)>,
    ) -> Result<usize, ProxyError> {
        let mut evicted = 0;
        let Some(digests) = kind.digests() else {
            return Ok(evicted);
        };
        // Rows cached at patterns are looked up once per group (cargo: an
        // index file is one crate), every other artifact's by its path.
        let mut of_group: HashMap<String, Vec<(String, String, i64)>> = HashMap::new();
        for (artifact, declared) in changed {
            let at = digests.cached_at(artifact);
            let rows = match &at {
                CachedAt::Like { group, .. } => {
                    if !of_group.contains_key(group) {
                        let rows = self.meta.rows_for_artifact(remote, artifact, &at).await?;
                        of_group.insert(group.clone(), rows);
                    }
                    of_group[group].clone()
                }
                CachedAt::Path => self.meta.rows_for_artifact(remote, artifact, &at).await?,
            };
            let rows = rows
                .into_iter()
                .filter(|(path, _, _)| digests.artifact_key(path).as_deref() == Some(artifact));
            for (path, digest, size) in rows {
                let Some(digest) = Digest::from_hex(&digest) else {
                    continue;
                };
                if self.blob_matches(&digest, size as u64, declared).await {
                    continue;
                }
                tracing::warn!(
                    remote,
                    path,
                    expected = %declared,
                    "cached artifact contradicts its declared digest; dropping it"
                );
                self.metrics.integrity_failure(remote, "cache");
                self.forget_row(remote, &path).await?;
                evicted += 1;
            }
        }
        Ok(evicted)
    }

    /// Whether the stored blob `digest` is what `declared` says (a missing
    /// or unreadable blob is left to the hit path, which refetches it).
    async fn blob_matches(&self, digest: &Digest, size: u64, declared: &Declared) -> bool {
        if declared.algo() == Algo::Sha256 {
            return declared.matches(&digest.0);
        }
        let Ok(blob) = self.blobs.open(digest).await else {
            return true;
        };
        self.hash_blob(blob, size, declared)
            .await
            .map_or(true, |received| &received == declared)
    }

    /// The digest of `size` bytes of `blob` in the function `like` uses,
    /// hashed on the blocking pool a chunk at a time.
    pub async fn hash_blob(
        &self,
        blob: Blob,
        size: u64,
        like: &Declared,
    ) -> std::io::Result<Declared> {
        let mut hashers = Hashers::new(Some(like));
        let mut stream = blob.stream(0, size);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            hashers = tokio::task::spawn_blocking(move || {
                hashers.update(&chunk);
                hashers
            })
            .await
            .map_err(std::io::Error::other)?;
        }
        Ok(hashers.finish().1)
    }
}
