//! Downloading one mirror's body into the fill's temp file: each batch of
//! chunks written and hashed ([`BodyWriter`]) and published to the readers,
//! with its bytes in memory for those that have caught up ([`Recent`]). A
//! batch is written on the blocking pool while the next one is taken, and
//! published once the batch before it is in the file (before that, when
//! nothing can refuse the body: [`Early`]); readers take the bytes not yet
//! written from memory.

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;

use super::coalesce::Batch;
use super::hashing::BodyWriter;
use super::{FillState, Head, Recent, Slot};
use crate::cache::{Cache, CommitSlot, Digest, TempBlob};
use crate::error::ProxyError;
use crate::kind::declared::{Declared, Hashers};
use crate::upstream::fetch;
use crate::upstream::{MirrorSet, Remote};

/// A body nothing can refuse once received ([`super::learn::FillDigests::unrefusable`]):
/// each batch is published before it is written and hashed. Its last batch
/// (the announced length reached) waits for a place in the commit queue
/// first (`queued`, the back-pressure the last bytes are under), and the
/// fill's `max_fills` slot is given back then: every byte is here.
pub(super) struct Early<'a> {
    pub(super) cache: &'a Cache,
    pub(super) slot: &'a mut Slot,
    pub(super) queued: Option<Result<CommitSlot, ProxyError>>,
}

impl Early<'_> {
    /// Before the last batch is published: a place in the commit queue
    /// (waited for while it is full), then the `max_fills` slot given back.
    pub(super) async fn last_batch(&mut self) {
        self.queued = Some(self.cache.commits.slot().await);
        self.slot.release();
    }
}

/// The body's next batch: a chunk, waited for up to the idle timeout,
/// with every chunk that has already arrived after it (or, with `after`,
/// what the body said after the last batch, if it said it already);
/// `None` at the end. A stalled or broken body counts against the mirror.
pub(super) async fn next_batch(
    remote: &Remote,
    upstream: &mut fetch::Body<'_>,
    after: Option<Result<Option<Bytes>, reqwest::Error>>,
) -> Result<Option<Batch>, ProxyError> {
    let next = match after {
        Some(next) => Ok(next),
        None => tokio::time::timeout(remote.config.idle_timeout, upstream.response.chunk()).await,
    };
    let chunk = match next {
        Err(_) => {
            let error = format!("no data for {:?}", remote.config.idle_timeout);
            return Err(broken_body(
                remote,
                upstream.set,
                upstream.mirror_idx,
                error,
            ));
        }
        Ok(Err(e)) => {
            let error = e.without_url().to_string();
            return Err(broken_body(
                remote,
                upstream.set,
                upstream.mirror_idx,
                error,
            ));
        }
        Ok(Ok(None)) => return Ok(None),
        Ok(Ok(Some(chunk))) => chunk,
    };
    // With it, every chunk that has already arrived: one hop, one wake-up
    // of the readers per batch (see `coalesce`).
    Ok(Some(super::coalesce::take_ready(
        &mut upstream.response,
        chunk,
    )))
}

