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

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;

use crate::cluster::{Cluster, LockOutcome};
use crate::error::ProxyError;
use crate::meta::{now_ms, Entry};
use crate::path::ArtifactPath;
use crate::proxy::Proxy;
use crate::remote::Remote;
use crate::store::Digest;
use crate::upstream::{self, Fetched, Validators};

/// Bytes one reader reads from the temp file at a time. Each reader holds
/// about two of these (its own, and one queued in hyper while the client's
/// socket is full). Measured for 200 readers of one 16 MiB fill: 256 KiB
/// peaked at 90–150 MiB RSS, 128 KiB at 58 MiB, 64 KiB at 38–44 MiB but cost
/// large single transfers ~25% throughput; 128 KiB keeps both in bounds.
const READ_CHUNK: usize = 128 * 1024;

/// What readers need before the body: the upstream response's head.
#[derive(Debug)]
pub struct Head {
    pub content_type: Option<String>,
    pub content_length: Option<u64>,
    /// Base URL of the mirror that answered (for the request log).
    pub mirror: String,
}

/// A fill's progress, as published to its readers.
#[derive(Clone)]
pub enum FillState {
    /// Choosing a mirror and waiting for its response head.
    Connecting,
    /// The body is arriving: `written` bytes of it are in `file` so far.
    Streaming {
        head: Arc<Head>,
        file: Arc<File>,
        written: u64,
    },
    /// The body is complete and hashed: `entry.size` bytes in `file`. The
    /// entry is what the metadata row will say once committed.
    Complete {
        head: Arc<Head>,
        entry: Arc<Entry>,
        file: Arc<File>,
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
        response: Arc<Mutex<Option<reqwest::Response>>>,
    },
    /// The fill failed; before the head this is the client's error response,
    /// after it the readers' bodies end in an error.
    Failed(ProxyError),
}

/// The fills in progress, keyed by `remote/path`.
#[derive(Default)]
pub struct FillRegistry {
    // A std mutex, not a Tokio one: it is held only to look up or insert,
    // never across an await.
    fills: Mutex<HashMap<String, watch::Receiver<FillState>>>,
    /// Woken when the last fill in progress finishes.
    idle: tokio::sync::Notify,
}

impl FillRegistry {
    /// Joins the fill of `path` if one is running, else starts one (`started`
    /// is then true). `stale` is the cached entry to revalidate, if any;
    /// `accept` the `Accept` header of a content-negotiated variant.
    pub fn join_or_start(
        &self,
        proxy: &Arc<Proxy>,
        remote: &Arc<Remote>,
        path: &ArtifactPath,
        accept: Option<&'static str>,
        stale: Option<Arc<Entry>>,
    ) -> (watch::Receiver<FillState>, bool) {
        let mut fills = self.fills.lock().expect("fill registry poisoned");
        if let Some(rx) = fills.get(path.key()) {
            proxy.metrics.coalesced_waiters.inc();
            return (rx.clone(), false);
        }
        let (tx, rx) = watch::channel(FillState::Connecting);
        fills.insert(path.key().to_string(), rx.clone());
        proxy.metrics.fills_in_progress.set(fills.len() as i64);
        drop(fills);
        tokio::spawn(run(
            proxy.clone(),
            remote.clone(),
            path.clone(),
            accept,
            stale,
            tx,
        ));
        (rx, true)
    }

    /// Fills in progress now.
    pub fn len(&self) -> usize {
        self.fills.lock().expect("fill registry poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Returns once no fill is in progress.
    pub async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.is_empty() {
                return;
            }
            idle.await;
        }
    }

    fn finish(&self, key: &str) -> usize {
        let mut fills = self.fills.lock().expect("fill registry poisoned");
        fills.remove(key);
        if fills.is_empty() {
            self.idle.notify_waiters();
        }
        fills.len()
    }
}

async fn run(
    proxy: Arc<Proxy>,
    remote: Arc<Remote>,
    path: ArtifactPath,
    accept: Option<&'static str>,
    stale: Option<Arc<Entry>>,
    tx: watch::Sender<FillState>,
) {
    // Across instances: one fill per cold artifact, through a Redis lock.
    let mut held = None;
    if let (Some(cluster), None) = (proxy.cluster.get(), &stale) {
        match cluster.try_lock(path.key()).await {
            LockOutcome::Acquired(lock) => {
                let renewal = cluster.hold(&lock);
                held = Some((cluster.clone(), lock, renewal));
            }
            LockOutcome::Held => {
                if let Some(entry) = wait_for_peer(&proxy, cluster, &path).await {
                    tx.send_replace(FillState::Shared(entry));
                    let left = proxy.fills.finish(path.key());
                    proxy.metrics.fills_in_progress.set(left as i64);
                    return;
                }
            }
            LockOutcome::Unavailable => {}
        }
    }
    let result = fill(&proxy, &remote, &path, accept, stale.as_deref(), &tx).await;
    if let Some((cluster, lock, renewal)) = held {
        renewal.abort();
        cluster.release(lock).await;
    }
    if let Err(error) = result {
        tracing::debug!(key = path.key(), %error, "fill failed");
        if let ProxyError::NotFound { status } = error {
            proxy.meta.remember_absent(&path, status, now_ms());
        }
        tx.send_replace(FillState::Failed(error));
    }
    let left = proxy.fills.finish(path.key());
    proxy.metrics.fills_in_progress.set(left as i64);
}

