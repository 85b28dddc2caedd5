//! Group commit: the fills that finish close together share their
//! durability work.
//!
//! A fill whose body is complete and checked takes a place in a bounded
//! queue ([`Cache::commit_slot`]; when the queue is full it waits there, and
//! so do its readers' last bytes: back-pressure, never a refusal), hands
//! its temp file over ([`CommitSlot::send`]) and is done with its
//! `max_fills` slot. One task, the committer, takes what is queued — the
//! first commit, then whatever arrives within [`COMMIT_DELAY`], up to
//! [`MAX_BATCH`] — and commits the batch at once ([`Cache::commit_batch`]):
//!
//! 1. under the locks of every path and digest it touches (the same locks a
//!    single commit took, in the same order: paths, then digests, each set
//!    sorted), the rows it replaces and the digests already referenced are
//!    read, one query each;
//! 2. the blobs are made durable ([`BlobStore::commit_batch`]): every temp
//!    file's data synced side by side, the renames, each directory synced
//!    once (a batch of 16 or more: the file system synced whole before the
//!    renames and again after them); a blob already in place is not
//!    written again;
//! 3. every row, and every pin on first use the batch carries ([`Pin`]), is
//!    written in one database transaction (on SQLite with
//!    `synchronous = FULL` for that transaction, so it is on disk when the
//!    commit returns; Postgres's default commit is durable);
//! 4. the counts, the release of replaced blobs, the in-memory entries and
//!    the shared entries in Redis, then each fill is answered.
//!
//! What a power cut leaves, at each step: before 2 is done, temp files
//! (removed at the next start, their owner's lock being free) and no row;
//! between 2 and 3, synced blobs without rows (not served, not counted;
//! `verify --remove` deletes them after an hour, and a fill of the same
//! bytes puts a row back); after 3, rows whose blobs were synced first. A
//! row never points at a blob that was not synced, and a crash loses at
//! most the batch in flight (its clients had their bytes; the next request
//! fetches them again).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::meta::{db_error, Entry, MetadataStore};
use super::purge::Ticket;
use super::sql::{placeholders, value_rows};
use super::{Cache, Digest, TempBlob};
use crate::error::ProxyError;
use crate::kind::declared::Declared;
use crate::kind::{CachedAt, Kind};
use crate::path::ArtifactPath;

/// How long the committer waits after a batch's first commit for others to
/// join it.
pub const COMMIT_DELAY: Duration = Duration::from_millis(2);
/// The most commits in one batch.
pub const MAX_BATCH: usize = 128;
/// Keys per `IN (…)` list of the batch's reads: far below either backend's
/// parameter limit.
const ROWS_PER_STATEMENT: usize = 100;
/// Rows per `INSERT` of the batch's writes (10 parameters a row, 4 a pin):
/// sqlx binds a parameter after asking SQLite its name, found by a scan of
/// the statement's parameters, so binding costs their square (at 100 rows,
/// 5.7 % of a sustained miss's CPU: BENCHMARKS.md, round three).
const ROWS_PER_INSERT: usize = 16;

/// A digest pinned on first use ([`crate::fill::learn::pin_key`]), written
/// with its entry's row in the batch's transaction: the pin is durable
/// exactly when the entry is, at no statement of its own.
pub struct Pin {
    pub remote: String,
    pub kind: Kind,
    /// The key the digest is declared under.
    pub artifact: String,
    pub declared: Declared,
}

/// One commit waiting in the queue.
pub(super) struct Pending {
    temp: TempBlob,
    path: ArtifactPath,
    entry: Entry,
    /// When the fill began: a purge of the key since then leaves no row.
    ticket: Ticket,
    pin: Option<Pin>,
    done: oneshot::Sender<Answer>,
}

/// The entry committed; `None` when a purge of its key came after the fill
/// began (nothing is left of it).
type Answer = Result<Option<Arc<Entry>>, ProxyError>;

/// A place in the commit queue, taken before the fill lets its readers see
/// the end of the body.
pub struct CommitSlot {
    permit: mpsc::OwnedPermit<Pending>,
    queued: Queued,
}

