//! A fill's readers: each client's response body, streamed from the fill's
//! temp file as far as the fill has published it (the bytes of its last
//! batch straight from memory, [`Recent`]), and the uncached stream-through
//! of a body the store cannot take.

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

/// The bytes of the fill's last batch (or two), in memory: a reader that
/// has caught up takes them from here (a slice, no copy) instead of reading
/// them back from the temp file. Published with the length they end at; the bytes
/// before them are in the file, and a reader behind them reads the file up
/// to where they begin. The batch may not be in the file yet (it is
/// written while the next one arrives); a body nothing can refuse
/// publishes each batch even before the one before it is written, and its
/// recent bytes are then the last two batches.
#[derive(Clone)]
pub struct Recent {
    /// Where these bytes begin in the body.
    start: u64,
    chunks: Arc<[Bytes]>,
}

impl Recent {
    /// The batch of `chunks` written at `start`.
    pub(super) fn new(start: u64, chunks: &[Bytes]) -> Recent {
        Recent {
            start,
            chunks: chunks.into(),
        }
    }

    /// From `pos`, the bytes up to `end` of the chunk that holds `pos`, if
    /// the batch holds it.
    fn slice(&self, pos: u64, end: u64) -> Option<Bytes> {
        let mut at = self.start;
        for chunk in self.chunks.iter() {
            let next = at + chunk.len() as u64;
            if (at..next).contains(&pos) {
                let to = next.min(end);
                return (to > pos).then(|| chunk.slice((pos - at) as usize..(to - at) as usize));
            }
            at = next;
        }
        None
    }

    /// The whole body of `size` bytes, when the batch is all of it: the
    /// chunk itself if it is one, else the chunks joined (at most
    /// [`super::hashing::INLINE_BYTES`], one copy, as a read back would be).
    pub fn whole(&self, size: u64) -> Option<Bytes> {
        let len: u64 = self.chunks.iter().map(|c| c.len() as u64).sum();
        if self.start != 0 || len != size {
            return None;
        }
        match &*self.chunks {
            [one] => Some(one.clone()),
            chunks if size <= super::hashing::INLINE_BYTES => Some(chunks.concat().into()),
            _ => None,
        }
    }
}

/// Where a reader's next bytes come from.
#[derive(Debug, PartialEq)]
enum Source {
    /// The fill's memory.
    Memory(Bytes),
    /// The temp file, up to this offset.
    File(u64),
}

/// With `available` bytes published, the last batch of them `recent`: where
/// a reader at `pos` that stops at `end` reads next. From memory when the
/// batch holds `pos`; else from the file, only up to where the batch
/// begins (a batch published before it is written may not be in it yet).
fn source(recent: Option<&Recent>, pos: u64, end: u64, available: u64) -> Source {
    let Some(recent) = recent else {
        return Source::File(available);
    };
    match recent.slice(pos, available.min(end)) {
        Some(bytes) => Source::Memory(bytes),
        None if pos < recent.start => Source::File(available.min(recent.start)),
        None => Source::File(available),
    }
}

/// An upstream body the store cannot take, for one client: the chunks the
/// fill already took from it (the first batch of a body that might have
/// been kept in memory), then the rest of the response.
pub struct Passthrough {
    pub taken: Vec<Bytes>,
    pub response: reqwest::Response,
}

impl From<reqwest::Response> for Passthrough {
    fn from(response: reqwest::Response) -> Passthrough {
        Passthrough {
            taken: Vec::new(),
            response,
        }
    }
}

/// Streams an uncached upstream body to one client, with the idle timeout.
pub fn passthrough(
    body: Passthrough,
    idle: Duration,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    let Passthrough { taken, response } = body;
    let rest = futures_util::stream::unfold(Some(response), move |response| async move {
        let mut response = response?;
        match tokio::time::timeout(idle, response.chunk()).await {
            Ok(Ok(Some(chunk))) => Some((Ok(chunk), Some(response))),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => Some((Err(io::Error::other(e.without_url())), None)),
            Err(_) => Some((Err(io::Error::other("upstream stalled")), None)),
        }
    });
    futures_util::StreamExt::chain(futures_util::stream::iter(taken.into_iter().map(Ok)), rest)
}

/// A reader's view of a fill: the body bytes from `file`, as far as the fill
/// has published them, ending in an error if the fill fails.
pub fn body(
    rx: watch::Receiver<FillState>,
    file: Option<Arc<File>>,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    body_range(rx, file, 0, u64::MAX)
}

