//! Password checks on a pool of their own: a few threads (about the core
//! count) run bcrypt, fed by a bounded queue. bcrypt costs tens of
//! milliseconds by design; on tokio's blocking pool a burst of wrong
//! passwords would take threads that store I/O and document rewrites need.
//! A check that finds the queue full is refused at once (429), not queued
//! without bound.

use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// Checks waiting for a thread at most; more are refused.
const QUEUE: usize = 64;

type Job = Box<dyn FnOnce() + Send>;

/// The queue is full: the check was not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

pub struct BcryptPool {
    jobs: SyncSender<Job>,
}

impl BcryptPool {
    /// Starts the threads; they end when the pool is dropped.
    pub fn new() -> BcryptPool {
        // One core is left to the server where there are few.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = cores.saturating_sub(1).clamp(1, 8);
        let (jobs, queue) = mpsc::sync_channel::<Job>(QUEUE);
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..workers {
            let queue = queue.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("bcrypt-{i}"))
                .spawn(move || loop {
                    // A std mutex: held while waiting for the next job, by
                    // one idle thread at a time, never across an await.
                    let job = queue.lock().expect("bcrypt queue poisoned").recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                });
            if let Err(error) = spawned {
                tracing::warn!(%error, "could not start a bcrypt thread");
            }
        }
        BcryptPool { jobs }
    }

    /// Whether `password` matches the bcrypt `hash`, checked on the pool.
    pub async fn verify(&self, password: String, hash: Arc<str>) -> Result<bool, Busy> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let matches = bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false);
            let _ = answer.send(matches);
        });
        match self.jobs.try_send(job) {
            Ok(()) => answered.await.map_err(|_| Busy),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => Err(Busy),
        }
    }
}

impl Default for BcryptPool {
    fn default() -> Self {
        BcryptPool::new()
    }
}
