//! `round_robin`: an atomic cursor picks the first mirror; the rest follow in
//! list order as fallbacks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{AttemptOrder, Mirror, Selection};

#[derive(Debug, Default)]
pub struct RoundRobin {
    cursor: AtomicUsize,
}

impl Selection for RoundRobin {
    #[inline]
    fn order(&self, mirrors: &[Arc<Mirror>]) -> AttemptOrder {
        let n = mirrors.len();
        if n == 0 {
            return AttemptOrder::rotated(0, 0);
        }
        // Relaxed: the cursor orders nothing else; it only has to spread.
        let start = self.cursor.fetch_add(1, Ordering::Relaxed) % n;
        AttemptOrder::rotated(n, start)
    }
}
