//! Group commit: the fills that finish close together share their
//! durability work.
//!
//! A fill whose body is complete and checked takes a place in a bounded
//! queue ([`Cache::commit_slot`]; when the queue is full it waits there, and
//! so do its readers' last bytes: back-pressure, never a refusal), hands
//! its temp file over ([`CommitSlot::send`]) and is done with its
//! `max_fills` slot. One task, the committer, takes what is queued — the
//! first commit, then whatever arrives within [`COMMIT_DELAY`], up to
//! [`MAX_BATCH`] — and commits the batch in two stages, the second of one
//! batch running beside the first of the next:
//!
//! 1. the blobs ([`Cache::commit_blobs`]): each new digest marked as being
//!    committed (under its lock: a release keeps such a blob), then made
//!    durable ([`BlobStore::commit_batch`]): every temp file's data synced
//!    side by side, the renames, each directory synced once (a batch of 16
//!    or more, or a smaller one while the machine holds little waiting to
//!    be written: the file system synced whole before the renames and
//!    again after them, and a small body kept in memory whose digest no row
//!    references and no other batch has in flight written straight under
//!    its blob's name before the first sync, with no temp file); a blob
//!    already in place is not written again, nor one the entry index says
//!    a row references (while its file is there);
//! 2. the rows ([`Cache::commit_rows`]), batch after batch in order: under
//!    the locks of every path and digest the batch touches (the same locks
//!    a single commit took, in the same order: paths, then digests, each
//!    set sorted), the rows it replaces and the digests already referenced
//!    are read, one query each; every row, and every pin on first use the
//!    batch carries ([`Pin`]), is written in one database transaction (on
//!    SQLite with `synchronous = FULL` for that transaction, so it is on
//!    disk when the commit returns; Postgres's default commit is durable);
//!    then the counts, the release of replaced blobs, the in-memory entries
//!    and the shared entries in Redis, the digests no longer marked, and
//!    each fill is answered.
//!
//! What a power cut leaves, at each step: before 1 is done, temp files
//! (removed at the next start, their owner's lock being free), files
//! written in place whose bytes may not be whole (no row names them; a
//! later commit of the same digest hashes such a small file before
//! trusting it), and no row;
//! between 1 and 2, synced blobs without rows (not served, not counted;
//! `verify --remove` deletes them after an hour, and a fill of the same
//! bytes puts a row back; so does a batch whose reads fail in 2); after 2,
//! rows whose blobs were synced first. A row never points at a blob that
//! was not synced, and a crash loses at most the two batches in flight
//! (their clients had their bytes; the next request fetches them again).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use super::commit_queue::{Answer, FillBody, Intake, Pending, Reply};
use super::facade::Cache;
use crate::error::ProxyError;
use crate::meta::{Entry, Pin, Ticket};
use crate::path::ArtifactPath;
use crate::store::{read_at, CommitLock, Digest, TempBlob};

/// How long the committer waits after a batch's first commit for others to
/// join it. A fill's clients do not wait for it (the fill is `Complete`
/// before its commit); its registry entry does, and so does what waits for
/// the fill to end: an OCI pull by tag linking the tag's digest, another
/// instance polling for the row, the remote's fills waiting for a document
/// to be learned. A sender that waits for its commit alone (an import's
/// row) skips it ([`CommitSlot::urgent`]). Each batch costs a sync of the
/// pack, SQLite's durable transaction and the blocking threads' wake-ups:
/// with 6 ms instead of 2, distinct 1 KiB misses at 8 clients on a
/// journaled ext4 made 0.33 `futex` calls and 1.4 context switches a miss
/// against 0.53–0.63 and 1.7–1.8, and 1.19–1.26× the misses a second under
/// `perf stat` (`bench/miss-syscalls.sh`; BENCHMARKS.md, "The group
/// commit's delay").
pub(crate) const COMMIT_DELAY: Duration = Duration::from_millis(6);
/// The most commits in one batch.
pub(crate) const MAX_BATCH: usize = 512;

impl Cache {
    /// Makes a fully written, hashed temp file the entry for `path`, through
    /// the commit queue, and waits until it is durable (its batch does not
    /// wait for others to join: [`CommitSlot::urgent`]).
    /// A temp file of a size the store packs is read back and committed as
    /// a body kept in memory, so it is packed.
    pub async fn commit_entry(&self, temp: TempBlob, path: &ArtifactPath, entry: Entry) -> Answer {
        let ticket = self.meta.memory.purges.ticket();
        let body = match self.store.packs_len(entry.size) {
            true => {
                let (file, size) = (temp.reader(), entry.size as usize);
                match self.store_blocking(move |_| read_at(&file, 0, size)).await {
                    Ok(bytes) => FillBody::Memory(bytes),
                    Err(_) => FillBody::Temp(temp),
                }
            }
            false => FillBody::Temp(temp),
        };
        self.commits
            .slot()
            .await?
            .urgent()
            .send(body, path, (entry, None), ticket)
            .durable()
            .await
    }

