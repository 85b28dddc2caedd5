//! [`MetadataStore`]: which `remote/path` maps to which blob, with the headers
//! and times needed to serve and revalidate it: the database
//! ([`super::database`]) with memory in front ([`super::memory`]), kept in
//! step by the writers here (a row recorded, revalidated, its access times
//! flushed) and in [`super::lifetime`], read by [`super::lookup`].

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::database::Database;
use super::declared_rows::Declarations;
use super::entry::Entry;
use super::memory::Memory;
use super::purge::Ticket;
use super::sql::db_error;
use crate::error::ProxyError;
use crate::path::ArtifactPath;
use crate::store::DigestTable;

pub(crate) type EntryRow = (
    String,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<String>,
);

pub struct MetadataStore {
    /// The database: its pool, migrations and back-off, and the queries of
    /// the `entries` table that touch no memory.
    pub db: Database,
    /// What memory holds of the rows (entry cache, index, purge
    /// generations, Redis), kept in step by the writers here.
    pub memory: Memory,
}

impl MetadataStore {
    /// The `declared` table, with the keys memory keeps of it.
    pub fn declarations(&self) -> Declarations<'_> {
        Declarations {
            db: &self.db,
            memory: &self.memory,
        }
    }

    /// Connects (creating a SQLite file and its directory if needed) and applies
    /// the embedded migrations, again while SQLite says the database is
    /// locked (a server or a command beside this process writes it). The
    /// entry cache holds at most `cache_entries` entries and `cache_memory`
    /// bytes of them.
    pub async fn connect(
        url: &str,
        cache_entries: u64,
        cache_memory: u64,
    ) -> Result<MetadataStore, sqlx::Error> {
        Self::connect_sharing(url, cache_entries, cache_memory, Arc::default()).await
    }

    /// [`MetadataStore::connect`], the entry index naming digests in
    /// `digests` (the content store's: `ContentStore::digest_table`), so a
    /// digest a row names and a pack holds is kept once.
    pub async fn connect_sharing(
        url: &str,
        cache_entries: u64,
        cache_memory: u64,
        digests: Arc<DigestTable>,
    ) -> Result<MetadataStore, sqlx::Error> {
        super::sqlite::retrying_busy(|| async {
            let db = Database::connect(url).await?;
            let memory = Memory::new(
                cache_entries,
                cache_memory,
                db.rows_at_start,
                digests.clone(),
                db.file.clone(),
            );
            Ok(MetadataStore { db, memory })
        })
        .await
    }

    /// Records (or replaces) the entry for `path` (a batch of one; fills
    /// go through the group commit, `crate::cache::commit`).
    pub async fn record(
        &self,
        path: &ArtifactPath,
        entry: Entry,
    ) -> Result<Arc<Entry>, ProxyError> {
        self.record_batch(&[(path, &entry)]).await?;
        Ok(self.recorded(path, entry).await)
    }

    /// After its row is written: `entry` in memory, and shared.
    pub(crate) async fn recorded(&self, path: &ArtifactPath, entry: Entry) -> Arc<Entry> {
        let entry = Arc::new(entry);
        self.memory.index.insert(path.key(), &entry);
        self.memory
            .cache
            .insert(path.key().to_string(), entry.clone());
        self.memory.shared_changed(path.key(), Some(&entry)).await;
        entry
    }

    /// Marks the entry for `path` as revalidated now; returns the refreshed entry.
    /// Not remembered (in memory or Redis) if a purge of `path` came after
    /// `ticket` (taken when the revalidation began).
    pub async fn mark_revalidated(
        &self,
        path: &ArtifactPath,
        entry: &Entry,
        now_ms: i64,
        ticket: Ticket,
    ) -> Result<Arc<Entry>, ProxyError> {
        let updated =
            sqlx::query("UPDATE entries SET fetched_at = $1 WHERE remote = $2 AND path = $3")
                .bind(now_ms)
                .bind(path.remote())
                .bind(path.stored_path())
                .execute(&self.db.pool)
                .await
                .map_err(db_error)?;
        let mut fresh = entry.clone();
        fresh.fetched_at_ms = now_ms;
        let fresh = Arc::new(fresh);
        // No row updated: it was deleted meanwhile, and is not put back.
        if updated.rows_affected() == 1 && self.memory.remember_read(path, &fresh, ticket) {
            self.memory.shared_changed(path.key(), Some(&fresh)).await;
        }
        Ok(fresh)
    }

    /// Drops the entry for `path` (its blob is gone, or it was purged).
    pub async fn forget(&self, path: &ArtifactPath) -> Result<(), ProxyError> {
        self.forget_row(path.remote(), path.stored_path()).await
    }

    /// Writes the access times and hit counts of hot entries touched since
    /// the last flush, in one transaction. Returns how many rows it updated.
    pub async fn flush_access_times(&self) -> Result<usize, ProxyError> {
        let mut touched = Vec::new();
        for (key, entry) in self.memory.cache.iter() {
            let last = entry.last_access_ms.load(Ordering::Relaxed);
            let hits = entry.pending_hits.load(Ordering::Relaxed);
            if last > entry.flushed_access_ms.load(Ordering::Relaxed) || hits > 0 {
                touched.push((key, entry, last, hits));
            }
        }
        // Taken now: a failed flush loses them (as it would lose nothing of
        // the entry cache's, which keeps its counts pending). A key hit
        // from its record and then from its held entry is one row.
        let mut rows: HashMap<&str, (i64, u64)> = HashMap::new();
        let from_index = self.memory.touched.take();
        let held = touched
            .iter()
            .map(|(key, _, last, hits)| (key.as_str(), *last, *hits));
        let noted = from_index
            .iter()
            .map(|(key, last, hits)| (key.as_str(), *last, *hits));
        for (key, last, hits) in held.chain(noted) {
            let row = rows.entry(key).or_default();
            *row = (row.0.max(last), row.1 + hits);
        }
        if rows.is_empty() {
            return Ok(0);
        }
        let updated = rows.len();
        // In key order: the rows' index is walked once, front to back.
        let mut rows: Vec<(&str, (i64, u64))> = rows.into_iter().collect();
        rows.sort_unstable_by_key(|(key, _)| *key);
        let mut tx = self.db.pool.begin().await.map_err(db_error)?;
        let sqlite = self.db.sqlite;
        let per_update = if sqlite {
            ACCESS_ROWS_PER_SQLITE_UPDATE
        } else {
            ACCESS_ROWS_PER_POSTGRES_UPDATE
        };
        for chunk in rows.chunks(per_update) {
            let sql = access_update_sql(chunk.len(), sqlite);
            let mut query = sqlx::query(&sql);
            for (key, (last, hits)) in chunk {
                let (remote, path) = key.split_once('/').unwrap_or((key, ""));
                query = query.bind(*last).bind(*hits as i64).bind(remote).bind(path);
            }
            query.execute(&mut *tx).await.map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        for (_, entry, last, hits) in &touched {
            entry.flushed_access_ms.store(*last, Ordering::Relaxed);
            // Hits counted while the transaction ran stay pending.
            entry.pending_hits.fetch_sub(*hits, Ordering::Relaxed);
        }
        Ok(updated)
    }
}

