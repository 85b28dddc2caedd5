//! Writing and hashing a fill's body as it arrives, where it costs least: a
//! small body (announced as a few KiB, the common cold miss) on the fill's
//! own thread, since the hop to the blocking pool and back costs more than
//! the work; a larger one on the blocking pool, a batch of chunks a hop,
//! written while the fill takes the next batch ([`BodyWriter::start`]).
//! A body of a MiB or more is hashed on a thread of its own — the sha256
//! and the declared function (npm's sha512) — beside the writes rather than
//! after each of them. A body of unknown length (chunked, or decoded from
//! gzip) is treated as small until it is not: its first [`INLINE_BYTES`]
//! on the fill's thread, then the blocking pool, and from [`SIDE_FROM`] the
//! hashing thread, handed the hashes of what came before.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::cache::TempBlob;
use crate::error::ProxyError;
use crate::kind::declared::Hashers;

/// The largest body written and hashed on the fill's thread: tens of
/// microseconds of sha256 (and a write into the page cache), less than the
/// hop. A larger one stays on the blocking pool, batch by batch, so its
/// hashing runs beside its readers' sends on the async threads.
pub(super) const INLINE_BYTES: u64 = 64 * 1024;
/// Whether a body announced as `announced` bytes is written (and its temp
/// file created) on the fill's own thread.
pub(super) fn is_inline(announced: Option<u64>) -> bool {
    announced.is_some_and(|len| len <= INLINE_BYTES)
}

/// Bodies from this size (announced, or reached by one of unknown length)
/// are hashed on a thread of their own, beside the write rather than after
/// it; smaller ones are done before a thread would have started.
const SIDE_FROM: u64 = 1024 * 1024;
/// Batches queued for the side thread: when it falls behind, the download
/// waits (memory stays at this many batches).
const SIDE_QUEUE: usize = 8;

/// A fill's temp file and the hashes of what was written to it.
pub(super) struct BodyWriter {
    temp: Arc<TempBlob>,
    /// The hashes, when the write's own thread computes them (a body below
    /// [`SIDE_FROM`]); `None` while a batch is on the blocking pool, and
    /// always when the side thread has them.
    hashers: Option<Hashers>,
    side: Option<SideThread>,
    /// Whether the body may be written on the fill's thread while it is
    /// below [`INLINE_BYTES`]: announced as at most that, or not announced.
    inline: bool,
    /// Bytes handed to [`BodyWriter::start`] (written, or being written).
    written: u64,
    /// The batch being written on the blocking pool, if one is: it gives
    /// the hashes back (when it has them) once written.
    pending: Option<tokio::task::JoinHandle<io::Result<Option<Hashers>>>>,
}

/// Every hash of a large body (the sha256 and the declared function) on a
/// blocking-pool thread of its own, fed the batches as they are written.
struct SideThread {
    batches: mpsc::Sender<Vec<Bytes>>,
    done: tokio::task::JoinHandle<Hashers>,
}

impl BodyWriter {
    /// Writes into `temp` from offset 0; `announced` is the body's
    /// `Content-Length`, if the mirror gave one.
    pub(super) fn new(temp: Arc<TempBlob>, hashers: Hashers, announced: Option<u64>) -> BodyWriter {
        let large = announced.is_some_and(|len| len >= SIDE_FROM);
        let (hashers, side) = if large {
            (None, Some(SideThread::start(hashers)))
        } else {
            (Some(hashers), None)
        };
        BodyWriter {
            temp,
            hashers,
            side,
            inline: announced.is_none_or(|len| len <= INLINE_BYTES),
            written: 0,
            pending: None,
        }
    }

    /// Appends `chunks` (`len` bytes in all), hashed, without waiting for
    /// the write when it goes to the blocking pool: it runs while the fill
    /// takes its next batch. The batch before is waited for first, so one
    /// is in flight at most: once this returns, every byte before these is
    /// in the file (these may not be yet).
    pub(super) async fn start(&mut self, chunks: Vec<Bytes>, len: u64) -> Result<(), ProxyError> {
        self.settle().await?;
        if self.side.is_none() && self.written + len >= SIDE_FROM {
            // A body of unknown length grew large: its hashing moves to a
            // thread of its own, with the hashes of what came before.
            if let Some(hashers) = self.hashers.take() {
                self.side = Some(SideThread::start(hashers));
            }
        }
        if let Some(side) = &self.side {
            side.batches
                .send(chunks.clone())
                .await
                .map_err(|_| ProxyError::Store("the hashing thread stopped".into()))?;
        }
        let pool = self.goes_to_pool(len);
        let mut hashers = self.hashers.take();
        let offset = self.written;
        self.written += len;
        if !pool {
            write_and_hash(&self.temp, &chunks, offset, hashers.as_mut())
                .map_err(|e| ProxyError::Store(e.to_string()))?;
            self.hashers = hashers;
        } else {
            let temp = self.temp.clone();
            self.pending = Some(tokio::task::spawn_blocking(move || {
                write_and_hash(&temp, &chunks, offset, hashers.as_mut()).map(|()| hashers)
            }));
        }
        Ok(())
    }

