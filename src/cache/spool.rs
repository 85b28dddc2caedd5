//! The group commit's first stage (see `super::commit`): a batch's bodies
//! made blobs. The committer is handed each fill's body as its temp file,
//! or, for a small body that came whole within its first 64 KiB, as the
//! bytes the fill kept in memory (at most the queue's and one batch's
//! worth: `max_fills` + `MAX_BATCH` bodies of 64 KiB), so no file is made
//! for them on the request's path; here those become blobs with the rest
//! of their batch, written into temp files of their own or, where their
//! digest is fresh, under their own names by the blob store; or appended
//! to a pack, where the store packs blobs of their size.

use std::collections::{HashMap, HashSet};
use std::io;

use super::commit::Staged;
use super::commit_queue::{FillBody, Pending, Reply};
use super::facade::Cache;
use crate::store::{BatchBody, CommitLock, ContentStore, Digest};

impl Cache {
    /// The first stage of a batch (at most one commit per key): its blobs
    /// made durable. Each new digest is first marked as being committed
    /// ([`Cache::committing`], under its lock), so no release deletes its
    /// blob before the row that references it is written; one body per
    /// digest is committed, the others of the same digest dropped, and none
    /// of a digest the entry index knows is referenced.
    /// Takes no path lock: it runs beside the previous batch's rows.
    pub(crate) async fn commit_blobs(&self, batch: Vec<Pending>) -> Staged {
        // Before any blob is placed or found in place, until the rows.
        let lock = self.commit_lock().await;
        // Purged since their fills began: nothing to write.
        let (batch, purged): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .partition(|p| self.meta.memory.purges.current(p.path.key(), p.ticket));
        Reply::send_all(purged.into_iter().map(|pending| {
            tracing::debug!(
                key = pending.path.key(),
                "purged before its commit; not committed"
            );
            (pending.done, Ok(None))
        }));
        let new: Vec<(Digest, u64)> = {
            let mut seen = HashSet::new();
            batch
                .iter()
                .map(|p| (p.entry.digest, p.entry.size))
                .filter(|(d, _)| seen.insert(*d))
                .collect()
        };
        // Where the entry index answers digest questions, a digest some row
        // references is in place (its blob was synced before that row was
        // written): nothing of it is written, unless its file went behind
        // the store's back (then it is written again, as before it had a
        // row). One that no row references and no other batch has in
        // flight is fresh: the blob store may write it under its own name
        // (`BatchBody::Fresh`). Whatever the index cannot vouch for goes
        // through a temp file, and a blob found in place is not written
        // again.
        let memory = self.meta.memory.digests_in_memory();
        let (mut fresh, mut referenced) = (HashSet::new(), Vec::new());
        let known: HashSet<Digest> = {
            let _locks = self.locks.lock_digests(new.iter().map(|(d, _)| d)).await;
            {
                let mut committing = self.commits.in_flight.lock().expect("committing poisoned");
                for (digest, size) in &new {
                    if memory && !committing.contains_key(digest) {
                        match self.meta.memory.index.references(digest) {
                            true => referenced.push(*digest),
                            false => {
                                fresh.insert(*digest);
                            }
                        }
                    }
                    committing.entry(*digest).or_insert((0, *size)).0 += 1;
                }
            }
            referenced
                .into_iter()
                .filter(|digest| self.blobs.holds_now(digest) == Some(true))
                .collect()
        };
        let new: Vec<Digest> = new.into_iter().map(|(d, _)| d).collect();
        // One body per digest to write, a temp file's before one kept in
        // memory (already on disk, it needs no room of `storage.max_size`);
        // the others, and those in place, are dropped.
        let mut jobs: Vec<(FillBody, Digest)> = Vec::with_capacity(new.len());
        let mut job_of: HashMap<Digest, usize> = HashMap::with_capacity(new.len());
        let mut rows = Vec::with_capacity(batch.len());
        for Pending {
            body,
            path,
            entry,
            ticket,
            pin,
            done,
            urgent: _,
        } in batch
        {
            let digest = entry.digest;
            match job_of.get(&digest) {
                _ if known.contains(&digest) => {}
                None => {
                    job_of.insert(digest, jobs.len());
                    jobs.push((body, digest));
                }
                Some(&i) => {
                    if matches!(jobs[i].0, FillBody::Memory(_)) && matches!(body, FillBody::Temp(_))
                    {
                        jobs[i].0 = body;
                    }
                }
            }
            rows.push((path, entry, (ticket, done, pin)));
        }
        let (jobs, mut failed) = self.spool(jobs, &fresh).await;
        let written: Vec<Digest> = jobs.iter().map(|(_, digest)| *digest).collect();
        let results = if jobs.is_empty() {
            Vec::new()
        } else {
            self.blobs.commit_batch(jobs).await
        };
        let mut placed = HashSet::new();
        for (digest, result) in written.into_iter().zip(results) {
            match result {
                Ok(true) => {
                    placed.insert(digest);
                }
                Ok(false) => {}
                Err(error) => {
                    failed.insert(digest, format!("committing the blob: {error}"));
                }
            }
        }
        Staged {
            rows,
            new,
            placed,
            failed,
            _lock: lock,
        }
    }