/// One in `commits_queued`, from a place taken until its commit is
/// answered (or the place is dropped unused).
struct Queued(prometheus_client::metrics::gauge::Gauge);

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A commit handed to the committer; resolves when it is durable (or failed).
pub struct Committing {
    answer: oneshot::Receiver<Answer>,
    _queued: Queued,
}

impl CommitSlot {
    /// Hands the complete, hashed temp file over: it becomes the entry of
    /// `path` with the next batch, unless a purge of `path` comes after
    /// `ticket` (when the fill began); `pin` is written with its row.
    pub fn send(
        self,
        temp: TempBlob,
        path: &ArtifactPath,
        (entry, pin): (Entry, Option<Pin>),
        ticket: Ticket,
    ) -> Committing {
        let (done, answer) = oneshot::channel();
        let CommitSlot { permit, queued } = self;
        permit.send(Pending {
            temp,
            path: path.clone(),
            entry,
            ticket,
            pin,
            done,
        });
        Committing {
            answer,
            _queued: queued,
        }
    }
}

impl Committing {
    /// The committed entry once durable; `None` if purged.
    pub async fn durable(self) -> Answer {
        self.answer
            .await
            .unwrap_or_else(|_| Err(ProxyError::Store("the committer stopped".into())))
    }
}

/// The queue's sending side, owned by the [`Cache`].
pub(super) type Queue = mpsc::Sender<Pending>;

pub(super) fn queue(capacity: usize) -> (Queue, mpsc::Receiver<Pending>) {
    mpsc::channel(capacity.max(1))
}

impl Cache {
    /// A place in the commit queue: waits while the queue is full.
    pub async fn commit_slot(&self) -> Result<CommitSlot, ProxyError> {
        let queue = self.commits.clone();
        let slot = match queue.clone().try_reserve_owned() {
            Ok(permit) => Ok(permit),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.metrics.commits_waiting.inc();
                let permit = queue.reserve_owned().await;
                self.metrics.commits_waiting.dec();
                permit.map_err(|_| ())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        };
        let slot = slot.map_err(|()| ProxyError::Store("the committer stopped".into()))?;
        self.metrics.commits_queued.inc();
        Ok(CommitSlot {
            permit: slot,
            queued: Queued(self.metrics.commits_queued.clone()),
        })
    }

    /// Holds the committer before its next batch until the guard is
    /// dropped: lets a test see commits wait (and the queue fill up).
    pub async fn hold_commits(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.commit_hold.lock().await
    }

    /// Makes a fully written, hashed temp file the entry for `path`, through
    /// the commit queue, and waits until it is durable.
    pub async fn commit_entry(&self, temp: TempBlob, path: &ArtifactPath, entry: Entry) -> Answer {
        let ticket = self.meta.purges.ticket();
        self.commit_slot()
            .await?
            .send(temp, path, (entry, None), ticket)
            .durable()
            .await
    }

