//! Running one fill: take the cross-instance lock, fetch from the remote's
//! mirrors, write and hash the body into a temp file while publishing
//! progress, then commit the blob and record its metadata row.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::download::{broken_body, download, Early};
use super::learn::{self, FillDigests};
use super::{FillRegistry, FillState, Head, Me, Slot};
use crate::cache::cluster::{Cluster, LockOutcome};
use crate::cache::commit::Pin;
use crate::cache::{Blob, Cache, CommitSlot, Entry, TempBlob};
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::kind::declared::Hashers;
use crate::path::ArtifactPath;
use crate::upstream::fetch::{self, Fetched, Validators};
use crate::upstream::Remote;

/// The fill task: one per cold (or stale) key, spawned by
/// [`FillRegistry::join_or_start`]; it leaves the registry when done.
pub(super) async fn run(
    fills: Arc<FillRegistry>,
    remote: Arc<Remote>,
    path: ArtifactPath,
    accept: Option<&'static str>,
    stale: Option<Arc<Entry>>,
    tx: watch::Sender<FillState>,
    (mut slot, me): (Slot, Me),
) {
    let cache = &fills.cache;
    // The entry index keeps no `ETag`: the row has it, for the revalidation.
    let stale = match stale {
        Some(entry) if entry.from_index => match cache.meta.read_row(&path).await {
            Ok(Some(row)) if row.digest == entry.digest => Some(Arc::new(row)),
            _ => Some(entry),
        },
        stale => stale,
    };
    if stale.is_none() {
        // Look again now that this fill holds the key: a fill that committed
        // between the request's lookup and its joining the registry has
        // already left it, and its entry is what this request wants.
        if let Ok(Some(entry)) = cache.meta.lookup_row(&path).await {
            let fresh = remote.policy.is_fresh(path.path(), entry.age(now_ms()));
            if fresh && cache.open_blob(&entry.digest, entry.size).await.is_ok() {
                tx.send_replace(FillState::Shared(entry));
                fills.finish(path.key(), me);
                return;
            }
        }
    }
    // Across instances: one fill per cold artifact, through a Redis lock.
    let mut held = None;
    if let (Some(cluster), None) = (cache.cluster(), &stale) {
        match cluster.try_lock(path.key()).await {
            LockOutcome::Acquired(lock) => {
                let renewal = AbortOnDrop(cluster.hold(&lock));
                held = Some((cluster.clone(), lock, renewal));
            }
            LockOutcome::Held => {
                if let Some(entry) = wait_for_peer(cache, cluster, &path).await {
                    tx.send_replace(FillState::Shared(entry));
                    fills.finish(path.key(), me);
                    return;
                }
            }
            LockOutcome::Unavailable => {}
        }
    }
    let mut tx = tx;
    let result = fill(
        &fills,
        &remote,
        &path,
        accept,
        stale.as_deref(),
        &mut tx,
        (&mut slot, me),
    )
    .await;
    if let Some((cluster, lock, renewal)) = held {
        drop(renewal);
        cluster.release(lock).await;
    }
    if let Err(error) = result {
        tracing::debug!(key = path.key(), %error, "fill failed");
        if let ProxyError::NotFound { status } = error {
            cache
                .meta
                .remember_absent(&path, status, now_ms(), me.ticket);
        }
        tx.send_replace(FillState::Failed(error));
    }
    fills.finish(path.key(), me);
}