/// [`body`] from byte `start`, `len` bytes (a client's range): the bytes
/// already written are sent at once, the rest as the fill writes them.
pub fn body_range(
    rx: watch::Receiver<FillState>,
    file: Option<Arc<File>>,
    start: u64,
    len: u64,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    struct Reader {
        rx: watch::Receiver<FillState>,
        /// `None` for a body kept whole in memory: never read from a file.
        file: Option<Arc<File>>,
        pos: u64,
        /// Where this reader stops (exclusive).
        end: u64,
        done: bool,
    }
    enum Step {
        Read(u64),
        /// The next bytes, from the fill's memory.
        Take(Bytes),
        Wait,
        Done,
        Fail(String),
    }
    fn next(recent: &Option<Recent>, pos: u64, end: u64, available: u64) -> Step {
        match source(recent.as_ref(), pos, end, available) {
            Source::Memory(bytes) => Step::Take(bytes),
            Source::File(to) => Step::Read(to),
        }
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
                FillState::Streaming {
                    written,
                    recent,
                    refusable,
                    ..
                } => {
                    // A body that may still be refused: the range's last
                    // byte waits for the check, so the answer can only
                    // complete with checked bytes (a refused fill fails it).
                    let end = if *refusable {
                        reader.end.saturating_sub(1)
                    } else {
                        reader.end
                    };
                    let available = (*written).min(end);
                    if available > pos {
                        next(recent, pos, end, available)
                    } else {
                        Step::Wait
                    }
                }
                FillState::Complete { entry, recent, .. } if entry.size > pos => {
                    next(recent, pos, reader.end, entry.size)
                }
                FillState::Complete { .. } => Step::Done,
                FillState::Connecting
                | FillState::Revalidated(_)
                | FillState::Shared(_)
                | FillState::Bypass { .. } => Step::Fail("fill has no body".into()),
            };
            match step {
                Step::Take(bytes) => {
                    reader.pos += bytes.len() as u64;
                    return Some((Ok(bytes), reader));
                }
                Step::Read(available) => {
                    let available = available.min(reader.end);
                    let n = (available - pos).min(READ_CHUNK as u64) as usize;
                    let read = match &reader.file {
                        Some(file) => read_at(file, pos, n, available).await,
                        None => Err(io::Error::other("a body kept in memory has no file")),
                    };
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
        return crate::store::read_at(file, pos, n);
    }
    let file = file.clone();
    tokio::task::spawn_blocking(move || crate::store::read_at(&file, pos, n))
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recent() -> Recent {
        // Bytes 100..110 of a body, in two chunks.
        Recent::new(
            100,
            &[Bytes::from_static(b"abcd"), Bytes::from_static(b"efghij")],
        )
    }

    /// A body streamed through after the fill took its first chunks (no
    /// temp file could be made for it) sends those chunks, then the rest.
    #[tokio::test]
    async fn a_passthrough_sends_the_chunks_already_taken_first() {
        use futures_util::StreamExt;
        let response = reqwest::Response::from(axum::http::Response::new("ghij"));
        let taken = vec![Bytes::from_static(b"abc"), Bytes::from_static(b"def")];
        let body = Passthrough { taken, response };
        let sent: Vec<Bytes> = passthrough(body, Duration::from_secs(5))
            .map(|chunk| chunk.unwrap())
            .collect()
            .await;
        assert_eq!(sent.concat(), b"abcdefghij");
        assert_eq!(&sent[..2], [&b"abc"[..], &b"def"[..]]);
    }

    #[test]
    fn a_reader_takes_the_chunk_that_holds_its_position_up_to_its_end() {
        let r = recent();
        assert_eq!(r.slice(100, 200).as_deref(), Some(&b"abcd"[..]));
        assert_eq!(r.slice(102, 200).as_deref(), Some(&b"cd"[..]));
        assert_eq!(r.slice(104, 200).as_deref(), Some(&b"efghij"[..]));
        assert_eq!(r.slice(105, 108).as_deref(), Some(&b"fgh"[..]));
        // Before the batch (in the file) or past it: not from memory.
        assert!(r.slice(99, 200).is_none());
        assert!(r.slice(110, 200).is_none());
        assert!(r.slice(105, 105).is_none());
    }

    #[test]
    fn a_reader_behind_the_batch_reads_the_file_only_up_to_where_it_begins() {
        let r = recent();
        assert_eq!(source(Some(&r), 90, 500, 110), Source::File(100));
        assert_eq!(
            source(Some(&r), 104, 500, 110),
            Source::Memory(Bytes::from_static(b"efghij"))
        );
        assert_eq!(
            source(Some(&r), 104, 106, 110),
            Source::Memory(Bytes::from_static(b"ef"))
        );
        assert_eq!(source(None, 90, 500, 110), Source::File(110));
    }

    #[test]
    fn the_whole_body_only_when_the_batch_is_all_of_it() {
        assert!(recent().whole(10).is_none());
        let all = Recent::new(0, &[Bytes::from_static(b"ab"), Bytes::from_static(b"cd")]);
        assert_eq!(all.whole(4).as_deref(), Some(&b"abcd"[..]));
        assert!(all.whole(5).is_none());
        let one = Recent::new(0, &[Bytes::from_static(b"xyz")]);
        assert_eq!(one.whole(3).as_deref(), Some(&b"xyz"[..]));
    }
}
