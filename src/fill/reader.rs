//! A fill's readers: each client's response body, streamed from the fill's
//! temp file as far as the fill has published it, and the uncached
//! stream-through of a body the store cannot take.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::watch;

use super::FillState;

/// Bytes one reader reads from the temp file at a time. Each reader holds
/// about two of these (its own, and one queued in hyper while the client's
/// socket is full). Measured for 200 readers of one 16 MiB fill: 256 KiB
/// peaked at 90–150 MiB RSS, 128 KiB at 58 MiB, 64 KiB at 38–44 MiB but cost
/// large single transfers ~25% throughput; 128 KiB keeps both in bounds.
const READ_CHUNK: usize = 128 * 1024;

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
    body_range(rx, file, 0, u64::MAX)
}

/// [`body`] from byte `start`, `len` bytes (a client's range): the bytes
/// already written are sent at once, the rest as the fill writes them.
pub fn body_range(
    rx: watch::Receiver<FillState>,
    file: Arc<File>,
    start: u64,
    len: u64,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    struct Reader {
        rx: watch::Receiver<FillState>,
        file: Arc<File>,
        pos: u64,
        /// Where this reader stops (exclusive).
        end: u64,
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
        pos: start,
        end: start.saturating_add(len),
        done: false,
    };
    futures_util::stream::unfold(reader, |mut reader| async move {
        if reader.done || reader.pos >= reader.end {
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
                    let available = available.min(reader.end);
                    let n = (available - pos).min(READ_CHUNK as u64) as usize;
                    let read = read_at(&reader.file, pos, n, available).await;
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

/// How far behind the fill's written length a reader may be and still read
/// on the async thread: bytes written that recently are still in the page
/// cache (dirty, or clean and the newest in the kernel's LRU), so the read
/// is a copy, not a disk wait. A reader further behind reads on the
/// blocking pool.
const INLINE_LAG: u64 = 8 * 1024 * 1024;

/// Reads `n` bytes at `pos` of a fill whose written length is `written`:
/// on this thread when the bytes were written recently (no hop to the
/// blocking pool and back per wake-up, which with 200 readers of one fill
/// was most of the fan-out's CPU), else on the blocking pool. Both read
/// into spare capacity (no zeroing: `preadv2` with `RWF_NOWAIT` would need
/// a zeroed buffer, and zeroing every byte 200 readers read cost the
/// fan-out more than the hop it saved).
async fn read_at(file: &Arc<File>, pos: u64, n: usize, written: u64) -> io::Result<Bytes> {
    if written - pos <= INLINE_LAG {
        return crate::cache::store::read_at(file, pos, n);
    }
    let file = file.clone();
    tokio::task::spawn_blocking(move || crate::cache::store::read_at(&file, pos, n))
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}