    /// The second stage of a batch, in batch order: its rows in one
    /// transaction, under the locks of its paths and digests (taken as a
    /// single commit took them: paths, then digests, each set sorted), so
    /// no release of a digest falls between its blob and its row. The rows
    /// it replaces and the digests already referenced are read first, one
    /// query each. A digest's first row adds its size to the store's count,
    /// once however many rows of the batch have it; a row it replaces has
    /// its blob released. If the rows cannot be written, blobs nothing else
    /// references are deleted again.
    pub(crate) async fn commit_rows(&self, staged: Staged) {
        // The commit lock is held until `staged`'s rows are written: it is
        // dropped at the end of this function.
        let Staged {
            rows,
            new,
            placed,
            failed,
            _lock,
        } = staged;
        let abandoned: Vec<Digest> = failed.keys().copied().collect();
        let new: Vec<Digest> = new
            .into_iter()
            .filter(|d| !failed.contains_key(d))
            .collect();
        self.abandon(&abandoned).await;
        let _committed = Committed(self, &new);
        let (rows, refused): (Vec<_>, Vec<_>) = rows
            .into_iter()
            .partition(|(_, entry, _)| !failed.contains_key(&entry.digest));
        Reply::send_all(refused.into_iter().map(|(path, entry, (_, done, _))| {
            let error = failed[&entry.digest].clone();
            tracing::warn!(key = path.key(), %error, "could not commit; served uncached");
            (done, Err(ProxyError::Store(error)))
        }));
        if rows.is_empty() {
            return;
        }
        let _counting = self.locks.accounting.read().await;
        let stripes = rows
            .iter()
            .map(|(p, _, _)| self.locks.path_stripe(p))
            .collect();
        let path_guards = self.locks.lock_paths(stripes).await;
        let paths: Vec<&ArtifactPath> = rows.iter().map(|(p, _, _)| p).collect();
        let replaced = match self.meta.stored_digests(&paths).await {
            Ok(replaced) => replaced,
            Err(error) => return self.fail(rows, error),
        };
        let released: Vec<Digest> = {
            let mut seen = HashSet::new();
            rows.iter()
                .filter_map(|(p, _, _)| replaced.get(p.key()))
                .filter(|old| !new.contains(old) && seen.insert(**old))
                .copied()
                .collect()
        };
        let digest_guards = self.locks.lock_digests(new.iter().chain(&released)).await;
        // A blob this batch put on disk has no row yet: only the others are
        // asked about (where memory cannot answer, the database reads every
        // row for it).
        let asked: Vec<Digest> = new
            .iter()
            .filter(|d| !placed.contains(*d))
            .copied()
            .collect();
        let counted = match self.meta.referenced_digests(&asked).await {
            Ok(counted) => counted,
            Err(error) => return self.fail(rows, error),
        };
        let written: Vec<(&ArtifactPath, &Entry)> = rows.iter().map(|(p, e, _)| (p, e)).collect();
        let pins: Vec<&Pin> = rows
            .iter()
            .filter_map(|(_, _, (_, _, pin))| pin.as_ref())
            .collect();
        // The places of the blobs this batch packed (or an earlier batch
        // packed and could not write): in the same transaction.
        let places = self.blobs.pending_places(&new);
        if let Err(error) = self.meta.write_batch(&written, &pins, &places).await {
            // The blobs stay, uncounted, as after `fail`: another batch may
            // have found one in place and be about to write its own row for
            // it (its mark is not this batch's to judge), and a transaction
            // whose acknowledgement was lost may have committed these rows.
            // An orphan is used again by the next commit of its bytes, or
            // removed by `verify --remove` after an hour.
            return self.fail(rows, error);
        }
        self.blobs.places_written(&places);
        for digest in new.iter().filter(|d| !counted.contains(*d)) {
            if !failed.contains_key(digest) {
                let size = rows
                    .iter()
                    .find(|(_, e, _)| e.digest == *digest)
                    .map_or(0, |(_, e, _)| e.size);
                self.budget.add_committed(size);
            }
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
            self.meta
                .memory
                .shared_changed(path.key(), Some(&entry))
                .await;
            if self.meta.memory.remember(&path, &entry, ticket) {
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
        // The replaced rows' blobs, once memory names the new rows (where
        // the entry index answers whether a digest is referenced, its
        // records must be the rows': `MetadataStore::digests_in_memory`).
        for old in &released {
            self.release_held(old).await;
        }
        // No longer being committed, still under their locks: a release
        // from now on sees the rows.
        drop(_committed);
        for digest in undone {
            self.release_held(&digest).await;
        }
        drop(digest_guards);
        drop(path_guards);
        // Before the pins: forgetting a contradicting row takes `accounting`
        // shared again, and a second shared take queued behind a
        // re-derivation's exclusive one (tokio's lock is fair) would wait
        // for ever on this one.
        drop(_counting);
        Reply::send_all(answers.into_iter().map(|(done, entry)| (done, Ok(entry))));
        // Out of the locks (a contradicting row is forgotten under its own).
        for pin in pinned {
            let learned = [(pin.artifact, pin.declared)];
            let changed: Vec<_> = learned.iter().collect();
            if let Err(error) =
                super::learn::evict_contradicting(self, &pin.remote, pin.kind, changed).await
            {
                tracing::warn!(artifact = %learned[0].0, %error, "could not check the rows a pin contradicts");
            }
        }
    }

    /// The digests of a batch whose blobs could not be committed: no
    /// longer marked, under their locks. A blob that no row references and
    /// no other commit has in flight is removed: one whose last row went
    /// while this commit was between its stages was kept for it, and is
    /// counted no more (`Cache::release_held`).
    async fn abandon(&self, digests: &[Digest]) {
        if digests.is_empty() {
            return;
        }
        let _locks = self.locks.lock_digests(digests.iter()).await;
        drop(Committed(self, digests));
        for digest in digests {
            if self.commits.in_flight_size(digest).is_some() {
                continue;
            }
            if let Ok(false) = self.meta.digest_referenced(&digest.to_hex()).await {
                self.remove_blob(digest).await;
            }
        }
    }

    fn fail(&self, rows: Vec<StagedRow>, error: ProxyError) {
        self.metrics.metadata_errors.inc();
        let mut replies = Vec::with_capacity(rows.len());
        for (path, _, (_, done, _)) in rows {
            tracing::warn!(key = path.key(), %error, "could not commit; served uncached");
            replies.push((done, Err(error.clone())));
        }
        Reply::send_all(replies);
    }
}

/// A row of a batch whose blob is durable: its path, entry, and the fill's
/// ticket, answer and pin.
pub(crate) type StagedRow = (ArtifactPath, Entry, (Ticket, Reply, Option<Pin>));

/// A batch between its two stages: blobs durable, rows to write.
pub(crate) struct Staged {
    pub(crate) rows: Vec<StagedRow>,
    /// Its digests, each once, marked as being committed.
    pub(crate) new: Vec<Digest>,
    /// Those whose blob this batch put on disk (it was not there).
    pub(crate) placed: HashSet<Digest>,
    /// The digests whose blob could not be committed, and why.
    pub(crate) failed: HashMap<Digest, String>,
    /// The store's commit lock, shared, from before the batch's blobs were
    /// placed until its rows are written (dropped with the batch).
    pub(crate) _lock: Option<CommitLock>,
}

/// Takes a batch's digests out of [`Cache::committing`] when dropped (its
/// rows are written, or it failed).
struct Committed<'a>(&'a Cache, &'a [Digest]);

impl Drop for Committed<'_> {
    fn drop(&mut self) {
        let mut committing = self
            .0
            .commits
            .in_flight
            .lock()
            .expect("committing poisoned");
        for digest in self.1 {
            if let Some((n, _)) = committing.get_mut(digest) {
                *n -= 1;
                if *n == 0 {
                    committing.remove(digest);
                }
            }
        }
    }
}

/// Collects the next batch: the first commit (or those put off from the
/// last batch), then whatever arrives within [`COMMIT_DELAY`], up to
/// [`MAX_BATCH`], or at once when a commit in it is urgent (its sender
/// waits for it: [`CommitSlot::urgent`]); a second commit of a key already
/// in the batch is put off to the next (a row per key per transaction).
/// `None` when the queue is closed.
///
/// After the first commit the committer sleeps until the delay is over and
/// then takes what was queued meanwhile, rather than waking for each commit
/// that joins: a commit sent from a connection's thread would wake this
/// runtime each time (a system call and a switch of threads a miss). A
/// commit that fills the queue, or a fill that finds it full, cuts the
/// sleep short ([`Intake::crowded`]), so a small queue does not hold
/// commits back.
async fn collect(intake: &mut Intake, later: &mut Vec<Pending>) -> Option<Vec<Pending>> {
    let mut batch: Vec<Pending> = Vec::with_capacity(MAX_BATCH);
    let mut keys = HashSet::new();
    for pending in std::mem::take(later) {
        if batch.len() < MAX_BATCH && keys.insert(pending.path.key().to_string()) {
            batch.push(pending);
        } else {
            later.push(pending);
        }
    }
    if batch.is_empty() {
        let pending = intake.queue.recv().await?;
        keys.insert(pending.path.key().to_string());
        batch.push(pending);
    }
    let mut urgent = batch.iter().any(|pending| pending.urgent);
    let deadline = tokio::time::Instant::now() + COMMIT_DELAY;
    loop {
        while batch.len() < MAX_BATCH {
            let next = match intake.queue.try_recv() {
                Ok(pending) => pending,
                Err(mpsc::error::TryRecvError::Disconnected) => return Some(batch),
                Err(mpsc::error::TryRecvError::Empty) => break,
            };
            if keys.insert(next.path.key().to_string()) {
                urgent |= next.urgent;
                batch.push(next);
            } else {
                later.push(next);
            }
        }
        if urgent || batch.len() >= MAX_BATCH || tokio::time::Instant::now() >= deadline {
            return Some(batch);
        }
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {}
            () = intake.crowded.notified() => {}
        }
    }
}

