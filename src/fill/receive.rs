//! Receiving one mirror's 200: its body read into a temp file (or, a small
//! one that comes whole, kept in memory), hashed and published to the
//! readers as it arrives, checked against what is declared, then committed
//! through the group commit and learned from.

use std::fs::File;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::watch;

use super::coalesce::Batch;
use super::download::{broken_body, download, next_batch, Early};
use super::hashing;
use super::learn::{self, FillDigests, Learning};
use super::{FillRegistry, FillState, Head, Me, Passthrough, Recent, Slot};
use crate::cache::{Blob, Cache, CommitSlot, Committing, Digest, Entry, FillBody, TempBlob};
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::kind::declared::{Declared, Hashers};
use crate::path::ArtifactPath;
use crate::upstream::fetch;
use crate::upstream::Remote;

/// How one mirror's 200 ended.
pub(super) enum Outcome {
    /// Served to the readers; with its commit, when the store takes it.
    Done(Option<Landing>),
    /// Its digest is not the declared one; nothing was committed.
    /// `published`: readers had been given the body as it arrived.
    Refused {
        mirror_idx: usize,
        error: ProxyError,
        published: bool,
    },
}

/// Reads one mirror's body (a small one that comes whole kept in memory,
/// any other into a temp file), checks it, publishes it and hands it to
/// the group commit. A body whose digest is declared and that is small
/// enough for the in-memory tier is held back until checked, so a refused
/// one costs its readers nothing; a larger one streams to its readers as
/// it arrives.
#[allow(clippy::too_many_arguments)]
pub(super) async fn receive(
    fills: &Arc<FillRegistry>,
    remote: &Remote,
    path: &ArtifactPath,
    mut upstream: fetch::Body<'_>,
    digests: &FillDigests,
    stale: Option<&Entry>,
    tx: &watch::Sender<FillState>,
    (slot, me): (&mut Slot, Me),
) -> Result<Outcome, ProxyError> {
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
    // A small body (announced as at most `INLINE_BYTES`, or not announced)
    // is read before any file is made for it, until it is whole or larger
    // than that: if it is whole, it is kept in memory (its readers answered
    // from there, its file written by the committer), and no file is made
    // on the request's path.
    // Nothing can refuse these bytes once received: each batch reaches the
    // readers before it is written and hashed, the last one included (once
    // the commit has its place).
    let mut early = (expected.is_none() && digests.unrefusable(remote)).then(|| Early {
        cache,
        slot: &mut *slot,
        queued: None,
    });
    let mut first = None;
    let mut in_memory = None;
    if head
        .content_length
        .is_none_or(|len| hashing::is_inline(Some(len)))
    {
        let mut batch = Batch {
            chunks: Vec::new(),
            len: 0,
            end: None,
        };
        let whole = loop {
            match next_batch(remote, &mut upstream, None).await? {
                Some(more) => {
                    batch.chunks.extend(more.chunks);
                    batch.len += more.len;
                    batch.end = more.end;
                }
                None => batch.end = Some(Ok(None)),
            }
            if batch.len > max_body {
                return Err(ProxyError::TooLarge {
                    size: batch.len,
                    limit: max_body,
                });
            }
            let whole = head.content_length == Some(batch.len)
                || (head.content_length.is_none() && matches!(batch.end, Some(Ok(None))));
            if whole || batch.end.is_some() || !hashing::is_inline(Some(batch.len)) {
                break whole;
            }
        };
        if whole && hashing::is_inline(Some(batch.len)) {
            // Copied into a block of its own: a chunk is a slice of the
            // connection's read buffer (8 KiB or more), which it would hold
            // whole until the commit, and a commit may wait behind hundreds.
            let bytes = Bytes::from(std::mem::take(&mut batch.chunks).concat());
            let recent = Recent::new(0, std::slice::from_ref(&bytes));
            // Published early, the bytes reach the readers before they are
            // hashed.
            if let Some(early) = early.as_mut() {
                early.last_batch().await;
                tx.send_replace(FillState::Streaming {
                    head: head.clone(),
                    file: None,
                    written: batch.len,
                    recent: Some(recent.clone()),
                    refusable: false,
                });
                tokio::task::yield_now().await;
            }
            let mut hashers = Hashers::new(expected);
            hashers.update(&bytes);
            let (sha256, received) = hashers.finish();
            let body = Received {
                digest: Digest(sha256),
                declared: received,
                size: batch.len,
                recent: Some(recent),
                spool: Spool::Memory(bytes),
                published: early.is_some(),
            };
            in_memory = Some(body);
        } else {
            first = Some(batch);
        }
    }
    let body = match in_memory {
        Some(body) => body,
        None => {
            let into = (first, expected, &mut early);
            match into_temp_file(fills, remote, path, &mut upstream, &head, into, tx).await? {
                Ok(body) => body,
                Err(taken) => {
                    // The client still gets its bytes, uncached.
                    let fetch::Body { response, .. } = upstream;
                    tx.send_replace(FillState::Bypass {
                        head,
                        response: Arc::new(Mutex::new(Some(Passthrough { taken, response }))),
                    });
                    return Ok(Outcome::Done(None));
                }
            }
        }
    };
    let queued = early.and_then(|early| early.queued);
    let context = (fills, remote, path, digests);
    settle(
        context,
        expected,
        upstream,
        (body, queued),
        (&head, validators),
        stale,
        tx,
        (slot, me),
    )
    .await
}

