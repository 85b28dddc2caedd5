//! [`Evictor`]: what eviction rounds share (the budget they read, one round
//! at a time); the rounds themselves are [`super::evict`]'s.

use std::sync::Arc;

use tokio::sync::Mutex;

use crate::store::Budget;

pub struct Evictor {
    pub(super) budget: Arc<Budget>,
    /// One round at a time (the background task's and any caller's): two
    /// rounds side by side would each free down to the low-water mark.
    pub(super) round: Mutex<()>,
}

impl Evictor {
    pub fn new(budget: Arc<Budget>) -> Evictor {
        Evictor {
            budget,
            round: Mutex::new(()),
        }
    }

    /// `storage.max_size`.
    pub fn max_size(&self) -> u64 {
        self.budget.max()
    }

    /// Holds off eviction rounds, and with them the background flush of
    /// access times, until the guard is dropped (a round waits for it): lets
    /// a test count the database writes of a stretch of requests.
    pub async fn hold_rounds(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.round.lock().await
    }

    /// Wakes the evictor if committed plus in-progress bytes are over the
    /// limit. (Commits and reservations already do this.)
    pub fn wake_if_over(&self) {
        self.budget.wake_if_over();
    }
}