/// The Redis lock's renewal task, stopped when the fill ends — also when it
/// panics, so a dead fill's lock expires instead of being renewed forever.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Fetch, then either a 304 (the stale entry is refreshed), a stream-through
/// (the store cannot take the body), or download → verify → publish →
/// commit. A body that does not match its declared digest is refused and the
/// next mirror asked, until one sends the declared bytes or none is left.
async fn fill(
    fills: &Arc<FillRegistry>,
    remote: &Arc<Remote>,
    path: &ArtifactPath,
    accept: Option<&'static str>,
    stale: Option<&Entry>,
    tx: &mut watch::Sender<FillState>,
    (slot, me): (&mut Slot, Me),
) -> Result<(), ProxyError> {
    // Lets tests reach the panic path of a fill (debug builds only).
    #[cfg(debug_assertions)]
    if path.path().contains("__mirrorcache_test_panic_in_fill__") {
        panic!("test panic in a fill");
    }
    let cache = &fills.cache;
    let validators = stale
        .map(|e| Validators {
            etag: e.upstream_etag.as_deref(),
            last_modified: e.upstream_last_modified.as_deref(),
        })
        .unwrap_or_default();
    let digests = FillDigests::of(fills, remote, path).await?;
    // Mirrors (of the path's set) whose body was refused, and why.
    let mut refused = Vec::new();
    let mut mismatch = None;
    loop {
        let fetched = match fetch::fetch_avoiding(
            remote,
            path.upstream(),
            validators,
            accept,
            &refused,
        )
        .await
        {
            Ok(fetched) => fetched,
            // The mismatch says more than "no mirror left".
            Err(error) => return Err(mismatch.unwrap_or(error)),
        };
        let upstream = match fetched {
            Fetched::NotModified { mirror } => {
                let entry = stale.expect("a 304 is only accepted when validators were sent");
                let fresh = cache
                    .meta
                    .mark_revalidated(path, entry, now_ms(), me.ticket)
                    .await?;
                tracing::debug!(key = path.key(), mirror = mirror.base(), "revalidated");
                let learning = digests.learning(fills, remote, path, &fresh.digest);
                tx.send_replace(FillState::Revalidated(fresh.clone()));
                if let Some(learning) = learning {
                    // A document cached before this process learned from it.
                    if let Ok(blob) = cache.open_blob(&fresh.digest, fresh.size).await {
                        let body = (fresh.digest, fresh.size);
                        learn::from_document(learning, remote, path, blob, body).await;
                    }
                }
                return Ok(());
            }
            Fetched::Body(body) => body,
        };
        cache.meta.forget_absent(path);
        match receive(
            fills,
            remote,
            path,
            upstream,
            &digests,
            stale,
            tx,
            (slot, me),
        )
        .await?
        {
            Received::Done => return Ok(()),
            Received::Refused {
                mirror_idx,
                error,
                published,
            } => {
                refused.push(mirror_idx);
                if published {
                    // Readers that had begun get a broken transfer; the
                    // requests from now on follow the next attempt.
                    *tx = fills.restart(path.key(), me, tx, error.clone());
                }
                mismatch = Some(error);
            }
        }
    }
}

/// How one mirror's 200 ended.
enum Received {
    /// Served to the readers (and committed, when the store took it).
    Done,
    /// Its digest is not the declared one; nothing was committed.
    /// `published`: readers had been given the body as it arrived.
    Refused {
        mirror_idx: usize,
        error: ProxyError,
        published: bool,
    },
}