    /// Commits one batch (at most one commit per key): blobs, then rows in
    /// one transaction, under the paths' and the digests' locks, so no
    /// release of a digest falls between its blob and its row. A digest's
    /// first row adds its size to the store's count, once however many rows
    /// of the batch have it; a row it replaces has its blob released. If the
    /// rows cannot be written, blobs nothing else references are deleted
    /// again.
    pub(super) async fn commit_batch(&self, batch: Vec<Pending>) {
        // Purged since their fills began: nothing to write.
        let (batch, purged): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .partition(|p| self.meta.purges.current(p.path.key(), p.ticket));
        for pending in purged {
            tracing::debug!(
                key = pending.path.key(),
                "purged before its commit; not committed"
            );
            let _ = pending.done.send(Ok(None));
        }
        if batch.is_empty() {
            return;
        }
        let _counting = self.accounting.read().await;
        let stripes = batch.iter().map(|p| self.path_stripe(&p.path)).collect();
        let path_guards = self.lock_path_stripes(stripes).await;
        let paths: Vec<&ArtifactPath> = batch.iter().map(|p| &p.path).collect();
        let replaced = match self.meta.stored_digests(&paths).await {
            Ok(replaced) => replaced,
            Err(error) => return self.fail(batch, error),
        };
        let new: Vec<Digest> = {
            let mut seen = HashSet::new();
            batch
                .iter()
                .map(|p| p.entry.digest)
                .filter(|d| seen.insert(*d))
                .collect()
        };
        let released: Vec<Digest> = {
            let mut seen = HashSet::new();
            batch
                .iter()
                .filter_map(|p| replaced.get(p.path.key()))
                .filter(|old| !new.contains(old) && seen.insert(**old))
                .copied()
                .collect()
        };
        let digest_guards = self.lock_digests(new.iter().chain(&released)).await;
        let counted = match self.meta.referenced_digests(&new).await {
            Ok(counted) => counted,
            Err(error) => return self.fail(batch, error),
        };

        // The blobs: one temp file per digest is committed; the others of the
        // same digest are dropped (deleted) after.
        let mut jobs = Vec::with_capacity(new.len());
        let mut rows = Vec::with_capacity(batch.len());
        let mut extra = Vec::new();
        for Pending {
            temp,
            path,
            entry,
            ticket,
            pin,
            done,
        } in batch
        {
            if jobs.iter().any(|(_, d)| *d == entry.digest) {
                extra.push(temp);
            } else {
                jobs.push((temp, entry.digest));
            }
            rows.push((path, entry, (ticket, done, pin)));
        }
        let results = self.blobs.commit_batch(jobs).await;

        drop(extra);
        let mut failed: HashMap<Digest, String> = HashMap::new();
        for (digest, result) in new.iter().zip(results) {
            if let Err(error) = result {
                failed.insert(*digest, format!("committing the blob: {error}"));
            }
        }
        let (rows, refused): (Vec<_>, Vec<_>) = rows
            .into_iter()
            .partition(|(_, entry, _)| !failed.contains_key(&entry.digest));
        for (path, entry, (_, done, _)) in refused {
            let error = failed[&entry.digest].clone();
            tracing::warn!(key = path.key(), %error, "could not commit; served uncached");
            let _ = done.send(Err(ProxyError::Store(error)));
        }
        if rows.is_empty() {
            return;
        }
        let written: Vec<(&ArtifactPath, &Entry)> = rows.iter().map(|(p, e, _)| (p, e)).collect();
        let pins: Vec<&Pin> = rows
            .iter()
            .filter_map(|(_, _, (_, _, pin))| pin.as_ref())
            .collect();
        if let Err(error) = self.meta.write_batch(&written, &pins).await {
            self.metrics.metadata_errors.inc();
            for digest in new.iter().filter(|d| !counted.contains(*d)) {
                if !failed.contains_key(digest) {
                    self.delete_blob(digest).await;
                }
            }
            for (_, _, (_, done, _)) in rows {
                let _ = done.send(Err(error.clone()));
            }
            return;
        }
        for digest in new.iter().filter(|d| !counted.contains(*d)) {
            if !failed.contains_key(digest) {
                let size = rows
                    .iter()
                    .find(|(_, e, _)| e.digest == *digest)
                    .map_or(0, |(_, e, _)| e.size);
                self.budget.add_committed(size);
            }
        }
        for old in &released {
            self.release_held(old).await;
        }
        // In memory (and shared) still under the locks: a deletion of the
        // row right after must find the entry there to drop it. Shared
        // first, then the purge check: a purge after the check deletes the
        // shared entry after it was put; one before it is seen, and the row
        // this batch wrote is deleted again.
        let mut answers = Vec::with_capacity(rows.len());
        let mut undone = Vec::new();
        let mut pinned = Vec::new();
        for (path, entry, (ticket, done, pin)) in rows {
            pinned.extend(pin.filter(|pin| pin.may_contradict(&path)));
            let entry = Arc::new(entry);
            self.meta.shared_changed(path.key(), Some(&entry)).await;
            if self.meta.remember(&path, &entry, ticket) {
                tracing::debug!(key = path.key(), digest = ?entry.digest, bytes = entry.size, "filled");
                answers.push((done, Some(entry)));
                continue;
            }
            tracing::debug!(
                key = path.key(),
                "purged while committing; its row is deleted again"
            );
            let hex = entry.digest.to_hex();
            match self
                .meta
                .forget_row_of(path.remote(), path.stored_path(), Some(&hex))
                .await
            {
                Ok(_) => undone.push(entry.digest),
                Err(error) => {
                    tracing::warn!(key = path.key(), %error, "could not delete the row of a purged fill")
                }
            }
            answers.push((done, None));
        }
        for digest in undone {
            self.release_held(&digest).await;
        }
        drop(digest_guards);
        drop(path_guards);
        for (done, entry) in answers {
            let _ = done.send(Ok(entry));
        }
        // Out of the locks (a contradicting row is forgotten under its own).
        for pin in pinned {
            let learned = [(pin.artifact, pin.declared)];
            let changed: Vec<_> = learned.iter().collect();
            if let Err(error) = self
                .evict_contradicting(&pin.remote, pin.kind, changed)
                .await
            {
                tracing::warn!(artifact = %learned[0].0, %error, "could not check the rows a pin contradicts");
            }
        }
    }

