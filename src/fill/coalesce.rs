//! Coalescing the upstream body's chunks: the fill takes every chunk that
//! has already arrived (up to [`BATCH_BYTES`]) before it hops to the
//! blocking pool to write and hash them, so a body that arrives in many small
//! chunks costs one hop and one wake-up of its readers per batch, not per
//! chunk. A chunk that has not arrived yet is never waited for here.

use bytes::Bytes;
use futures_util::FutureExt;

/// The most body bytes taken into one write-and-hash step (the first chunk
/// alone may be larger).
pub(super) const BATCH_BYTES: usize = 256 * 1024;

/// The chunks taken, and how the body went on after them.
pub(super) struct Batch {
    pub chunks: Vec<Bytes>,
    pub len: u64,
    /// What the body said after these chunks, if it said it already:
    /// `Ok(None)` (it ended) or an error, as `Response::chunk` says them;
    /// `None`: more may come.
    pub end: Option<Result<Option<Bytes>, reqwest::Error>>,
}

/// `first`, then the chunks `response` already holds, without waiting.
/// `reqwest::Response::chunk` is cancel-safe: a poll that finds nothing
/// ready loses nothing when its future is dropped.
pub(super) fn take_ready(response: &mut reqwest::Response, first: Bytes) -> Batch {
    let mut batch = Batch {
        len: first.len() as u64,
        chunks: vec![first],
        end: None,
    };
    while batch.len < BATCH_BYTES as u64 {
        match response.chunk().now_or_never() {
            Some(Ok(Some(chunk))) => {
                batch.len += chunk.len() as u64;
                batch.chunks.push(chunk);
            }
            Some(end) => {
                batch.end = Some(end);
                break;
            }
            // Nothing more has arrived: write what is here now.
            None => break,
        }
    }
    batch
}
