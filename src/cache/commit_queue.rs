//! The group commit's queue: a fill takes a [`CommitSlot`] before its
//! readers see the end of the body, hands its [`FillBody`] over with it and
//! waits on [`Committing`] until its blob and row are durable (see
//! [`super::commit`]).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::error::ProxyError;
use crate::meta::{Entry, Pin, Ticket};
use crate::path::ArtifactPath;
use crate::store::TempBlob;

/// A fill's complete, hashed body as handed to the committer.
pub enum FillBody {
    /// Written into its temp file.
    Temp(TempBlob),
    /// A small body that came whole (64 KiB or less), kept in memory during
    /// the fill (no file was made for it on the request's path): the
    /// committer writes its temp file ([`crate::cache::Cache::spool`]).
    Memory(bytes::Bytes),
}

/// One commit waiting in the queue (its body a [`FillBody`]), or in a
/// batch once its temp file is written (its body a [`TempBlob`]).
pub(crate) struct Pending<B = FillBody> {
    pub(crate) body: B,
    pub(crate) path: ArtifactPath,
    pub(crate) entry: Entry,
    /// When the fill began: a purge of the key since then leaves no row.
    pub(crate) ticket: Ticket,
    pub(crate) pin: Option<Pin>,
    pub(crate) done: oneshot::Sender<Answer>,
}

/// The entry committed; `None` when a purge of its key came after the fill
/// began (nothing is left of it).
pub(crate) type Answer = Result<Option<Arc<Entry>>, ProxyError>;

/// A place in the commit queue, taken before the fill lets its readers see
/// the end of the body.
pub struct CommitSlot {
    pub(super) permit: mpsc::OwnedPermit<Pending>,
    pub(super) queued: Queued,
}

/// One in `commits_queued`, from a place taken until its commit is
/// answered (or the place is dropped unused).
pub(super) struct Queued(pub(super) prometheus_client::metrics::gauge::Gauge);

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A commit handed to the committer; resolves when it is durable (or failed).
pub struct Committing {
    answer: oneshot::Receiver<Answer>,
    _queued: Queued,
}

impl CommitSlot {
    /// Hands the complete, hashed body over: it becomes the entry of
    /// `path` with the next batch, unless a purge of `path` comes after
    /// `ticket` (when the fill began); `pin` is written with its row.
    pub fn send(
        self,
        body: FillBody,
        path: &ArtifactPath,
        (entry, pin): (Entry, Option<Pin>),
        ticket: Ticket,
    ) -> Committing {
        let (done, answer) = oneshot::channel();
        let CommitSlot { permit, queued } = self;
        permit.send(Pending {
            body,
            path: path.clone(),
            entry,
            ticket,
            pin,
            done,
        });
        Committing {
            answer,
            _queued: queued,
        }
    }
}

impl Committing {
    /// The committed entry once durable; `None` if purged.
    pub async fn durable(self) -> Answer {
        self.answer
            .await
            .unwrap_or_else(|_| Err(ProxyError::Store("the committer stopped".into())))
    }
}

/// The queue's sending side, owned by the [`crate::cache::Cache`].
pub(crate) type Queue = mpsc::Sender<Pending>;

pub(crate) fn queue(capacity: usize) -> (Queue, mpsc::Receiver<Pending>) {
    mpsc::channel(capacity.max(1))
}
