//! Writing and hashing a fill's body as it arrives, where it costs least: a
//! small body (announced as a few KiB, the common cold miss) on the fill's
//! own thread, since the hop to the blocking pool and back costs more than
//! the work; a larger one on the blocking pool, a batch of chunks a hop.
//! For a large body whose declared digest is not the sha256 (npm's sha512),
//! the declared function runs on a thread of its own, beside the write and
//! the sha256 rather than after them.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::cache::TempBlob;
use crate::error::ProxyError;
use crate::kind::declared::{Hashers, Side};

/// The largest body written and hashed on the fill's thread: tens of
/// microseconds of sha256 (and a write into the page cache), less than the
/// hop. A larger one stays on the blocking pool, batch by batch, so its
/// hashing runs beside its readers' sends on the async threads.
const INLINE_BYTES: u64 = 64 * 1024;
/// Whether a body announced as `announced` bytes is written (and its temp
/// file created) on the fill's own thread.
pub(super) fn is_inline(announced: Option<u64>) -> bool {
    announced.is_some_and(|len| len <= INLINE_BYTES)
}

/// Bodies from this size (or of unknown length) hash their declared
/// function on a thread of its own; smaller ones are done before a thread
/// would have started.
const SIDE_FROM: u64 = 1024 * 1024;
/// Batches queued for the side thread: when it falls behind, the download
/// waits (memory stays at this many batches).
const SIDE_QUEUE: usize = 8;

/// A fill's temp file and the hashes of what was written to it.
pub(super) struct BodyWriter {
    temp: Arc<TempBlob>,
    /// `None` only while a batch is on the blocking pool.
    hashers: Option<Hashers>,
    side: Option<SideThread>,
    /// Whether the body is announced as at most [`INLINE_BYTES`].
    inline: bool,
    written: u64,
}

/// The declared function's hasher on a blocking-pool thread, fed batches.
struct SideThread {
    batches: mpsc::Sender<Vec<Bytes>>,
    done: tokio::task::JoinHandle<Side>,
}

impl BodyWriter {
    /// Writes into `temp` from offset 0; `announced` is the body's
    /// `Content-Length`, if the mirror gave one.
    pub(super) fn new(
        temp: Arc<TempBlob>,
        mut hashers: Hashers,
        announced: Option<u64>,
    ) -> BodyWriter {
        let large = announced.is_none_or(|len| len >= SIDE_FROM);
        let side = large.then(|| hashers.detach()).flatten().map(|mut side| {
            let (batches, mut queue) = mpsc::channel::<Vec<Bytes>>(SIDE_QUEUE);
            let done = tokio::task::spawn_blocking(move || {
                while let Some(batch) = queue.blocking_recv() {
                    for chunk in &batch {
                        side.update(chunk);
                    }
                }
                side
            });
            SideThread { batches, done }
        });
        BodyWriter {
            temp,
            hashers: Some(hashers),
            side,
            inline: is_inline(announced),
            written: 0,
        }
    }

    /// Appends `chunks` (`len` bytes in all), hashed.
    pub(super) async fn write(&mut self, chunks: Vec<Bytes>, len: u64) -> Result<(), ProxyError> {
        if let Some(side) = &self.side {
            side.batches
                .send(chunks.clone())
                .await
                .map_err(|_| ProxyError::Store("the hashing thread stopped".into()))?;
        }
        let mut hashers = self.hashers.take().expect("one batch at a time");
        let offset = self.written;
        let hashers = if self.inline && offset + len <= INLINE_BYTES {
            write_and_hash(&self.temp, &chunks, offset, &mut hashers).map(|()| hashers)
        } else {
            let temp = self.temp.clone();
            tokio::task::spawn_blocking(move || {
                write_and_hash(&temp, &chunks, offset, &mut hashers).map(|()| hashers)
            })
            .await
            .map_err(|e| ProxyError::Store(e.to_string()))?
        };
        self.hashers = Some(hashers.map_err(|e| ProxyError::Store(e.to_string()))?);
        self.written += len;
        Ok(())
    }

    /// The hashes of every byte written.
    pub(super) async fn finish(mut self) -> Result<Hashers, ProxyError> {
        let mut hashers = self.hashers.take().expect("no batch in flight");
        if let Some(SideThread { batches, done }) = self.side.take() {
            drop(batches);
            let side = done.await.map_err(|e| ProxyError::Store(e.to_string()))?;
            hashers.attach(side);
        }
        Ok(hashers)
    }
}

fn write_and_hash(
    temp: &TempBlob,
    chunks: &[Bytes],
    mut offset: u64,
    hashers: &mut Hashers,
) -> io::Result<()> {
    for chunk in chunks {
        temp.write_at(chunk, offset)?;
        hashers.update(chunk);
        offset += chunk.len() as u64;
    }
    Ok(())
}
