//! The fill: one upstream fetch per cold `remote/path`, however many clients
//! ask, streamed to all of them as it arrives, and committed to the store only
//! when complete.
//!
//! The first request for a key spawns the fill as its own task (so a client
//! that disconnects never cancels it) and becomes one more reader. The fill
//! writes the body into a temp file in the store, hashing as it goes, and
//! publishes its progress on a `watch` channel. Readers stream from the temp
//! file with positional reads up to the published length and wait on the
//! channel for more; memory per reader is one read buffer. On success the fill
//! fsyncs, renames the file into its content-addressed place, records the
//! metadata row and only then leaves the map of fills in progress; on any
//! failure the readers' bodies end in an error (the client sees a broken
//! transfer, never a short "complete" one) and the temp file is deleted.

//!
//! This file holds the registry of fills in progress and the states a fill
//! publishes; [`writer`] runs the fill (fetch, hash, write, commit, record),
//! [`hashing`] writes and hashes its body, and [`reader`] streams a fill to
//! one client.
//!
//! The room sits between `http` (which joins fills) and the rooms below it:
//! a fill is handed the [`Cache`], the [`Remote`] and the [`Metrics`] it
//! uses, never the whole proxy.

mod coalesce;
mod download;
mod hashing;
mod learn;
mod reader;
mod receive;
mod writer;

use std::collections::HashMap;
use std::fs::File;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;

use tokio::sync::watch;

use crate::cache::purge::Purged;
use crate::cache::{Blob, Cache, Digest, Entry, Scope, Ticket};
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::path::ArtifactPath;
use crate::upstream::Remote;
pub use learn::pin_key;
pub use reader::{body, body_range, passthrough, Passthrough, Recent};

/// A complete fill's body as a blob: from memory when its last batch is
/// all of it, else its temp file. A fill without a temp file kept its
/// whole body in memory, so one of the two is always there.
pub fn complete_blob(file: Option<Arc<File>>, recent: Option<&Recent>, size: u64) -> Blob {
    match (recent.and_then(|r| r.whole(size)), file) {
        (Some(bytes), _) => Blob::Memory(bytes),
        (None, Some(file)) => Blob::Local(file),
        (None, None) => unreachable!("a body without a temp file is held whole in memory"),
    }
}

/// What readers need before the body: the upstream response's head.
#[derive(Debug)]
pub struct Head {
    pub content_type: Option<String>,
    pub content_length: Option<u64>,
    /// Base URL of the mirror that answered (for the request log).
    pub mirror: String,
    /// The headers the ecosystem keeps (`Ecosystem::kept_headers`), as
    /// `kind::keep_headers` writes them.
    pub kept: Option<String>,
}

/// A fill's progress, as published to its readers.
#[derive(Clone)]
pub enum FillState {
    /// Choosing a mirror and waiting for its response head.
    Connecting,
    /// The body is arriving: `written` bytes of it have arrived, those
    /// before `recent` in `file`, `recent` (the last batch, or the last two
    /// while the older is being written) in memory and maybe not in `file`
    /// yet. A small body kept whole in memory has no file: `recent` is all
    /// of it, from byte 0.
    Streaming {
        head: Arc<Head>,
        file: Option<Arc<File>>,
        written: u64,
        recent: Option<Recent>,
        /// Whether the body may still be refused when it ends (a digest to
        /// check): its last batch is held back, and a reader of a range
        /// holds back the range's last byte (`reader::body_range`), so no
        /// answer completes before the check.
        refusable: bool,
    },
    /// The body is complete and hashed: `entry.size` bytes in `file`, its
    /// last batch also in memory (a small body's all of it). A small body
    /// that came whole within its first 64 KiB has no file: `recent` is all
    /// of it, and the committer writes it. The entry is what the metadata row
    /// will say once committed.
    Complete {
        head: Arc<Head>,
        entry: Arc<Entry>,
        file: Option<Arc<File>>,
        recent: Option<Recent>,
    },
    /// Revalidation answered 304: serve this (refreshed) cached entry.
    Revalidated(Arc<Entry>),
    /// Another instance filled it (we waited on its Redis lock): serve the
    /// shared entry.
    Shared(Arc<Entry>),
    /// The body cannot be cached (larger than the store, or the disk is
    /// full): it is streamed through. The first reader takes the upstream
    /// response from `response`; any other reader fetches its own.
    Bypass {
        head: Arc<Head>,
        response: Arc<Mutex<Option<Passthrough>>>,
    },
    /// The fill failed; before the head this is the client's error response,
    /// after it the readers' bodies end in an error.
    Failed(ProxyError),
}