/// A body that was not kept in memory, read into a temp file (from
/// `first`, the batches already read); `Err` with the chunks taken so far
/// when no temp file can be made and nothing declared what the bytes
/// should be: the body is then streamed through, uncached.
async fn into_temp_file(
    fills: &FillRegistry,
    remote: &Remote,
    path: &ArtifactPath,
    upstream: &mut fetch::Body<'_>,
    head: &Arc<Head>,
    (first, expected, early): (Option<Batch>, Option<&Declared>, &mut Option<Early<'_>>),
    tx: &watch::Sender<FillState>,
) -> Result<Result<Received, Vec<Bytes>>, ProxyError> {
    let cache = &fills.cache;
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
            return Ok(Err(first.map(|batch| batch.chunks).unwrap_or_default()));
        }
    };
    let file = temp.reader();
    // Held back until complete: a body of at most `INLINE_BYTES` (its
    // readers get it whole, from memory, in one answer), and one small
    // enough for the in-memory tier whose digest is declared (so a refused
    // one costs its readers nothing).
    let hold = head.content_length.is_some_and(|len| {
        hashing::is_inline(Some(len)) || (expected.is_some() && cache.is_small(len))
    });
    if !hold {
        tx.send_replace(FillState::Streaming {
            head: head.clone(),
            file: Some(file.clone()),
            written: 0,
            recent: None,
            refusable: early.is_none(),
        });
    }
    let (digest, received, written, recent) = download(
        remote,
        upstream,
        first,
        (&temp, &file),
        head,
        (Hashers::new(expected), early),
        tx,
    )
    .await?;
    let body = Received {
        digest,
        declared: received,
        size: written,
        recent,
        spool: Spool::File(temp, file),
        published: !hold,
    };
    Ok(Ok(body))
}

/// Where a received body is until its commit.
enum Spool {
    /// In its temp file (`.1`: the readers' handle on it).
    File(Arc<TempBlob>, Arc<File>),
    /// Whole in memory (a small body that came whole within its first
    /// `INLINE_BYTES`): no file yet.
    Memory(Bytes),
}

impl Spool {
    fn blob(&self) -> Blob {
        match self {
            Spool::File(_, file) => Blob::Local(file.clone()),
            Spool::Memory(bytes) => Blob::Memory(bytes.clone()),
        }
    }

    fn file(&self) -> Option<Arc<File>> {
        match self {
            Spool::File(_, file) => Some(file.clone()),
            Spool::Memory(_) => None,
        }
    }

    /// The body for the committer (no writer is left).
    fn into_body(self) -> FillBody {
        match self {
            Spool::File(temp, _) => {
                FillBody::Temp(Arc::into_inner(temp).expect("no writer outlives the download"))
            }
            Spool::Memory(bytes) => FillBody::Memory(bytes),
        }
    }
}

/// A body received whole from one mirror, hashed, not yet checked.
struct Received {
    digest: Digest,
    /// Its digest by the declared function (sha256 when none is declared).
    declared: Declared,
    size: u64,
    recent: Option<Recent>,
    spool: Spool,
    /// Whether readers were given the body as it arrived.
    published: bool,
}