async fn fill(
    proxy: &Proxy,
    remote: &Remote,
    path: &ArtifactPath,
    accept: Option<&'static str>,
    stale: Option<&Entry>,
    tx: &watch::Sender<FillState>,
) -> Result<(), ProxyError> {
    let validators = stale
        .map(|e| Validators {
            etag: e.upstream_etag.as_deref(),
            last_modified: e.upstream_last_modified.as_deref(),
        })
        .unwrap_or_default();
    let (mut response, mirror_idx, set, mirror, guard) =
        match upstream::fetch(remote, path.path(), validators, accept).await? {
            Fetched::NotModified { mirror } => {
                let entry = stale.expect("a 304 is only accepted when validators were sent");
                let fresh = proxy.meta.mark_revalidated(path, entry, now_ms()).await?;
                tracing::debug!(key = path.key(), mirror = mirror.base(), "revalidated");
                tx.send_replace(FillState::Revalidated(fresh));
                return Ok(());
            }
            Fetched::Body {
                response,
                mirror_idx,
                set,
                mirror,
                guard,
            } => (response, mirror_idx, set, mirror, guard),
        };
    proxy.meta.forget_absent(path);

    let header = |name: axum::http::HeaderName| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let upstream_etag = header(axum::http::header::ETAG);
    let upstream_last_modified = header(axum::http::header::LAST_MODIFIED);
    let head = Arc::new(Head {
        content_type: header(axum::http::header::CONTENT_TYPE),
        content_length: response.content_length(),
        mirror: mirror.base().to_string(),
    });
    let max_body = remote.config.max_body_size;
    if let Some(len) = head.content_length.filter(|&len| len > max_body) {
        return Err(ProxyError::TooLarge {
            size: len,
            limit: max_body,
        });
    }

    // A body that cannot fit the store, or a disk that cannot hold it, is
    // streamed through uncached: the client still gets its bytes.
    let announced = head.content_length.unwrap_or(0);
    let temp = if announced > proxy.max_store_size() {
        Err(format!("{announced} bytes is more than storage.max_size"))
    } else {
        proxy
            .store_blocking(move |store| {
                let temp = store.create_temp()?;
                temp.reserve(announced)?;
                Ok(temp)
            })
            .await
            .map_err(|e| e.to_string())
    };
    let temp = match temp {
        Ok(temp) => Arc::new(temp),
        Err(reason) => {
            tracing::warn!(key = path.key(), %reason, "not caching; streaming through");
            drop(guard);
            tx.send_replace(FillState::Bypass {
                head,
                response: Arc::new(Mutex::new(Some(response))),
            });
            return Ok(());
        }
    };
    let file = temp.reader();
    tx.send_replace(FillState::Streaming {
        head: head.clone(),
        file: file.clone(),
        written: 0,
    });

    let mut hasher = Sha256::new();
    let mut written: u64 = 0;
    loop {
        let chunk = match tokio::time::timeout(remote.config.idle_timeout, response.chunk()).await {
            Err(_) => {
                let error = format!("no data for {:?}", remote.config.idle_timeout);
                upstream::record_failure(remote, set, mirror_idx, &error);
                return Err(ProxyError::UpstreamBody(error));
            }
            Ok(Err(e)) => {
                let error = e.without_url().to_string();
                upstream::record_failure(remote, set, mirror_idx, &error);
                return Err(ProxyError::UpstreamBody(error));
            }
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => chunk,
        };
        let n = chunk.len() as u64;
        if written + n > max_body {
            return Err(ProxyError::TooLarge {
                size: written + n,
                limit: max_body,
            });
        }
        let writer = temp.clone();
        // Hash and write off the async threads: both are CPU or disk work.
        hasher = tokio::task::spawn_blocking(move || -> io::Result<Sha256> {
            writer.write_at(&chunk, written)?;
            hasher.update(&chunk);
            Ok(hasher)
        })
        .await
        .map_err(|e| ProxyError::Store(e.to_string()))?
        .map_err(|e| ProxyError::Store(e.to_string()))?;
        written += n;
        if head.content_length == Some(written) {
            // All announced bytes are here: no need to wait for the end marker.
            break;
        }
        tx.send_modify(|state| {
            if let FillState::Streaming { written: w, .. } = state {
                *w = written;
            }
        });
    }
    // The upstream request is over: give the mirror's in-flight count back
    // before the readers see the end, not after the commit.
    drop(guard);
    drop(response);
    if let Some(expected) = head.content_length {
        if expected != written {
            return Err(ProxyError::UpstreamBody(format!(
                "body is {written} bytes, Content-Length said {expected}"
            )));
        }
    }
    let digest = Digest(hasher.finalize().into());
    let entry = Entry::new(
        digest,
        written,
        head.content_type.clone(),
        upstream_etag,
        upstream_last_modified,
        now_ms(),
    );
    tx.send_replace(FillState::Complete {
        head: head.clone(),
        entry: Arc::new(entry.clone()),
        file,
    });

    // The readers have every byte; now make it a cache entry. From here on a
    // failure costs only the caching: the bytes were right, and readers (even
    // late joiners, served from `file`) keep the Complete state.
    let temp = Arc::into_inner(temp).expect("no writer outlives the loop");
    if let Err(error) = proxy.blobs.commit(temp, digest).await {
        tracing::warn!(key = path.key(), %error, "could not commit the blob; served uncached");
        return Ok(());
    }
    if let Err(error) = proxy.meta.record(path, entry).await {
        proxy.metrics.metadata_errors.inc();
        tracing::warn!(key = path.key(), %error, "metadata unavailable; served uncached");
        proxy.release_blob(&digest).await;
        return Ok(());
    }
    tracing::debug!(key = path.key(), ?digest, bytes = written, "filled");
    if let Some(old) = stale.filter(|old| old.digest != digest) {
        // The entry was replaced: its old blob may now be unreferenced.
        proxy.release_blob(&old.digest).await;
    }
    proxy.evictor.wake_if_over(proxy.blobs.size());
    Ok(())
}

