//! The order in which a miss tries mirrors: a fixed-capacity permutation of
//! mirror indexes, and the [`Selection`] trait every strategy implements.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{Mirror, MAX_MIRRORS};

/// The next number of a per-thread counter, for rotating ties. Threads start
/// at different numbers; unlike a shared cursor, it costs no cache-line
/// traffic between cores, so selecting from many threads at once stays as
/// cheap as from one.
#[inline]
pub(super) fn next_turn() -> usize {
    static NEXT_THREAD_START: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static TURN: Cell<Option<usize>> = const { Cell::new(None) };
    }
    TURN.with(|turn| {
        let current = turn
            .get()
            .unwrap_or_else(|| NEXT_THREAD_START.fetch_add(1, Ordering::Relaxed));
        turn.set(Some(current.wrapping_add(1)));
        current
    })
}

/// The order in which mirrors are tried, by index into the remote's list.
/// Fixed capacity ([`MAX_MIRRORS`]), so building one never allocates.
#[derive(Clone, Copy, Debug)]
pub struct AttemptOrder {
    idx: [u8; MAX_MIRRORS],
    len: u8,
    pos: u8,
}

impl AttemptOrder {
    /// `start, start+1, …` wrapping around `n` mirrors.
    #[inline]
    pub fn rotated(n: usize, start: usize) -> AttemptOrder {
        debug_assert!(n <= MAX_MIRRORS && (n == 0 || start < n));
        // All sixteen slots, without a branch per slot, so that the compiler
        // can build the whole array in one vector register; slots past `n`
        // hold junk that nothing reads.
        let (n_u8, start_u8) = (n as u8, start as u8);
        let mut idx = [0u8; MAX_MIRRORS];
        for (k, slot) in idx.iter_mut().enumerate() {
            let i = start_u8.wrapping_add(k as u8);
            *slot = if i >= n_u8 { i.wrapping_sub(n_u8) } else { i };
        }
        AttemptOrder {
            idx,
            len: n_u8,
            pos: 0,
        }
    }

    /// The remaining indices, in order.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.idx[self.pos as usize..self.len as usize]
    }

    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.idx[self.pos as usize..self.len as usize]
    }
}

impl Iterator for AttemptOrder {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.pos < self.len {
            let i = self.idx[self.pos as usize];
            self.pos += 1;
            Some(i as usize)
        } else {
            None
        }
    }
}

/// A selection strategy: given the remote's mirrors, the order to try them in.
///
/// Contract: the order holds every mirror index exactly once (failover may
/// reach all of them); it must not allocate or block.
pub trait Selection {
    fn order(&self, mirrors: &[Arc<Mirror>]) -> AttemptOrder;
}

impl AttemptOrder {
    /// Keeps only the mirrors `accept` takes, in order, unless it takes none:
    /// then every mirror stays (a remote whose mirrors are all ejected still
    /// tries them rather than failing without a request).
    #[inline]
    pub fn retain_or_keep_all(&mut self, accept: impl Fn(usize) -> bool) {
        let mut kept = [0u8; MAX_MIRRORS];
        let mut n_kept = 0;
        for &i in self.as_slice() {
            // Written unconditionally, kept only if accepted: no branch per mirror.
            kept[n_kept] = i;
            n_kept += usize::from(accept(i as usize));
        }
        // Rewritten only when some but not all were refused; when nothing is
        // refused (the usual case) the compiler can drop the copy entirely.
        if n_kept > 0 && n_kept < self.as_slice().len() {
            self.idx = kept;
            self.len = n_kept as u8;
            self.pos = 0;
        }
    }

    /// `0, 1, …, n-1`: list order, with nothing to compute.
    #[inline]
    /// Sorts the order by `score[mirror]`, lowest first, stably: mirrors
    /// with equal scores keep the rotation the order started with, so ties
    /// take turns. An insertion sort: at most 16 mirrors, no allocation.
    pub fn sort_by_score<T: PartialOrd>(&mut self, score: &[T]) {
        let idx = self.as_mut_slice();
        for i in 1..idx.len() {
            let mut j = i;
            while j > 0 && score[idx[j - 1] as usize] > score[idx[j] as usize] {
                idx.swap(j - 1, j);
                j -= 1;
            }
        }
    }

    pub fn list_order(n: usize) -> AttemptOrder {
        debug_assert!(n <= MAX_MIRRORS);
        const LIST_ORDER: [u8; MAX_MIRRORS] =
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
        AttemptOrder {
            idx: LIST_ORDER,
            len: n as u8,
            pos: 0,
        }
    }
}