/// Reads one mirror's body into a temp file, checks it, publishes it and
/// commits it. A body whose digest is declared and that is small enough for
/// the in-memory tier is held back until checked, so a refused one costs its
/// readers nothing; a larger one streams to its readers as it arrives.
#[allow(clippy::too_many_arguments)]
async fn receive(
    fills: &FillRegistry,
    remote: &Remote,
    path: &ArtifactPath,
    mut upstream: fetch::Body<'_>,
    digests: &FillDigests,
    stale: Option<&Entry>,
    tx: &watch::Sender<FillState>,
    (slot, me): (&mut Slot, Me),
) -> Result<Received, ProxyError> {
    let cache = &fills.cache;
    let expected = digests.expected.as_ref();
    // gzip and deflate were decoded by the client, which then drops the
    // header; what is left is an encoding the proxy cannot undo, and encoded
    // bytes are never stored or served as the artifact.
    if let Some(encoding) = upstream
        .response
        .headers()
        .get(axum::http::header::CONTENT_ENCODING)
        .filter(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"))
    {
        let error = format!(
            "the mirror sent Content-Encoding {:?}, which cannot be stored",
            String::from_utf8_lossy(encoding.as_bytes())
        );
        return Err(broken_body(
            remote,
            upstream.set,
            upstream.mirror_idx,
            error,
        ));
    }

    let kept_names = remote.config.kind.ecosystem().kept_headers(path.path());
    let (head, validators) = head_of(&upstream.response, upstream.mirror.base(), kept_names);
    // Nothing else declared a digest: the answer's head may (the hub's X-Linked-Etag).
    let from_head = match expected {
        Some(_) => None,
        None => remote
            .config
            .kind
            .digests()
            .and_then(|d| d.in_head(path.path(), upstream.response.headers())),
    };
    let expected = expected.or(from_head.as_ref());
    let max_body = remote.config.max_body_size;
    if let Some(len) = head.content_length.filter(|&len| len > max_body) {
        return Err(ProxyError::TooLarge {
            size: len,
            limit: max_body,
        });
    }
    let temp = match open_temp(cache, head.content_length.unwrap_or(0)).await {
        Ok(temp) => Arc::new(temp),
        Err(reason) if expected.is_some() => {
            // A declared digest is checked before the body is complete for
            // anyone; with nowhere to hold the body it cannot be.
            return Err(ProxyError::Store(format!(
                "cannot check the declared digest: {reason}"
            )));
        }
        Err(reason) => {
            // The client still gets its bytes, uncached (nothing declared
            // what they should be).
            tracing::warn!(key = path.key(), %reason, "not caching; streaming through");
            let fetch::Body { response, .. } = upstream;
            tx.send_replace(FillState::Bypass {
                head,
                response: Arc::new(Mutex::new(Some(response))),
            });
            return Ok(Received::Done);
        }
    };
    let file = temp.reader();
    // Held back until complete: a body of at most `INLINE_BYTES` (its
    // readers get it whole, from memory, in one answer), and one small
    // enough for the in-memory tier whose digest is declared (so a refused
    // one costs its readers nothing).
    let hold = head.content_length.is_some_and(|len| {
        super::hashing::is_inline(Some(len)) || (expected.is_some() && cache.is_small(len))
    });
    if !hold {
        tx.send_replace(FillState::Streaming {
            head: head.clone(),
            file: file.clone(),
            written: 0,
            recent: None,
        });
    }

    // Nothing can refuse these bytes once received: each batch reaches the
    // readers before it is written and hashed, the last one included (once
    // the commit has its place).
    let mut early = (expected.is_none() && digests.unrefusable(remote)).then(|| Early {
        cache,
        slot: &mut *slot,
        queued: None,
    });
    let hashers = Hashers::new(expected);
    let (digest, received, written, recent) = download(
        remote,
        &mut upstream,
        (&temp, &file),
        &head,
        (hashers, &mut early),
        tx,
    )
    .await?;
    let queued = early.and_then(|early| early.queued);
    // Nothing was declared when the fill began; a document learned since
    // may have declared it (checked now, so no commit slips past the
    // eviction of contradicting entries).
    let late = digests
        .declared_since(fills, remote, (&digest, &file, written))
        .await;
    let mismatch = match (expected, late) {
        (Some(expected), _) if *expected != received => Some((expected.clone(), received)),
        (None, Some(late)) => Some(late),
        _ => None,
    };
    if let Some((expected, received)) = mismatch {
        let error = ProxyError::IntegrityMismatch {
            expected: expected.to_string(),
            received: received.to_string(),
        };
        let mirror = upstream.mirror.base();
        tracing::warn!(key = path.key(), mirror, %expected, %received, "body does not match its declared digest; refused");
        cache.metrics.integrity_failure(&remote.name, mirror);
        fetch::record_failure(remote, upstream.set, upstream.mirror_idx, &error);
        return Ok(Received::Refused {
            mirror_idx: upstream.mirror_idx,
            error,
            published: !hold,
        });
    }
    // The upstream request is over: give the mirror's in-flight count back
    // before the readers see the end, not after the commit.
    drop(upstream);
    let mut entry = Entry::new(
        digest,
        written,
        head.content_type.clone(),
        validators.etag,
        validators.last_modified,
        now_ms(),
    );
    entry.kept_headers = head.kept.clone();
    let learning = digests.learning(fills, remote, path, &digest);
    // A place in the commit queue before the readers see the end: when
    // commits fall behind, the last bytes wait here (back-pressure), rather
    // than new misses being refused for want of a `max_fills` slot.
    let queued = match queued {
        Some(queued) => queued,
        None => cache.commit_slot().await,
    };
    tx.send_replace(FillState::Complete {
        head,
        entry: Arc::new(entry.clone()),
        file: file.clone(),
        recent,
    });
    // The bytes are written: the commit waits in its own queue.
    slot.release();
    let temp = Arc::into_inner(temp).expect("no writer outlives the download");
    let pin = digests.pin(remote, &digest);
    let pinned = pin.as_ref().map(|pin| pin.declared.to_string());
    let committed = match queued {
        Ok(queued) => commit(cache, queued, temp, path, (entry, pin, me), stale).await,
        Err(error) => {
            tracing::warn!(key = path.key(), %error, "could not commit; served uncached");
            false
        }
    };
    if !committed {
        // Nothing is kept (a purge came after the fill began, or the
        // commit failed): nothing is pinned or learned from these bytes.
        return Ok(Received::Done);
    }
    if let Some(pinned) = pinned {
        tracing::info!(key = path.key(), digest = %pinned, "pinned on first use");
    }
    if let Some(learning) = learning {
        let body = (digest, written);
        learn::from_document(learning, remote, path, Blob::Local(file), body).await;
    }
    Ok(Received::Done)
}

/// The validators a later revalidation sends.
struct UpstreamValidators {
    etag: Option<String>,
    last_modified: Option<String>,
}

/// What readers need from the upstream response's head, and its validators.
fn head_of(
    response: &reqwest::Response,
    mirror: &str,
    kept: &[&str],
) -> (Arc<Head>, UpstreamValidators) {
    let header = |name: axum::http::HeaderName| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let head = Arc::new(Head {
        content_type: header(axum::http::header::CONTENT_TYPE),
        content_length: response.content_length(),
        mirror: mirror.to_string(),
        kept: crate::kind::keep_headers(kept, response.headers()),
    });
    let validators = UpstreamValidators {
        etag: header(axum::http::header::ETAG),
        last_modified: header(axum::http::header::LAST_MODIFIED),
    };
    (head, validators)
}

/// A temp file with room for `announced` bytes, or why the body cannot be
/// cached (larger than the store, or the disk cannot hold it).
async fn open_temp(cache: &Cache, announced: u64) -> Result<TempBlob, String> {
    if announced > cache.max_size() {
        return Err(format!("{announced} bytes is more than storage.max_size"));
    }
    let create = move |store: &crate::cache::ContentStore| store.create_temp_for(announced);
    // Small (or of unknown length: nothing is allocated ahead), on this
    // thread; a large allocation on the blocking pool.
    let created = if super::hashing::is_inline(Some(announced)) {
        cache.store_now(create)
    } else {
        cache.store_blocking(create).await
    };
    created.map_err(|e| e.to_string())
}

/// Makes a complete, hashed body a cache entry: the blob, then its row (and
/// its pin, in the same transaction). The
/// readers already have every byte, so a failure here costs only the
/// caching. Returns whether the entry was committed (not when a purge of
/// its key came after the fill began: nothing of it is left).
async fn commit(
    cache: &Cache,
    queued: CommitSlot,
    temp: TempBlob,
    path: &ArtifactPath,
    (entry, pin, me): (Entry, Option<Pin>, Me),
    stale: Option<&Entry>,
) -> bool {
    let digest = entry.digest;
    // The group commit logs a failure itself.
    let committed = matches!(
        queued
            .send(temp, path, (entry, pin), me.ticket)
            .durable()
            .await,
        Ok(Some(_))
    );
    if let Some(old) = stale.filter(|old| old.digest != digest) {
        // The entry was replaced (or purged): its old blob may now be
        // unreferenced.
        cache.release_blob(&old.digest).await;
    }
    committed
}

/// Waits (up to `lock_wait`) for another instance's fill of `path` to land in
/// the shared metadata and store. `None` when it does not: the lock expired or
/// was released without an entry (the peer failed), or waiting took too long.
async fn wait_for_peer(
    cache: &Cache,
    cluster: &Cluster,
    path: &ArtifactPath,
) -> Option<Arc<Entry>> {
    let deadline = tokio::time::Instant::now() + cluster.lock_wait();
    let mut peer_done = false;
    loop {
        if let Ok(Some(entry)) = cache.meta.lookup(path).await {
            if cache.open_blob(&entry.digest, entry.size).await.is_ok() {
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
