//! The group commit's queue ([`Commits`]): a fill takes a [`CommitSlot`] before its
//! readers see the end of the body, hands its [`FillBody`] over with it and
//! waits on [`Committing`] until its blob and row are durable (see
//! [`super::commit`]).

use std::sync::Arc;
use std::thread::ThreadId;

use std::collections::HashMap;

use prometheus_client::metrics::gauge::Gauge;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, Mutex, Notify};

use crate::error::ProxyError;
use crate::meta::{Entry, Pin, Ticket};
use crate::metrics::Metrics;
use crate::path::ArtifactPath;
use crate::store::{Digest, TempBlob};

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
    pub(crate) done: Reply,
    /// Its sender waits for it before it sends another (an import): none
    /// of its own will join the batch, so the batch does not wait for
    /// others ([`CommitSlot::urgent`]).
    pub(crate) urgent: bool,
}

/// Where a commit's answer goes: the fill waiting for it, and the thread
/// and runtime it waits on.
pub(crate) struct Reply {
    done: oneshot::Sender<Answer>,
    home: Option<(ThreadId, Handle)>,
}

impl Reply {
    /// Answers a batch's fills: those waiting on one thread together, by a
    /// task spawned on that thread's runtime, where each answer wakes its
    /// fill without a system call (a thread with one such fill, and a fill
    /// waiting on no connection thread, are answered directly). Answered
    /// one by one from the committer's runtime, each fill on a connection
    /// thread was woken with an `eventfd` write of its own.
    pub(crate) fn send_all(replies: impl IntoIterator<Item = (Reply, Answer)>) {
        type Answers = Vec<(oneshot::Sender<Answer>, Answer)>;
        let mut homes: Vec<(ThreadId, Handle, Answers)> = Vec::new();
        for (Reply { done, home }, answer) in replies {
            let Some((thread, runtime)) = home else {
                let _ = done.send(answer);
                continue;
            };
            match homes.iter_mut().find(|(t, ..)| *t == thread) {
                Some((.., answers)) => answers.push((done, answer)),
                None => homes.push((thread, runtime, vec![(done, answer)])),
            }
        }
        fn answer(answers: Answers) {
            for (done, answer) in answers {
                let _ = done.send(answer);
            }
        }
        for (_, runtime, answers) in homes {
            if answers.len() == 1 {
                answer(answers);
            } else {
                runtime.spawn(async move { answer(answers) });
            }
        }
    }
}

/// The entry committed; `None` when a purge of its key came after the fill
/// began (nothing is left of it).
pub(crate) type Answer = Result<Option<Arc<Entry>>, ProxyError>;

/// A place in the commit queue, taken before the fill lets its readers see
/// the end of the body.
pub struct CommitSlot {
    permit: mpsc::OwnedPermit<Pending>,
    queued: Queued,
    crowded: Arc<Notify>,
    urgent: bool,
}

/// One in `commits_queued`, from a place taken until its commit is
/// answered (or the place is dropped unused).
struct Queued(Gauge);

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
    /// For a sender that waits for this commit before it sends another:
    /// its batch is committed once what is queued is taken, without the
    /// delay for others to join (a fill's readers do not wait for its
    /// commit; an import's next row does).
    pub fn urgent(mut self) -> CommitSlot {
        self.urgent = true;
        self
    }

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
        let done = Reply {
            done,
            home: Handle::try_current()
                .ok()
                .map(|runtime| (std::thread::current().id(), runtime)),
        };
        let CommitSlot {
            permit,
            queued,
            crowded,
            urgent,
        } = self;
        let queue = permit.send(Pending {
            body,
            path: path.clone(),
            entry,
            ticket,
            pin,
            done,
            urgent,
        });
        if queue.capacity() == 0 {
            // Every place is taken: the committer takes what is queued now.
            crowded.notify_one();
        }
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

/// The group commit's shared state, held by the [`crate::cache::Cache`]:
/// the queue's sending side, the committer's hold, and the digests between
/// their blob and their row.
pub struct Commits {
    queue: mpsc::Sender<Pending>,
    /// Taken by the committer for each batch (and by a test to hold it).
    pub(crate) hold: Mutex<()>,
    /// Digests whose blobs are durable and whose rows are not written yet
    /// (see [`super::commit`]), with how many batches have each and the
    /// blob's size: changed under the digest's lock; a release keeps such a
    /// blob.
    pub(crate) in_flight: std::sync::Mutex<HashMap<Digest, (usize, u64)>>,
    /// Told when a commit sent leaves no place in the queue, or a fill
    /// finds none: the committer then takes what is queued without waiting
    /// out its batch's delay.
    crowded: Arc<Notify>,
    /// Commits waiting for a place, and places taken.
    waiting: Gauge,
    queued: Gauge,
}

/// The committer's side of the queue.
pub(crate) struct Intake {
    pub(crate) queue: mpsc::Receiver<Pending>,
    /// See [`Commits::crowded`].
    pub(crate) crowded: Arc<Notify>,
}

impl Commits {
    /// A queue with room for `capacity` commits, and its receiving side for
    /// the committer.
    pub(crate) fn new(capacity: usize, metrics: &Metrics) -> (Commits, Intake) {
        let (queue, received) = mpsc::channel(capacity.max(1));
        let crowded = Arc::new(Notify::new());
        let intake = Intake {
            queue: received,
            crowded: crowded.clone(),
        };
        let commits = Commits {
            queue,
            crowded,
            hold: Mutex::new(()),
            in_flight: Default::default(),
            waiting: metrics.commits_waiting.clone(),
            queued: metrics.commits_queued.clone(),
        };
        (commits, intake)
    }

    /// A place in the commit queue: waits while the queue is full.
    pub async fn slot(&self) -> Result<CommitSlot, ProxyError> {
        let queue = self.queue.clone();
        let slot = match queue.clone().try_reserve_owned() {
            Ok(permit) => Ok(permit),
            Err(mpsc::error::TrySendError::Full(_)) => {
                // The last place may be taken by a reservation not sent yet:
                // the committer takes what is queued now, making room.
                self.crowded.notify_one();
                self.waiting.inc();
                let permit = queue.reserve_owned().await;
                self.waiting.dec();
                permit.map_err(|_| ())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        };
        let slot = slot.map_err(|()| ProxyError::Store("the committer stopped".into()))?;
        self.queued.inc();
        Ok(CommitSlot {
            permit: slot,
            queued: Queued(self.queued.clone()),
            crowded: self.crowded.clone(),
            urgent: false,
        })
    }

    /// Holds the committer before its next batch until the guard is
    /// dropped: lets a test see commits wait (and the queue fill up).
    pub async fn hold(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.hold.lock().await
    }

    /// The size of `digest`'s blob if a commit of it is between its blob
    /// and its row (a release then keeps the blob).
    pub(crate) fn in_flight_size(&self, digest: &Digest) -> Option<u64> {
        let committing = self.in_flight.lock().expect("committing poisoned");
        committing.get(digest).map(|(_, size)| *size)
    }
}
