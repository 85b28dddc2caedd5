//! A batch's bodies as files: the group commit (`super::commit`) is handed
//! each fill's body as its temp file, or, for a small body that came whole
//! within its first 64 KiB, as the bytes the fill kept in memory (at most
//! the queue's and one batch's worth: `max_fills` + `MAX_BATCH` bodies of
//! 64 KiB); the committer writes
//! those into temp files of their own before the batch's blobs are made
//! durable, so no file is made for them on the request's path.

use super::commit::Pending;
use super::{Cache, ContentStore, TempBlob};
use crate::error::ProxyError;

/// A fill's complete, hashed body as handed to the committer.
pub enum FillBody {
    /// Written into its temp file.
    Temp(TempBlob),
    /// A small body that came whole (64 KiB or less), kept in memory during
    /// the fill (no file was made for it on the request's path): the
    /// committer writes its temp file ([`Cache::spool`]).
    Memory(bytes::Bytes),
}

impl<B> Pending<B> {
    /// The body, and the rest of the commit waiting for another.
    fn take_body(self) -> (B, Pending<()>) {
        let rest = Pending {
            body: (),
            path: self.path,
            entry: self.entry,
            ticket: self.ticket,
            pin: self.pin,
            done: self.done,
        };
        (self.body, rest)
    }
}

impl Pending<()> {
    fn with_body<B>(self, body: B) -> Pending<B> {
        Pending {
            body,
            path: self.path,
            entry: self.entry,
            ticket: self.ticket,
            pin: self.pin,
            done: self.done,
        }
    }
}

impl Cache {
    /// The temp file of each body of a batch: a body kept in memory is
    /// written into one now, all of the batch's in one hop (counted
    /// against `storage.max_size` as a fill's temp file is). A body that
    /// cannot be written is answered with the error (its client had its
    /// bytes: it is served uncached) and leaves the batch.
    pub(super) async fn spool(&self, batch: Vec<Pending>) -> Vec<Pending<TempBlob>> {
        let write = |store: &ContentStore, pending: Pending| {
            let (body, pending) = pending.take_body();
            let temp = match body {
                FillBody::Temp(temp) => Ok(temp),
                FillBody::Memory(bytes) => store.create_temp_holding(&bytes),
            };
            (temp, pending)
        };
        let in_memory = batch.iter().any(|p| matches!(p.body, FillBody::Memory(_)));
        let written: Vec<_> = if in_memory {
            let store = self.store.clone();
            let handle = tokio::task::spawn_blocking(move || {
                batch
                    .into_iter()
                    .map(|pending| write(&store, pending))
                    .collect::<Vec<_>>()
            });
            // If the thread panicked, its bodies' fills are answered by
            // their dropped senders (the committer stopped).
            handle.await.unwrap_or_default()
        } else {
            batch
                .into_iter()
                .map(|pending| write(&self.store, pending))
                .collect()
        };
        let mut spooled = Vec::with_capacity(written.len());
        for (temp, pending) in written {
            match temp {
                Ok(temp) => spooled.push(pending.with_body(temp)),
                Err(error) => {
                    let error = format!("writing the blob: {error}");
                    tracing::warn!(key = pending.path.key(), %error, "could not commit; served uncached");
                    let _ = pending.done.send(Err(ProxyError::Store(error)));
                }
            }
        }
        spooled
    }
}