/// What a received body's fill does next: checks it against what is
/// declared (refused: nothing is committed), then publishes it complete,
/// gives the `max_fills` slot back and hands it to the group commit; the
/// [`Landing`] waits for that commit.
#[allow(clippy::too_many_arguments)]
async fn settle(
    (fills, remote, path, digests): (&Arc<FillRegistry>, &Remote, &ArtifactPath, &FillDigests),
    expected: Option<&Declared>,
    upstream: fetch::Body<'_>,
    // With the commit place already taken, for a body published early.
    (body, queued): (Received, Option<Result<CommitSlot, ProxyError>>),
    (head, validators): (&Arc<Head>, UpstreamValidators),
    stale: Option<&Entry>,
    tx: &watch::Sender<FillState>,
    (slot, me): (&mut Slot, Me),
) -> Result<Outcome, ProxyError> {
    let cache = &fills.cache;
    let Received {
        digest,
        declared: received,
        size: written,
        recent,
        spool,
        published,
    } = body;
    // Nothing was declared when the fill began; a document learned since
    // may have declared it (checked now, so no commit slips past the
    // eviction of contradicting entries).
    let late = digests
        .declared_since(fills, remote, (&digest, spool.blob(), written))
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
        return Ok(Outcome::Refused {
            mirror_idx: upstream.mirror_idx,
            error,
            published,
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
    // commits fall behind, the last bytes wait here with the fill's
    // `max_fills` slot still taken (back-pressure: with `max_fills` fills
    // waiting, new misses are refused until commits catch up).
    let queued = match queued {
        Some(queued) => queued,
        None => cache.commits.slot().await,
    };
    tx.send_replace(FillState::Complete {
        head: head.clone(),
        entry: Arc::new(entry.clone()),
        file: spool.file(),
        recent,
    });
    // The bytes are here: the commit waits in its own queue.
    slot.release();
    let queued = match queued {
        Ok(queued) => queued,
        Err(error) => {
            tracing::warn!(key = path.key(), %error, "could not commit; served uncached");
            return Ok(Outcome::Done(None));
        }
    };
    let pin = digests.pin(remote, &digest);
    let pinned = pin.as_ref().map(|pin| pin.declared.to_string());
    let learning = learning.map(|learning| (learning, spool.blob(), written));
    let committing = queued.send(spool.into_body(), path, (entry, pin), me.ticket);
    Ok(Outcome::Done(Some(Landing {
        committing: Some(committing),
        digest,
        stale: stale.map(|old| old.digest),
        pinned,
        learning,
    })))
}

/// A fill's commit once its readers have every byte (the blob, then its
/// row and pin in one transaction), and what follows it: the replaced
/// entry's blob released, the pin logged, the document learned from. The
/// fill's task waits for it after the fill's own future is dropped
/// (`FillRegistry::join_or_start`): a fill waiting behind hundreds of
/// commits holds this, not the whole fill.
pub(super) struct Landing {
    /// Taken when waited for: once answered, it no longer counts in
    /// `commits_queued`.
    committing: Option<Committing>,
    digest: Digest,
    /// The digest of the entry this fill revalidated, if it did.
    stale: Option<Digest>,
    /// The pin written with the row, for the log.
    pinned: Option<String>,
    /// A document to learn from once committed: its blob and size.
    learning: Option<(Learning, Blob, u64)>,
}

impl Landing {
    /// Waits for the commit, then does what follows it. A failure costs
    /// only the caching (the group commit logs it); a purge of the key
    /// that came after the fill began leaves nothing of it, and nothing
    /// is pinned or learned from its bytes.
    pub(super) async fn land(&mut self, cache: &Cache, remote: &Remote, path: &ArtifactPath) {
        // By reference: the task's end holds the landing, and an async fn's
        // argument moved in would take room in the future a second time.
        let committed = match self.committing.take() {
            Some(committing) => matches!(committing.durable().await, Ok(Some(_))),
            None => false,
        };
        if let Some(old) = self.stale.filter(|old| *old != self.digest) {
            // The entry was replaced (or purged): its old blob may now be
            // unreferenced.
            Box::pin(cache.release_blob(&old)).await;
        }
        if !committed {
            // Nothing is kept: nothing is pinned or learned, and the
            // remote's artifact fills need not wait for this document.
            self.learning = None;
            return;
        }
        if let Some(pinned) = self.pinned.take() {
            tracing::info!(key = path.key(), digest = %pinned, "pinned on first use");
        }
        if let Some((learning, blob, size)) = self.learning.take() {
            // Boxed: documents alone learn, and their future is large.
            let body = (self.digest, size);
            Box::pin(learn::from_document(learning, remote, path, blob, body)).await;
        }
    }
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