/// Reads the body into `temp` (from `first`, when that batch was read
/// already), hashing it and publishing progress (each batch once the one
/// before it is written, with its bytes in memory for the readers that
/// have caught up; with [`Early`], before that); checks the announced
/// length. Returns the digests, the length and the recent bytes.
#[allow(clippy::too_many_arguments)]
pub(super) async fn download(
    remote: &Remote,
    upstream: &mut fetch::Body<'_>,
    first: Option<Batch>,
    (temp, file): (&Arc<TempBlob>, &Arc<File>),
    head: &Arc<Head>,
    (hashers, early): (Hashers, &mut Option<Early<'_>>),
    tx: &watch::Sender<FillState>,
) -> Result<(Digest, Declared, u64, Option<Recent>), ProxyError> {
    let max_body = remote.config.max_body_size;
    let mut body = BodyWriter::new(temp.clone(), hashers, head.content_length);
    let mut written: u64 = 0;
    let mut recent = None;
    // With `early`: the last batch, when its write may not have ended.
    let mut unwritten: Option<(u64, Vec<Bytes>)> = None;
    let mut first = first;
    // The end or the error the last batch already met, if it did.
    let mut after_batch = None;
    loop {
        let batch = match first.take() {
            Some(batch) => batch,
            None => {
                // A write that failed is this store's error, told before
                // the mirror is waited for again, and rather than what the
                // mirror did meanwhile. (Not raced against the wait: its
                // end would wake this thread for each batch.)
                if body.write_ended() {
                    body.settle().await?;
                }
                match next_batch(remote, upstream, after_batch.take()).await {
                    Ok(Some(batch)) => batch,
                    Ok(None) => break,
                    Err(error) => {
                        body.settle().await?;
                        return Err(error);
                    }
                }
            }
        };
        let n = batch.len;
        if written + n > max_body {
            return Err(ProxyError::TooLarge {
                size: written + n,
                limit: max_body,
            });
        }
        if let Some(early) = early.as_mut() {
            // The batch before may still be on its way to the file: the
            // readers take it from memory too.
            recent = Some(match unwritten.take() {
                Some((start, mut chunks)) => {
                    chunks.extend(batch.chunks.iter().cloned());
                    Recent::new(start, &chunks)
                }
                None => Recent::new(written, &batch.chunks),
            });
            if head.content_length == Some(written + n) {
                early.last_batch().await;
            }
            publish(tx, (head, file), written + n, &recent, true);
            // The readers woken on this thread send the batch before it is
            // written and hashed here.
            tokio::task::yield_now().await;
            // Written while the next batch is taken (the batch before is in
            // the file once this returns): until then, readers take it from
            // memory.
            let kept = body.goes_to_pool(n).then(|| batch.chunks.clone());
            body.start(batch.chunks, n).await?;
            unwritten = kept.map(|chunks| (written, chunks));
        } else {
            // Published below once the batch before is in the file; this
            // one is written meanwhile, its readers take it from memory.
            recent = Some(Recent::new(written, &batch.chunks));
            body.start(batch.chunks, n).await?;
        }
        written += n;
        after_batch = batch.end;
        if head.content_length == Some(written) {
            // All announced bytes are here: no need to wait for the end
            // marker. Unless published early, the last batch is published
            // with the checked body.
            break;
        }
        if early.is_none() {
            publish(tx, (head, file), written, &recent, false);
        }
    }
    if let Some(expected) = head.content_length.filter(|&e| e != written) {
        return Err(ProxyError::UpstreamBody(format!(
            "body is {written} bytes, Content-Length said {expected}"
        )));
    }
    let (sha256, received) = body.finish().await?.finish();
    // Every byte is in the file now: the readers' recent bytes are the last
    // batch alone.
    if let Some((start, chunks)) = unwritten {
        recent = Some(Recent::new(start, &chunks));
    }
    Ok((Digest(sha256), received, written, recent))
}

/// Publishes `available` bytes of a streaming body, the last of them in
/// memory (`batch`: the ones not yet written, and at least the last
/// batch). A body held back (nothing published yet) stays so, unless it is
/// published `early` (nothing can refuse it): then this is its first
/// publication.
fn publish(
    tx: &watch::Sender<FillState>,
    (head, file): (&Arc<Head>, &Arc<File>),
    available: u64,
    batch: &Option<Recent>,
    early: bool,
) {
    tx.send_if_modified(|state| match state {
        FillState::Streaming {
            written, recent, ..
        } => {
            *written = available;
            recent.clone_from(batch);
            true
        }
        FillState::Connecting if early => {
            *state = FillState::Streaming {
                head: head.clone(),
                file: Some(file.clone()),
                written: available,
                recent: batch.clone(),
                refusable: false,
            };
            true
        }
        _ => false,
    });
}

pub(super) fn broken_body(
    remote: &Remote,
    set: &MirrorSet,
    mirror_idx: usize,
    error: String,
) -> ProxyError {
    fetch::record_failure(remote, set, mirror_idx, &error);
    ProxyError::UpstreamBody(error)
}
