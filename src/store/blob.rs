//! [`Blob`]: a committed blob opened for reading, wherever it lives (in
//! memory, a local file, an S3 object), streamed a chunk at a time.

use std::fs::File;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore};

use super::content;
use super::content::pack::Place;

/// Bytes read from a local blob at a time: large enough that a 1 MiB hit is
/// four reads, small enough that 64 connections in flight stay within the
/// memory target.
const FILE_CHUNK: usize = 256 * 1024;

/// A committed blob, opened for reading.
pub enum Blob {
    /// A small hot blob, held in memory (see [`HotBlobs`]).
    Memory(Bytes),
    /// An open file: positional reads, and it survives deletion of its path.
    Local(Arc<File>),
    /// A blob checked at an earlier open, less than a minute before (see
    /// `super::held`), where the reader checks: its own file, held open
    /// since (`start` 0), or its range of an open pack. Read as
    /// [`Blob::Packed`] is.
    Held { file: Arc<File>, start: u64 },
    /// A range of an open pack, at `place` (see `super::pack`): read as a
    /// local file is, offset.
    Packed { file: Arc<File>, place: Place },
    Remote {
        store: Arc<dyn ObjectStore>,
        location: ObjectPath,
    },
}

impl Blob {
    /// `len` bytes from `start`, streamed: one chunk in memory at a time.
    pub fn stream(&self, start: u64, len: u64) -> BoxStream<'static, io::Result<Bytes>> {
        match self {
            Blob::Memory(bytes) => {
                let part = bytes.slice(start as usize..(start + len) as usize);
                futures_util::stream::once(async move { Ok(part) }).boxed()
            }
            Blob::Local(file) => local_stream(file.clone(), start, len),
            Blob::Packed { file, place } => local_stream(file.clone(), place.start + start, len),
            Blob::Held { file, start: at } => local_stream(file.clone(), at + start, len),
            Blob::Remote { store, location } => {
                if len == 0 {
                    return futures_util::stream::empty().boxed();
                }
                let (store, location) = (store.clone(), location.clone());
                futures_util::stream::once(async move {
                    let options = GetOptions {
                        range: Some(GetRange::Bounded(start..start + len)),
                        ..GetOptions::default()
                    };
                    let result = store
                        .get_opts(&location, options)
                        .await
                        .map_err(io::Error::other)?;
                    Ok::<_, io::Error>(result.into_stream().map_err(io::Error::other))
                })
                .try_flatten()
                .boxed()
            }
        }
    }

    /// The whole blob in memory (index documents, capped by the caller).
    pub async fn read_all(&self, size: u64) -> io::Result<Vec<u8>> {
        self.read_whole(size).await.map(Vec::from)
    }

    /// [`Blob::read_all`] as one buffer a body can share.
    pub async fn read_whole(&self, size: u64) -> io::Result<Bytes> {
        match self {
            Blob::Memory(bytes) => Ok(bytes.clone()),
            Blob::Local(file) => read_local(file.clone(), 0, size).await,
            Blob::Packed { file, place } => read_local(file.clone(), place.start, size).await,
            Blob::Held { file, start } => read_local(file.clone(), *start, size).await,
            Blob::Remote { .. } => {
                let mut out = Vec::with_capacity(size as usize);
                let mut stream = self.stream(0, size);
                while let Some(chunk) = stream.next().await {
                    out.extend_from_slice(&chunk?);
                }
                Ok(out.into())
            }
        }
    }
}

/// `size` bytes of a local file from `start`: on this thread when the
/// page cache holds them all (no hop), else on the blocking pool.
async fn read_local(file: Arc<File>, start: u64, size: u64) -> io::Result<Bytes> {
    if let Some(bytes) = content::read_cached_at(&file, start, size as usize)? {
        if bytes.len() as u64 == size {
            return Ok(bytes);
        }
    }
    tokio::task::spawn_blocking(move || content::read_at(&file, start, size as usize))
        .await
        .map_err(io::Error::other)?
}

pub(super) fn local_stream(
    file: Arc<File>,
    start: u64,
    len: u64,
) -> BoxStream<'static, io::Result<Bytes>> {
    let end = start + len;
    futures_util::stream::try_unfold(start, move |pos| {
        let file = file.clone();
        async move {
            if pos >= end {
                return Ok(None);
            }
            let n = (end - pos).min(FILE_CHUNK as u64) as usize;
            // From the page cache on this thread when it is there (no hop);
            // from the disk on the blocking pool otherwise.
            let bytes = match content::read_cached_at(&file, pos, n)? {
                Some(bytes) => bytes,
                None => tokio::task::spawn_blocking(move || content::read_at(&file, pos, n))
                    .await
                    .map_err(io::Error::other)??,
            };
            let next = pos + bytes.len() as u64;
            Ok(Some((bytes, next)))
        }
    })
    .boxed()
}