    fn fail(&self, batch: Vec<Pending>, error: ProxyError) {
        self.metrics.metadata_errors.inc();
        for pending in batch {
            tracing::warn!(key = pending.path.key(), %error, "could not commit; served uncached");
            let _ = pending.done.send(Err(error.clone()));
        }
    }
}

/// The committer: batches what is queued and commits it, until the cache
/// is dropped.
pub(super) async fn run(cache: Weak<Cache>, mut queue: mpsc::Receiver<Pending>) {
    // Commits of a key already in the batch being formed: they go in the
    // next one, after it (a row per key per transaction).
    let mut later: Vec<Pending> = Vec::new();
    loop {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut keys = HashSet::new();
        for pending in std::mem::take(&mut later) {
            if batch.len() < MAX_BATCH && keys.insert(pending.path.key().to_string()) {
                batch.push(pending);
            } else {
                later.push(pending);
            }
        }
        if batch.is_empty() {
            match queue.recv().await {
                Some(pending) => {
                    keys.insert(pending.path.key().to_string());
                    batch.push(pending);
                }
                None => return,
            }
        }
        let deadline = tokio::time::Instant::now() + COMMIT_DELAY;
        while batch.len() < MAX_BATCH {
            let next = match queue.try_recv() {
                Ok(pending) => pending,
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(deadline, queue.recv()).await {
                        Ok(Some(pending)) => pending,
                        Ok(None) | Err(_) => break,
                    }
                }
            };
            if keys.insert(next.path.key().to_string()) {
                batch.push(next);
            } else {
                later.push(next);
            }
        }
        let Some(cache) = cache.upgrade() else {
            return;
        };
        let _held = cache.commit_hold.lock().await;
        cache.metrics.commit_batches.inc();
        cache.metrics.commits.inc_by(batch.len() as u64);
        cache.commit_batch(batch).await;
    }
}

impl Pin {
    /// Whether a cached row other than the one it is committed with may be
    /// of its artifact (and then must match it): only where the ecosystem
    /// finds an artifact's rows elsewhere than at its key, or the key is
    /// not the row's own path. Otherwise the only row is the batch's.
    fn may_contradict(&self, path: &ArtifactPath) -> bool {
        self.kind.digests().is_some_and(|digests| {
            !matches!(digests.cached_at(&self.artifact), CachedAt::Path)
                || self.artifact != path.stored_path()
        })
    }
}

impl MetadataStore {
    /// The digests the rows of `paths` reference now, by key.
    pub(super) async fn stored_digests(
        &self,
        paths: &[&ArtifactPath],
    ) -> Result<HashMap<String, Digest>, ProxyError> {
        let mut by_remote: HashMap<&str, Vec<&ArtifactPath>> = HashMap::new();
        for path in paths {
            by_remote.entry(path.remote()).or_default().push(path);
        }
        let mut found = HashMap::new();
        for (remote, paths) in by_remote {
            for chunk in paths.chunks(ROWS_PER_STATEMENT) {
                let sql = format!(
                    "SELECT path, digest FROM entries WHERE remote = $1 AND path IN ({})",
                    placeholders(2, chunk.len())
                );
                let mut query = sqlx::query_as::<_, (String, String)>(&sql).bind(remote);
                for path in chunk {
                    query = query.bind(path.stored_path());
                }
                for (path, digest) in query.fetch_all(&self.pool).await.map_err(db_error)? {
                    if let Some(digest) = Digest::from_hex(&digest) {
                        found.insert(format!("{remote}/{path}"), digest);
                    }
                }
            }
        }
        Ok(found)
    }