    /// Whether a batch of `len` bytes appended now is written on the
    /// blocking pool (so [`BodyWriter::start`] returns before it is in the
    /// file).
    pub(super) fn goes_to_pool(&self, len: u64) -> bool {
        !(self.inline && self.written + len <= INLINE_BYTES)
    }

    /// Whether a batch's write was in flight and has ended (well or not).
    pub(super) fn write_ended(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| p.is_finished())
    }

    /// Waits until every batch started is in the file; its error, if the
    /// write failed.
    pub(super) async fn settle(&mut self) -> Result<(), ProxyError> {
        if let Some(pending) = self.pending.take() {
            let written = pending
                .await
                .map_err(|e| ProxyError::Store(e.to_string()))?;
            self.hashers = written.map_err(|e| ProxyError::Store(e.to_string()))?;
        }
        Ok(())
    }

    /// The hashes of every byte written.
    pub(super) async fn finish(mut self) -> Result<Hashers, ProxyError> {
        self.settle().await?;
        match self.side.take() {
            Some(SideThread { batches, done }) => {
                drop(batches);
                done.await.map_err(|e| ProxyError::Store(e.to_string()))
            }
            None => Ok(self.hashers.take().expect("no batch in flight")),
        }
    }
}

impl SideThread {
    /// Starts hashing on a blocking-pool thread, from `hashers`' state.
    fn start(mut hashers: Hashers) -> SideThread {
        let (batches, mut queue) = mpsc::channel::<Vec<Bytes>>(SIDE_QUEUE);
        let done = tokio::task::spawn_blocking(move || {
            while let Some(batch) = queue.blocking_recv() {
                for chunk in &batch {
                    hashers.update(chunk);
                }
            }
            hashers
        });
        SideThread { batches, done }
    }
}

/// Writes `chunks` at `offset`, hashing them with `hashers` when this
/// thread has them.
fn write_and_hash(
    temp: &TempBlob,
    chunks: &[Bytes],
    mut offset: u64,
    mut hashers: Option<&mut Hashers>,
) -> io::Result<()> {
    for chunk in chunks {
        temp.write_at(chunk, offset)?;
        if let Some(hashers) = hashers.as_mut() {
            hashers.update(chunk);
        }
        offset += chunk.len() as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use sha2::{Digest as _, Sha256};

    use super::*;
    use crate::store::budget::Budget;
    use crate::store::ContentStore;

    /// A body's batches past the first 64 KiB are written on the blocking
    /// pool while the fill goes on, one behind the other: once a batch is
    /// started, the one before is in the file, and once finished, every
    /// byte is, with the hashes of them all: a body of a MiB or more hashed
    /// on the side thread, a smaller one by the writes themselves.
    #[tokio::test]
    async fn a_started_batch_has_the_one_before_it_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = ContentStore::open(dir.path(), Arc::new(Budget::new(u64::MAX))).unwrap();
        let size = 256 * 1024;
        for batches in [4u8, 2] {
            let temp = Arc::new(store.create_temp().unwrap());
            let file = temp.reader();
            let batch = |i: u8| {
                vec![
                    Bytes::from(vec![i; 200 * 1024]),
                    Bytes::from(vec![i; 56 * 1024]),
                ]
            };
            let announced = u64::from(batches) * size;
            let mut body = BodyWriter::new(temp.clone(), Hashers::new(None), Some(announced));
            assert_eq!(body.side.is_some(), announced >= SIDE_FROM);
            let mut whole = Vec::new();
            for i in 0..batches {
                assert!(body.goes_to_pool(size));
                body.start(batch(i), size).await.unwrap();
                assert!(body.pending.is_some(), "not waited for");
                whole.extend(batch(i).concat());
                if i > 0 {
                    let mut before = vec![0; size as usize];
                    file.read_exact_at(&mut before, u64::from(i - 1) * size)
                        .unwrap();
                    assert!(
                        before.iter().all(|&b| b == i - 1),
                        "batch {} is written",
                        i - 1
                    );
                }
            }
            let (sha256, _) = body.finish().await.unwrap().finish();
            let mut written = vec![0; whole.len()];
            file.read_exact_at(&mut written, 0).unwrap();
            assert_eq!(written, whole);
            assert_eq!(sha256, <[u8; 32]>::from(Sha256::digest(&whole)));
        }
    }
}
