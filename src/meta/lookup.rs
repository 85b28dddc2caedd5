//! Finding the entry of a key: the entry cache, the entry index, Redis, then
//! the database row; and loading the index, in the background, from the
//! rows (see `super::index` for what a complete index lets a lookup skip).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::TryStreamExt as _;

use super::entry::Entry;
use super::index::{Fields, Found, Key, Record};
use super::metadata::{EntryRow, MetadataStore};
use super::sql::db_error;
use crate::error::ProxyError;
use crate::path::ArtifactPath;
use crate::store::Digest;

/// The columns the index loads, in the order [`MetadataStore::add_row`]
/// reads them.
const INDEX_COLUMNS: &str = "SELECT remote, path, digest, size, content_type, \
     upstream_last_modified, fetched_at, \
     CAST(CASE WHEN kept_headers IS NULL THEN 0 ELSE 1 END AS BIGINT) FROM entries";

/// Records handed to the index at once (under its load lock).
const BATCH: usize = 4096;

/// Ranges of `rowid` SQLite loads side by side, each on its own connection
/// (and its own worker thread).
const SQLITE_PARTS: i64 = 2;

impl MetadataStore {
    /// The entry for `path`, for a request: a key a complete index does not
    /// list has no row (no query).
    pub async fn lookup(&self, path: &ArtifactPath) -> Result<Option<Arc<Entry>>, ProxyError> {
        self.find(path, true).await
    }

    /// The entry for `path`, for the fill's double check under its registry
    /// slot: as [`MetadataStore::lookup`] while no other process wrote the
    /// database since memory was loaded; else read from the database, which
    /// finds a row `mirrorcache import` added from another process.
    pub async fn lookup_row(&self, path: &ArtifactPath) -> Result<Option<Arc<Entry>>, ProxyError> {
        self.find(path, self.memory.memory_trusted()).await
    }

    async fn find(
        &self,
        path: &ArtifactPath,
        trust_index: bool,
    ) -> Result<Option<Arc<Entry>>, ProxyError> {
        if let Some(entry) = self.memory.cache.get(path.key()) {
            return Ok(Some(entry));
        }
        // What this lookup reads is remembered only if no purge of the key
        // comes before it is.
        let ticket = self.memory.purges.ticket();
        match self.memory.index.get(path.key()) {
            // Put in the entry cache only if hit again soon
            // (`Memory::touch`): an insertion (and the eviction it causes)
            // costs a random hit more than building the entry again.
            Found::Entry(entry) => return Ok(Some(Arc::new(entry))),
            Found::Absent if trust_index => return Ok(None),
            Found::Absent | Found::Unknown => {}
        }
        if let Some(cluster) = self.memory.cluster.get() {
            if let Some(entry) = cluster.get_entry(path.key()).await {
                let entry = Arc::new(entry);
                self.memory.remember_read(path, &entry, ticket);
                return Ok(Some(entry));
            }
        }
        let Some(entry) = self.read_row(path).await? else {
            return Ok(None);
        };
        let entry = Arc::new(entry);
        if self.memory.remember_read(path, &entry, ticket) {
            if let Some(cluster) = self.memory.cluster.get() {
                cluster.put_entry(path.key(), &entry).await;
            }
        }
        Ok(Some(entry))
    }

    /// The row of `path` as the database has it (the mirror's `ETag`
    /// included, which the index does not keep), not remembered.
    pub async fn read_row(&self, path: &ArtifactPath) -> Result<Option<Entry>, ProxyError> {
        self.db.check_available()?;
        self.db.row_reads.fetch_add(1, Ordering::Relaxed);
        let row: Option<EntryRow> = sqlx::query_as(
            "SELECT digest, size, content_type, upstream_etag, upstream_last_modified, fetched_at, \
             kept_headers FROM entries WHERE remote = $1 AND path = $2",
        )
        .bind(path.remote())
        .bind(path.stored_path())
        .fetch_optional(&self.db.pool)
        .await
        .map_err(|e| self.db.failed(e))?;
        self.db.recovered();
        let Some((digest, size, content_type, etag, last_modified, fetched_at, kept)) = row else {
            return Ok(None);
        };
        let Some(digest) = Digest::from_hex(&digest) else {
            tracing::warn!(
                key = path.key(),
                "metadata row has a malformed digest; treating as a miss"
            );
            return Ok(None);
        };
        let mut entry = Entry::new(
            digest,
            size as u64,
            content_type,
            etag,
            last_modified,
            fetched_at,
        );
        entry.kept_headers = kept;
        Ok(Some(entry))
    }