    /// Which of `digests` some row references now.
    pub(super) async fn referenced_digests(
        &self,
        digests: &[Digest],
    ) -> Result<HashSet<Digest>, ProxyError> {
        let mut found = HashSet::new();
        for chunk in digests.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "SELECT DISTINCT digest FROM entries WHERE digest IN ({})",
                placeholders(1, chunk.len())
            );
            let mut query = sqlx::query_as::<_, (String,)>(&sql);
            for digest in chunk {
                query = query.bind(digest.to_hex());
            }
            for (hex,) in query.fetch_all(&self.pool).await.map_err(db_error)? {
                found.extend(Digest::from_hex(&hex));
            }
        }
        Ok(found)
    }

    /// Writes (or replaces) the rows of a batch in one transaction, durable
    /// when it returns. Always tried, even while lookups back off: the rows
    /// are what make the fills worth it.
    pub(super) async fn record_batch(
        &self,
        rows: &[(&ArtifactPath, &Entry)],
    ) -> Result<(), ProxyError> {
        self.write_batch(rows, &[]).await
    }

    /// [`MetadataStore::record_batch`], with the batch's pins in the same
    /// transaction.
    async fn write_batch(
        &self,
        rows: &[(&ArtifactPath, &Entry)],
        pins: &[&Pin],
    ) -> Result<(), ProxyError> {
        let mut conn = self.pool.acquire().await.map_err(|e| self.failed(e))?;
        let sqlite = conn.backend_name().eq_ignore_ascii_case("sqlite");
        if sqlite {
            // The WAL synced at this commit (and with it every earlier
            // commit): the batch is on disk when its fills are answered.
            sqlx::query("PRAGMA synchronous = FULL")
                .execute(&mut *conn)
                .await
                .map_err(|e| self.failed(e))?;
        }
        for pin in pins {
            self.declared_keys.add(&pin.remote, &pin.artifact);
        }
        let written = insert_rows(&mut conn, rows, pins).await;
        if written.is_ok() {
            self.others.wrote();
        }
        if sqlite {
            let _ = sqlx::query("PRAGMA synchronous = NORMAL")
                .execute(&mut *conn)
                .await;
        }
        written.map_err(|e| self.failed(e))
    }
}

async fn insert_rows(
    conn: &mut sqlx::pool::PoolConnection<sqlx::Any>,
    rows: &[(&ArtifactPath, &Entry)],
    pins: &[&Pin],
) -> Result<(), sqlx::Error> {
    use sqlx::Connection as _;
    let mut tx = conn.begin().await?;
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO entries (remote, path, digest, size, content_type, upstream_etag, upstream_last_modified, fetched_at, last_access, kept_headers) \
             VALUES {} \
             ON CONFLICT (remote, path) DO UPDATE SET digest = excluded.digest, size = excluded.size, \
             content_type = excluded.content_type, upstream_etag = excluded.upstream_etag, \
             upstream_last_modified = excluded.upstream_last_modified, fetched_at = excluded.fetched_at, \
             last_access = excluded.last_access, kept_headers = excluded.kept_headers",
            value_rows(chunk.len(), 10)
        );
        let mut insert = sqlx::query(&sql);
        for (path, entry) in chunk {
            insert = insert
                .bind(path.remote())
                .bind(path.stored_path())
                .bind(entry.digest.to_hex())
                .bind(entry.size as i64)
                .bind(entry.content_type.clone())
                .bind(entry.upstream_etag.clone())
                .bind(entry.upstream_last_modified.clone())
                .bind(entry.fetched_at_ms)
                .bind(entry.fetched_at_ms)
                .bind(entry.kept_headers.clone());
        }
        insert.execute(&mut *tx).await?;
    }
    let now = crate::clock::now_ms();
    for chunk in pins.chunks(ROWS_PER_INSERT) {
        let sql = super::declared::upsert_sql(chunk.len());
        let mut insert = sqlx::query(&sql);
        for pin in chunk {
            insert = insert
                .bind(pin.remote.as_str())
                .bind(pin.artifact.as_str())
                .bind(pin.declared.to_string())
                .bind(now);
        }
        insert.execute(&mut *tx).await?;
    }
    tx.commit().await
}
