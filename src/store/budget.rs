//! The store's size against `storage.max_size`: bytes of committed blobs plus
//! bytes of fills in progress, and the wake-up the evictor waits on.
//!
//! The committed count is a copy of one source of truth, the metadata
//! database (the sum of the sizes of the distinct digests its rows
//! reference, `MetadataStore::stored_bytes` in `crate::meta`, which the
//! entry index keeps as a running sum where its counts are the rows'): it
//! is re-derived at start-up and by every eviction round, and in between
//! moved by exactly the
//! changes this instance makes while it holds the digest's lock (a digest's
//! first row adds its size, the deletion of its blob subtracts it), so two
//! commits of one digest count it once and nothing can wrap below zero.
//! In-progress bytes are the temp files' reservations
//! ([`super::content::TempBlob`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

pub struct Budget {
    max: u64,
    committed: AtomicU64,
    in_progress: AtomicU64,
    /// Shared so the evictor's task can wait without keeping the cache alive.
    wake: Arc<Notify>,
}

impl Budget {
    pub fn new(max: u64) -> Budget {
        Budget {
            max,
            committed: AtomicU64::new(0),
            in_progress: AtomicU64::new(0),
            wake: Arc::new(Notify::new()),
        }
    }

    /// `storage.max_size`.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Bytes of committed blobs.
    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    /// Bytes reserved or written by fills in progress.
    pub fn in_progress(&self) -> u64 {
        self.in_progress.load(Ordering::Relaxed)
    }

    /// What the store holds or is about to: committed plus in progress.
    pub fn total(&self) -> u64 {
        self.committed().saturating_add(self.in_progress())
    }

    /// Takes `len` bytes for a new fill, unless fills in progress would then
    /// hold more than `max` (evicting every committed blob would not make
    /// room). Wakes the evictor when committed plus in-progress bytes are
    /// over `max`.
    pub fn reserve(&self, len: u64) -> bool {
        let taken = self
            .in_progress
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                now.checked_add(len).filter(|&after| after <= self.max)
            })
            .is_ok();
        if taken {
            self.wake_if_over();
        }
        taken
    }

    /// Counts `len` more bytes of a fill in progress (a body without
    /// `Content-Length` grows past its reservation), whatever the limit.
    pub fn grow(&self, len: u64) {
        self.in_progress.fetch_add(len, Ordering::Relaxed);
        self.wake_if_over();
    }

    /// Gives back a fill's bytes (committed or abandoned).
    pub(crate) fn unreserve(&self, len: u64) {
        sub(&self.in_progress, len);
    }

    pub(crate) fn add_committed(&self, len: u64) {
        self.committed.fetch_add(len, Ordering::Relaxed);
        self.wake_if_over();
    }

    pub(crate) fn sub_committed(&self, len: u64) {
        sub(&self.committed, len);
    }

    pub(crate) fn set_committed(&self, len: u64) {
        self.committed.store(len, Ordering::Relaxed);
    }

    /// Wakes the evictor if the store has outgrown its limit.
    pub fn wake_if_over(&self) {
        if self.total() > self.max {
            self.wake.notify_one();
        }
    }

    pub(crate) fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }
}

/// Subtracts without wrapping below zero.
fn sub(counter: &AtomicU64, len: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
        Some(now.saturating_sub(len))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_in_progress_may_not_take_more_than_max() {
        let budget = Budget::new(100);
        assert!(budget.reserve(60));
        assert!(!budget.reserve(50));
        assert!(budget.reserve(40));
        budget.unreserve(60);
        assert!(budget.reserve(50));
        budget.unreserve(1000);
        assert_eq!(budget.in_progress(), 0);
        budget.sub_committed(5);
        assert_eq!(budget.committed(), 0);
    }
}