    /// The store's commit lock, shared: at once when `verify --remove` is
    /// not unlinking a blob (nearly always), else waited for off the async
    /// threads. Without it (the lock file cannot be opened) the batch goes
    /// on, as it would without a `verify --remove` beside it.
    async fn commit_lock(&self) -> Option<CommitLock> {
        match self.store.commit_lock(false, false) {
            Ok(Some(lock)) => return Some(lock),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "cannot take the store's commit lock");
                return None;
            }
        }
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || store.commit_lock(false, true)).await {
            Ok(Ok(lock)) => lock,
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot take the store's commit lock");
                None
            }
            Err(_) => None,
        }
    }

    /// The bodies of a batch's blobs as the blob store takes them: a body
    /// kept in memory whose digest is `fresh` (no row references it, no
    /// other commit has it in flight) as it is, for the store to write
    /// under its own name; any other body kept in memory written into a
    /// temp file, all of the batch's in one hop (counted against
    /// `storage.max_size` as a fill's temp file is). A body that cannot be
    /// written leaves the batch, its digest with the error (its clients
    /// had their bytes: they are served uncached).
    pub(crate) async fn spool(
        &self,
        jobs: Vec<(FillBody, Digest)>,
        fresh: &HashSet<Digest>,
    ) -> (Vec<(BatchBody, Digest)>, HashMap<Digest, String>) {
        let to_write = jobs.iter().any(|(body, digest)| match body {
            FillBody::Memory(bytes) => {
                !fresh.contains(digest) && !self.store.packs_len(bytes.len() as u64)
            }
            FillBody::Temp(_) => false,
        });
        let written: Vec<_> = if to_write {
            let digests: Vec<Digest> = jobs.iter().map(|(_, digest)| *digest).collect();
            let (store, fresh) = (self.store.clone(), fresh.clone());
            let handle = tokio::task::spawn_blocking(move || {
                jobs.into_iter()
                    .map(|job| batch_body(&store, &fresh, job))
                    .collect::<Vec<_>>()
            });
            handle.await.unwrap_or_else(|panic| {
                let error = || Err(io::Error::other(panic.to_string()));
                digests.into_iter().map(|d| (error(), d)).collect()
            })
        } else {
            jobs.into_iter()
                .map(|job| batch_body(&self.store, fresh, job))
                .collect()
        };
        let mut spooled = Vec::with_capacity(written.len());
        let mut failed = HashMap::new();
        for (body, digest) in written {
            match body {
                Ok(body) => spooled.push((body, digest)),
                Err(error) => {
                    failed.insert(digest, format!("writing the blob: {error}"));
                }
            }
        }
        (spooled, failed)
    }
}

/// One body as the blob store takes it (see [`Cache::spool`]); blocking
/// when a temp file is written.
fn batch_body(
    store: &ContentStore,
    fresh: &HashSet<Digest>,
    (body, digest): (FillBody, Digest),
) -> (io::Result<BatchBody>, Digest) {
    let body = match body {
        FillBody::Temp(temp) => Ok(BatchBody::Temp(temp)),
        FillBody::Memory(bytes) if fresh.contains(&digest) => Ok(BatchBody::Fresh(bytes)),
        FillBody::Memory(bytes) if store.packs_len(bytes.len() as u64) => {
            Ok(BatchBody::Packed(bytes))
        }
        FillBody::Memory(bytes) => store.create_temp_holding(&bytes).map(BatchBody::Temp),
    };
    (body, digest)
}
