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

#[cfg(test)]
mod tests {
    use super::super::tests::{mirrors, DECAY};
    use super::super::{GaugeRegistry, Selection, Selector};
    use crate::config::Strategy;

    #[test]
    fn round_robin_is_exact() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(3, &gauges);
        let sel = Selector::new(Strategy::RoundRobin, DECAY);
        let mut firsts = [0usize; 3];
        for _ in 0..300 {
            firsts[sel.order(&ms).next().unwrap()] += 1;
        }
        assert_eq!(firsts, [100, 100, 100]);
    }
}
