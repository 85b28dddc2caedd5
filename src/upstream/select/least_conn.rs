//! `least_conn`: the mirror with the fewest requests in flight first.
//!
//! Each gauge is read once into a stack snapshot, then the order is sorted by
//! it (insertion sort: at most 16 entries). The sort is stable over an order
//! that starts at a rotating turn, so equally loaded mirrors take turns
//! instead of the first one in the list taking every tie. The turn is
//! per thread ([`next_turn`]): a shared cursor would be one more cache line
//! bouncing between cores on every miss, for ties that need no exact count.

use std::sync::Arc;

use super::{next_turn, AttemptOrder, Mirror, Selection, MAX_MIRRORS};

#[derive(Debug, Default)]
pub struct LeastConn;

impl Selection for LeastConn {
    #[inline]
    fn order(&self, mirrors: &[Arc<Mirror>]) -> AttemptOrder {
        let n = mirrors.len();
        if n <= 1 {
            return AttemptOrder::rotated(n, 0);
        }
        let mut loads = [0usize; MAX_MIRRORS];
        for (load, mirror) in loads.iter_mut().zip(mirrors) {
            *load = mirror.in_flight();
        }
        let start = next_turn() % n;
        let mut order = AttemptOrder::rotated(n, start);
        order.sort_by_score(&loads);
        order
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{mirrors, DECAY};
    use super::super::{GaugeRegistry, Selection, Selector};
    use crate::config::Strategy;

    #[test]
    fn least_conn_picks_least_loaded_and_rotates_ties() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(3, &gauges);
        let _busy0 = [ms[0].begin_attempt(), ms[0].begin_attempt()];
        let _busy2 = ms[2].begin_attempt();
        let sel = Selector::new(Strategy::LeastConn, DECAY);
        assert_eq!(sel.order(&ms).collect::<Vec<_>>(), vec![1, 2, 0]);
        drop(_busy2);
        let _busy1 = ms[1].begin_attempt();
        // 1 and 2... now 2 is idle: it comes first, then 1, then 0.
        assert_eq!(sel.order(&ms).collect::<Vec<_>>(), vec![2, 1, 0]);
        // Ties rotate: with equal loads, successive calls start at different mirrors.
        let idle = mirrors(4, &GaugeRegistry::default());
        let firsts: std::collections::HashSet<usize> =
            (0..4).map(|_| sel.order(&idle).next().unwrap()).collect();
        assert_eq!(firsts.len(), 4);
    }
}
