//! The `declared` table: what index documents said each artifact's hash
//! must be (see each ecosystem's `kind::Digests`), and digests pinned on
//! first use, kept with the metadata so that a restart or another instance
//! sharing the database checks fills against them too. (Dropping a cached
//! artifact that contradicts a new digest is the façade's:
//! `crate::cache::learn`.)

use futures_util::TryStreamExt as _;

use super::database::Database;
use super::memory::Memory;
use super::sql::{db_error, inserted_rows, placeholders};
use crate::error::ProxyError;
use crate::kind::declared::Declared;
use crate::kind::CachedAt;

/// Rows per statement: 4 parameters each stays far below SQLite's limit.
const CHUNK: usize = 200;

/// The `declared` table as the database has it, and the keys of it memory
/// keeps ([`super::declared_keys`]), kept in step: a key is added before its
/// row is written.
pub struct Declarations<'m> {
    pub(crate) db: &'m Database,
    pub(crate) memory: &'m Memory,
}

impl Declarations<'_> {
    /// Adds the key of every row of `declared` to the declared keys (the
    /// caller marks them complete). Returns how many rows it read.
    pub(crate) async fn load_declared_keys(&self) -> Result<usize, ProxyError> {
        let mut rows =
            sqlx::query_as::<_, (String, String)>("SELECT remote, artifact FROM declared")
                .fetch(&self.db.pool);
        let mut loaded = 0;
        while let Some((remote, artifact)) = rows.try_next().await.map_err(db_error)? {
            self.memory.declared_keys.add(&remote, &artifact);
            loaded += 1;
        }
        Ok(loaded)
    }

    /// The digest declared for `artifact` (an [`artifact_key`]) of `remote`.
    pub async fn declared(
        &self,
        remote: &str,
        artifact: &str,
    ) -> Result<Option<Declared>, ProxyError> {
        if self.memory.declared_keys.surely_absent(remote, artifact) && self.memory.memory_trusted()
        {
            return Ok(None);
        }
        self.db
            .row_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let row: Option<(String,)> =
            sqlx::query_as("SELECT digest FROM declared WHERE remote = $1 AND artifact = $2")
                .bind(remote)
                .bind(artifact)
                .fetch_optional(&self.db.pool)
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
            .execute(&self.db.pool)
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
                .fetch_all(&self.db.pool)
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
            let sql = upsert_sql(Some(1), fresh.len());
            let mut insert = sqlx::query(&sql);
            for (artifact, declared) in &fresh {
                self.memory.declared_keys.add(remote, artifact);
                insert = insert
                    .bind(remote)
                    .bind(artifact.as_str())
                    .bind(declared.to_string())
                    .bind(now_ms);
            }
            insert.execute(&self.db.pool).await.map_err(db_error)?;
            self.memory.others.wrote();
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
                query.fetch_all(&self.db.pool).await.map_err(db_error)?
            }
            CachedAt::Path => sqlx::query_as(
                "SELECT path, digest, size FROM entries WHERE remote = $1 AND path = $2",
            )
            .bind(remote)
            .bind(artifact)
            .fetch_all(&self.db.pool)
            .await
            .map_err(db_error)?,
        };
        Ok(rows)
    }
}

/// The statement that stores `rows` declared digests (each row's
/// parameters, numbered from `$first` or `?`s with NULL rows dropped:
/// remote, artifact, digest, learned_at), replacing what was declared
/// before.
pub(crate) fn upsert_sql(first: Option<usize>, rows: usize) -> String {
    format!(
        "INSERT INTO declared (remote, artifact, digest, learned_at) {} \
         ON CONFLICT (remote, artifact) DO UPDATE SET digest = excluded.digest, \
         learned_at = excluded.learned_at",
        inserted_rows(first, rows, 4)
    )
}