/// Waits (up to `lock_wait`) for another instance's fill of `path` to land in
/// the shared metadata and store. `None` when it does not: the lock expired or
/// was released without an entry (the peer failed), or waiting took too long.
async fn wait_for_peer(
    proxy: &Proxy,
    cluster: &Cluster,
    path: &ArtifactPath,
) -> Option<Arc<Entry>> {
    let deadline = tokio::time::Instant::now() + cluster.lock_wait();
    let mut peer_done = false;
    loop {
        if let Ok(Some(entry)) = proxy.meta.lookup(path).await {
            if proxy.open_blob(&entry.digest, entry.size).await.is_ok() {
                return Some(entry);
            }
        }
        if peer_done || tokio::time::Instant::now() >= deadline {
            tracing::debug!(
                key = path.key(),
                "no shared entry from the other instance; fetching here"
            );
            return None;
        }
        // Look once more after the lock is gone: the entry is recorded before
        // the lock is released.
        peer_done = !cluster.is_locked(path.key()).await;
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Streams an uncached upstream body to one client, with the idle timeout.
pub fn passthrough(
    response: reqwest::Response,
    idle: Duration,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    futures_util::stream::unfold(Some(response), move |response| async move {
        let mut response = response?;
        match tokio::time::timeout(idle, response.chunk()).await {
            Ok(Ok(Some(chunk))) => Some((Ok(chunk), Some(response))),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => Some((Err(io::Error::other(e.without_url())), None)),
            Err(_) => Some((Err(io::Error::other("upstream stalled")), None)),
        }
    })
}

/// A reader's view of a fill: the body bytes from `file`, as far as the fill
/// has published them, ending in an error if the fill fails.
pub fn body(
    rx: watch::Receiver<FillState>,
    file: Arc<File>,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    struct Reader {
        rx: watch::Receiver<FillState>,
        file: Arc<File>,
        pos: u64,
        done: bool,
    }
    enum Step {
        Read(u64),
        Wait,
        Done,
        Fail(String),
    }
    let reader = Reader {
        rx,
        file,
        pos: 0,
        done: false,
    };
    futures_util::stream::unfold(reader, |mut reader| async move {
        if reader.done {
            return None;
        }
        loop {
            let pos = reader.pos;
            // Decide with the borrow held, act after it is dropped: a watch
            // borrow must not live across an await.
            let step = match &*reader.rx.borrow_and_update() {
                FillState::Failed(e) => Step::Fail(e.to_string()),
                FillState::Streaming { written, .. } if *written > pos => Step::Read(*written),
                FillState::Streaming { .. } => Step::Wait,
                FillState::Complete { entry, .. } if entry.size > pos => Step::Read(entry.size),
                FillState::Complete { .. } => Step::Done,
                FillState::Connecting
                | FillState::Revalidated(_)
                | FillState::Shared(_)
                | FillState::Bypass { .. } => Step::Fail("fill has no body".into()),
            };
            match step {
                Step::Read(available) => {
                    let n = (available - pos).min(READ_CHUNK as u64) as usize;
                    let file = reader.file.clone();
                    let read =
                        tokio::task::spawn_blocking(move || crate::store::read_at(&file, pos, n))
                            .await
                            .unwrap_or_else(|e| Err(io::Error::other(e)));
                    match &read {
                        Ok(_) => reader.pos += n as u64,
                        Err(_) => reader.done = true,
                    }
                    return Some((read, reader));
                }
                Step::Wait => {
                    if reader.rx.changed().await.is_err() {
                        reader.done = true;
                        return Some((
                            Err(io::Error::other("fill ended without completing")),
                            reader,
                        ));
                    }
                }
                Step::Done => return None,
                Step::Fail(reason) => {
                    reader.done = true;
                    return Some((Err(io::Error::other(reason)), reader));
                }
            }
        }
    })
}