/// Rows per statement of the access-time flush on Postgres (4 parameters a
/// row, numbered `$n`): the figure measured on SQLite with `$n` parameters
/// (one statement a row cost a round trip to its thread each, 7.7 s of CPU
/// to flush 100k rows; BENCHMARKS.md, "Random hits"); not measured on
/// Postgres.
const ACCESS_ROWS_PER_POSTGRES_UPDATE: usize = 32;

/// Rows per statement on SQLite: its `?`s have no names for it to search
/// when sqlx binds them (a `$n` is found by a scan of every name, so a text
/// of many costs their square); fewer round trips to its thread; 1,024
/// parameters of its 32,766. A flush's last statement has a length of its
/// own, prepared once a flush.
const ACCESS_ROWS_PER_SQLITE_UPDATE: usize = 256;

/// One `UPDATE … FROM (VALUES …)` of `rows` rows of (last access, hits,
/// remote, path): the list's columns are `column1` … `column4` in both
/// backends, and the later of the two access times is kept. On SQLite the
/// parameters are `?`s and the statement is `OR FAIL`: no constraint of
/// these columns can fail, and a statement that would back out its own
/// changes (`ABORT`, the default) inside the flush's transaction first
/// copies every page it changes to a statement journal, which past 64 KiB
/// is a temporary file: 40 % of a 130k-row flush's CPU (BENCHMARKS.md,
/// "Random hits"). A failure still rolls back the whole transaction.
fn access_update_sql(rows: usize, sqlite: bool) -> String {
    let (verb, first) = match sqlite {
        true => ("UPDATE OR FAIL", None),
        false => ("UPDATE", Some(1)),
    };
    format!(
        "{verb} entries SET hits = hits + v.column2, \
         last_access = CASE WHEN last_access > v.column1 THEN last_access ELSE v.column1 END \
         FROM (VALUES {}) AS v \
         WHERE entries.remote = v.column3 AND entries.path = v.column4",
        super::sql::value_rows_from(first, rows, 4)
    )
}

impl Drop for MetadataStore {
    fn drop(&mut self) {
        self.memory.others.close();
    }
}