/// One fill in progress as the dashboard shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FillProgress {
    /// `remote/path`.
    pub key: String,
    pub stage: &'static str,
    /// Body bytes written so far.
    pub written: u64,
    /// The announced length, when the mirror gave one.
    pub total: Option<u64>,
    /// Base URL of the mirror sending it.
    pub mirror: Option<String>,
}

/// Which fill a fill task is, for the registry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Me {
    pub(crate) ticket: Ticket,
    id: u64,
}

/// One of the `server.max_fills` slots, held by a fill from its start until
/// its body has arrived and it has a place in the commit queue
/// ([`Slot::release`]: before its last batch is published where nothing can
/// refuse the body, so a client that has every byte never finds the slot
/// still taken; else once the body is written and checked), or until it
/// ends, panics included.
pub(crate) struct Slot(Option<Arc<AtomicUsize>>);

impl Slot {
    /// Gives the slot back (once).
    pub(crate) fn release(&mut self) {
        if let Some(active) = self.0.take() {
            active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.release();
    }
}

/// One fill in the registry.
struct Running {
    rx: watch::Receiver<FillState>,
    /// The purge generation when it began: once a purge of its key comes
    /// after it, it is neither joined nor committed.
    ticket: Ticket,
    /// Which fill of the key this is: a fill leaves (or restarts in) the
    /// registry only if the key is still its own, not a newer fill's
    /// started after a purge.
    id: u64,
}

/// What a purge did (see [`FillRegistry::purge`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct PurgeReport {
    pub purged: Purged,
    /// Fills of the scope in progress (downloading or committing) that will
    /// not be made visible; their readers still get their bytes.
    pub fills_cancelled: usize,
}

/// The fills in progress, keyed by `remote/path`, with what a fill uses.
pub struct FillRegistry {
    // A std mutex, not a Tokio one: it is held only to look up or insert,
    // never across an await. Keyed by what clients ask for: foldhash,
    // seeded per process (as the entry cache), not SipHash, three times a
    // miss.
    fills: Mutex<HashMap<String, Running, foldhash::fast::RandomState>>,
    /// The next fill's [`Running::id`].
    next_id: std::sync::atomic::AtomicU64,
    /// Woken when the last fill task ends.
    idle: tokio::sync::Notify,
    /// Fill tasks running, those a purge took out of the registry included.
    tasks: AtomicUsize,
    cache: Arc<Cache>,
    metrics: Arc<Metrics>,
    /// `server.max_fills`: a fill nobody reads any more still counts until
    /// its body has arrived and its commit has a place in the queue (the
    /// queued commit no longer counts).
    max_fills: usize,
    /// Fills holding one of the `max_fills` slots: from their start until
    /// their body has arrived and has a place in the commit queue (see
    /// [`Slot`]). Changed under the `fills` lock when taken, atomically
    /// when given back.
    active: Arc<AtomicUsize>,
    /// Index documents whose declared digests are being stored now, per
    /// remote: an artifact fill of that remote that finds no declared digest
    /// waits for them (see `learn`). A std mutex: never held across an await.
    learning: Mutex<HashMap<String, usize>>,
    /// The body (digest) of each document this process learned from, by
    /// key: a 304 or an unchanged body is not learned again.
    learned_docs: moka::sync::Cache<String, Digest>,
}

impl FillRegistry {
    pub fn new(cache: Arc<Cache>, metrics: Arc<Metrics>, max_fills: usize) -> FillRegistry {
        FillRegistry {
            fills: Mutex::default(),
            next_id: Default::default(),
            idle: tokio::sync::Notify::new(),
            tasks: AtomicUsize::new(0),
            cache,
            metrics,
            max_fills,
            active: Arc::default(),
            learning: Mutex::default(),
            learned_docs: moka::sync::Cache::new(100_000),
        }
    }