    /// Loads every row into the entry index (the caller began the load,
    /// [`super::index::Index::begin_load`], and ends it). On SQLite through
    /// the typed driver, `rowid` ranges side by side: the `Any` driver
    /// copies each value into an owned one (about 5 µs a row). Returns how
    /// many rows it loaded.
    pub async fn load_index(&self) -> Result<usize, ProxyError> {
        let Some(url) = &self.db.sqlite_url else {
            let mut rows = sqlx::query(INDEX_COLUMNS).fetch(&self.db.pool);
            let mut loader = Loader::new(self);
            while let Some(row) = rows.try_next().await.map_err(db_error)? {
                loader.add(&row).map_err(db_error)?;
            }
            return Ok(loader.finish());
        };
        self.load_sqlite(url).await.map_err(db_error)
    }

    async fn load_sqlite(&self, url: &str) -> Result<usize, sqlx::Error> {
        use sqlx::ConnectOptions as _;
        let options: sqlx::sqlite::SqliteConnectOptions = url.parse()?;
        let options = options.read_only(true);
        let mut conn = options.connect().await?;
        let (low, high): (Option<i64>, Option<i64>) =
            sqlx::query_as("SELECT MIN(rowid), MAX(rowid) FROM entries")
                .fetch_one(&mut conn)
                .await?;
        let (Some(low), Some(high)) = (low, high) else {
            return Ok(0);
        };
        let step = (high - low) / SQLITE_PARTS + 1;
        let sql = format!("{INDEX_COLUMNS} WHERE rowid BETWEEN $1 AND $2");
        let parts = (0..SQLITE_PARTS).map(|part| {
            let (options, sql) = (options.clone(), sql.as_str());
            async move {
                let from = low + part * step;
                let mut conn = options.connect().await?;
                // One pass over the rows: a page read is not read again, so
                // no page cache (its 2 MB stayed with the C allocator).
                sqlx::query("PRAGMA cache_size = 16")
                    .execute(&mut conn)
                    .await?;
                let mut rows = sqlx::query(sql)
                    .bind(from)
                    .bind(from + step - 1)
                    .fetch(&mut conn);
                let mut loader = Loader::new(self);
                while let Some(row) = rows.try_next().await? {
                    loader.add(&row)?;
                }
                Ok::<usize, sqlx::Error>(loader.finish())
            }
        });
        let loaded = futures_util::future::try_join_all(parts).await?;
        Ok(loaded.into_iter().sum())
    }
}

/// One stream of rows on its way into the index, in batches.
struct Loader<'m> {
    meta: &'m MetadataStore,
    batch: Vec<(Key, Record)>,
    key: String,
    loaded: usize,
}

impl<'m> Loader<'m> {
    fn new(meta: &'m MetadataStore) -> Loader<'m> {
        Loader {
            meta,
            batch: Vec::with_capacity(BATCH),
            key: String::new(),
            loaded: 0,
        }
    }

    /// Adds a row of [`INDEX_COLUMNS`], borrowing its text.
    fn add<'r, R: sqlx::Row>(&mut self, row: &'r R) -> Result<(), sqlx::Error>
    where
        &'r str: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        usize: sqlx::ColumnIndex<R>,
    {
        let remote: &str = row.try_get(0)?;
        let path: &str = row.try_get(1)?;
        let Some(digest) = Digest::from_hex(row.try_get(2)?) else {
            return Ok(());
        };
        let size: i64 = row.try_get(3)?;
        let kept: i64 = row.try_get(7)?;
        let fields = Fields {
            digest,
            size: size as u64,
            content_type: row.try_get(4)?,
            last_modified: row.try_get(5)?,
            fetched_at_ms: row.try_get(6)?,
            kept: kept != 0,
        };
        self.key.clear();
        self.key.push_str(remote);
        self.key.push('/');
        self.key.push_str(path);
        let index = &self.meta.memory.index;
        self.batch
            .push((index.key(&self.key), index.record(remote, &fields)));
        self.loaded += 1;
        if self.batch.len() == BATCH {
            index.load(&mut self.batch);
        }
        Ok(())
    }

    fn finish(mut self) -> usize {
        self.meta.memory.index.load(&mut self.batch);
        self.loaded
    }
}