/// The committer: batches what is queued and commits it, until the cache
/// is dropped. Two batches overlap: the rows of one are written while the
/// blobs of the next are made durable (different work, often on different
/// devices' queues); the rows are written in batch order.
pub(crate) async fn run(cache: Weak<Cache>, mut intake: Intake) {
    let mut later: Vec<Pending> = Vec::new();
    let mut staged: Option<Staged> = None;
    loop {
        let next = async {
            let batch = collect(&mut intake, &mut later).await?;
            let cache = cache.upgrade()?;
            let _held = cache.commits.hold.lock().await;
            cache.metrics.commit_batches.inc();
            cache.metrics.commits.inc_by(batch.len() as u64);
            Some(cache.commit_blobs(batch).await)
        };
        let rows = async {
            if let (Some(staged), Some(cache)) = (staged.take(), cache.upgrade()) {
                cache.commit_rows(staged).await;
            }
        };
        match futures_util::join!(rows, next).1 {
            Some(next) => staged = Some(next),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::commit_queue::Commits;
    use crate::meta::purge::Purges;
    use crate::metrics::Metrics;
    use crate::store::Digest;

    /// With one place in the queue, the commits that arrive while the
    /// committer waits out its batch's delay each fill the queue, which
    /// wakes it to take them: all three join the first batch. (Without
    /// that wake the third would wait for room until the delay is over,
    /// and go to the next batch.)
    #[tokio::test(start_paused = true)]
    async fn a_commit_that_fills_the_queue_joins_the_waiting_batch() {
        let metrics = Metrics::new();
        let (commits, mut intake) = Commits::new(1, &metrics);
        let commits = Arc::new(commits);
        let ticket = Purges::default().ticket();
        let senders: Vec<_> = (0..3)
            .map(|i| {
                let commits = commits.clone();
                tokio::spawn(async move {
                    let bytes = bytes::Bytes::from(format!("body {i}"));
                    let entry =
                        Entry::new(Digest::of(&bytes), bytes.len() as u64, None, None, None, 0);
                    let path = ArtifactPath::parse(&format!("/r/k{i}")).unwrap();
                    let slot = commits.slot().await.unwrap();
                    slot.send(FillBody::Memory(bytes), &path, (entry, None), ticket)
                })
            })
            .collect();
        let batch = collect(&mut intake, &mut Vec::new()).await.unwrap();
        let keys: Vec<&str> = batch.iter().map(|p| p.path.key()).collect();
        assert_eq!(keys, ["r/k0", "r/k1", "r/k2"]);
        for sender in senders {
            drop(sender.await.unwrap());
        }
    }

    /// A commit whose sender waits for it (an import's row) is taken as
    /// its own batch at once, not after the delay; a fill's waits it out.
    #[tokio::test(start_paused = true)]
    async fn an_urgent_commit_does_not_wait_out_the_delay() {
        let metrics = Metrics::new();
        let (commits, mut intake) = Commits::new(4, &metrics);
        let ticket = Purges::default().ticket();
        let mut sent = Vec::new();
        for (i, urgent) in [(0, true), (1, false)] {
            let bytes = bytes::Bytes::from(format!("body {i}"));
            let entry = Entry::new(Digest::of(&bytes), bytes.len() as u64, None, None, None, 0);
            let path = ArtifactPath::parse(&format!("/r/k{i}")).unwrap();
            let slot = commits.slot().await.unwrap();
            let slot = if urgent { slot.urgent() } else { slot };
            let start = tokio::time::Instant::now();
            sent.push(slot.send(FillBody::Memory(bytes), &path, (entry, None), ticket));
            let batch = collect(&mut intake, &mut Vec::new()).await.unwrap();
            assert_eq!(batch.len(), 1);
            let waited = start.elapsed();
            assert_eq!(waited >= COMMIT_DELAY, !urgent, "waited {waited:?}");
        }
    }
}