    /// Joins the fill of `key` if one is running.
    pub fn join(&self, key: &str) -> Option<watch::Receiver<FillState>> {
        // No fill task running (counted before its key is in the registry):
        // nothing to join, and the registry's lock, which every hit on a key
        // not in the entry cache would take, is not taken.
        if self.tasks.load(Ordering::Acquire) == 0 {
            return None;
        }
        let fills = self.fills.lock().expect("fill registry poisoned");
        let running = fills.get(key)?;
        if !self.cache.meta.memory.purges.current(key, running.ticket) {
            return None;
        }
        self.metrics.coalesced_waiters.inc();
        Some(running.rx.clone())
    }

    /// Joins the fill of `path` if one is running, else starts one (`started`
    /// is then true), unless `max_fills` are running. `stale` is the cached
    /// entry to revalidate, if any; `accept` the `Accept` header of a
    /// content-negotiated variant.
    pub fn join_or_start(
        self: &Arc<Self>,
        remote: &Arc<Remote>,
        path: &ArtifactPath,
        accept: Option<&'static str>,
        stale: Option<Arc<Entry>>,
    ) -> Result<(watch::Receiver<FillState>, bool), ProxyError> {
        let mut fills = self.fills.lock().expect("fill registry poisoned");
        let purges = &self.cache.meta.memory.purges;
        if let Some(running) = fills.get(path.key()) {
            // A fill begun before a purge of the key is not joined: a new
            // one takes its place (its readers keep reading it).
            if purges.current(path.key(), running.ticket) {
                self.metrics.coalesced_waiters.inc();
                return Ok((running.rx.clone(), false));
            }
        }
        let active = self.active.load(Ordering::Relaxed);
        if active >= self.max_fills {
            return Err(ProxyError::FillsBusy(active));
        }
        self.active.fetch_add(1, Ordering::Relaxed);
        let slot = Slot(Some(self.active.clone()));
        let (tx, rx) = watch::channel(FillState::Connecting);
        let (ticket, id) = (
            purges.ticket(),
            self.next_id.fetch_add(1, Ordering::Relaxed),
        );
        let running = Running {
            rx: rx.clone(),
            ticket,
            id,
        };
        // Counted before its key is in the registry, for `join`.
        self.tasks.fetch_add(1, Ordering::Relaxed);
        fills.insert(path.key().to_string(), running);
        self.metrics.fills_in_progress.set(fills.len() as i64);
        drop(fills);
        let me = Me { ticket, id };
        // Boxed: the fill's future is large, and the task would copy it
        // whole when spawned and again when it ends.
        let fill = Box::pin(writer::run(
            self.clone(),
            remote.clone(),
            path.clone(),
            accept,
            stale,
            tx,
            (slot, me),
        ));
        let (fills, key) = (self.clone(), path.key().to_string());
        tokio::spawn(async move {
            // The fill's own future is dropped before its end runs: a fill
            // whose commit waits holds only its end (see `writer::End`).
            let ended = match AssertUnwindSafe(fill).catch_unwind().await {
                Ok(end) => AssertUnwindSafe(end.run(&fills)).catch_unwind().await,
                Err(panic) => Err(panic),
            };
            // A panic in a fill ends it as failed: its readers see the channel
            // close (502), and the key is free for the next request to refetch.
            if ended.is_err() {
                tracing::error!(key, "fill panicked; its readers get 502");
                fills.finish(&key, me);
            }
            if fills.tasks.fetch_sub(1, Ordering::AcqRel) == 1 {
                fills.idle.notify_waiters();
            }
        });
        Ok((rx, true))
    }

    /// Fills holding a `max_fills` slot now (not those whose commit waits).
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Fills in progress now, committing ones included.
    pub fn len(&self) -> usize {
        self.fills.lock().expect("fill registry poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Returns once no fill is in progress (and no fill task a purge
    /// cancelled is still running: its commit is dropped).
    pub async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.tasks.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Purges `scope` (the admin API): a purge generation first, so that
    /// every fill of the scope in progress is neither joined nor committed
    /// from now on (they leave the registry at once; their readers get
    /// their bytes), memory forgotten and other instances told; then the
    /// rows and blobs deleted (`Cache::purge_begin`, `Cache::purge_rows`).
    pub async fn purge(&self, scope: &Scope) -> Result<PurgeReport, ProxyError> {
        // Fills of the scope running as the purge starts: each is overtaken
        // by it, also one that sees the new generation while committing,
        // undoes its own row and leaves the registry before the look below.
        let running_before = {
            let fills = self.fills.lock().expect("fill registry poisoned");
            fills.keys().filter(|key| scope.covers(key)).count()
        };
        crate::cache::purge::purge_begin(&self.cache, scope).await;
        let fills_cancelled = {
            let mut fills = self.fills.lock().expect("fill registry poisoned");
            let purges = &self.cache.meta.memory.purges;
            let before = fills.len();
            fills.retain(|key, running| !scope.covers(key) || purges.current(key, running.ticket));
            let cancelled = before - fills.len();
            self.metrics.fills_in_progress.set(fills.len() as i64);
            cancelled.max(running_before)
        };
        let purged = crate::cache::purge::purge_rows(&self.cache, scope).await?;
        Ok(PurgeReport {
            purged,
            fills_cancelled,
        })
    }

    /// What each fill in progress has done so far, sorted by key (for the
    /// dashboard). Copies the receivers under the lock, reads them after it.
    pub fn snapshot(&self) -> Vec<FillProgress> {
        let fills: Vec<(String, watch::Receiver<FillState>)> = self
            .fills
            .lock()
            .expect("fill registry poisoned")
            .iter()
            .map(|(key, running)| (key.clone(), running.rx.clone()))
            .collect();
        let mut progress: Vec<FillProgress> = fills
            .into_iter()
            .map(|(key, rx)| {
                let (stage, written, total, mirror) = match &*rx.borrow() {
                    FillState::Connecting => ("connecting", 0, None, None),
                    FillState::Streaming { head, written, .. } => (
                        "streaming",
                        *written,
                        head.content_length,
                        Some(head.mirror.clone()),
                    ),
                    FillState::Complete { head, entry, .. } => (
                        "committing",
                        entry.size,
                        Some(entry.size),
                        Some(head.mirror.clone()),
                    ),
                    FillState::Bypass { head, .. } => (
                        "streaming through",
                        0,
                        head.content_length,
                        Some(head.mirror.clone()),
                    ),
                    FillState::Revalidated(_) | FillState::Shared(_) => ("done", 0, None, None),
                    FillState::Failed(_) => ("failed", 0, None, None),
                };
                FillProgress {
                    key,
                    stage,
                    written,
                    total,
                    mirror,
                }
            })
            .collect();
        progress.sort_by(|a, b| a.key.cmp(&b.key));
        progress
    }

    /// A new channel for the fill of `key`, which starts over on another
    /// mirror after refusing a body its readers had begun to receive: those
    /// readers keep the old channel (and see it fail); requests from now on
    /// join the new one.
    fn restart(
        &self,
        key: &str,
        me: Me,
        old: &watch::Sender<FillState>,
        error: ProxyError,
    ) -> watch::Sender<FillState> {
        let (tx, rx) = watch::channel(FillState::Connecting);
        // The new channel first: a request joining now follows the retry,
        // never the failure. (A purged fill is no longer the key's: it
        // retries for its own readers only.)
        if let Some(running) = self
            .fills
            .lock()
            .expect("fill registry poisoned")
            .get_mut(key)
            .filter(|running| running.id == me.id)
        {
            running.rx = rx;
        }
        old.send_replace(FillState::Failed(error));
        tx
    }

    /// Takes a finished fill out of the map (if the key is still its own).
    fn finish(&self, key: &str, me: Me) {
        let mut fills = self.fills.lock().expect("fill registry poisoned");
        if fills.get(key).is_some_and(|running| running.id == me.id) {
            fills.remove(key);
        }
        self.metrics.fills_in_progress.set(fills.len() as i64);
    }
}
