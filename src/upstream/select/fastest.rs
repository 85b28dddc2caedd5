//! `fastest`: the mirror expected to send its first byte soonest goes first.
//!
//! Each mirror's score is its first-byte latency estimate (a peak-sensitive
//! EWMA, see [`super::peak_ewma`]) times `1 + in_flight / sustained`: the
//! wait a new request can expect if the mirror serves `sustained` requests
//! at once at the speed it has shown (`sustained` is the concurrency it has
//! been seen to answer without slowing down, 1 until seen; see
//! [`super::MirrorGauges`]). Charging every queued request a full
//! latency (`sustained` = 1) sent 7 % of the fetches of a 2/20/80 ms mix to
//! the 20 ms mirror whenever a few were in flight on the 2 ms one, though
//! it answered them all in 2 ms (BENCHMARKS.md). Every mirror is scored and the order is all of them by score,
//! so a slow mirror loses traffic without being ejected and stays in the order
//! as a fallback. It gets traffic again when the fast ones are busy enough
//! (their scores grow with their load) or when its estimate has faded (the
//! estimate decays toward zero while nobody observes it), and that request
//! shows whether it has recovered.
//!
//! Why every mirror and not two picked at random (power of two choices, as in
//! linkerd): two random choices exist to pick in O(1) among hundreds of
//! endpoints and to keep many balancers with stale load data from piling onto
//! the same one. Here a remote has at most 16 mirrors and the in-flight gauges
//! are live, so scoring all of them costs tens of nanoseconds; and with three
//! mirrors two random choices leave the best one out of a third of the draws,
//! sending a third of the misses to the two slow mirrors whatever their scores
//! (measured in BENCHMARKS.md).
//!
//! Estimates are compared as of the newest update among the pool's mirrors,
//! not as of the clock: fading multiplies every estimate by the same factor
//! from then to now, which changes no comparison, and reading the clock would
//! cost more than the rest of the selection.
//!
//! A mirror never observed is scored at the average estimate of those that
//! were: high enough that a burst does not pile onto the unknown mirror before
//! its first answer, low enough that it is tried. With no estimates at all,
//! every mirror scores the same floor and the load alone decides (least_conn).

use std::sync::Arc;

use super::{next_turn, AttemptOrder, DecayWindow, LastEstimate, Mirror, Selection, MAX_MIRRORS};

/// The least latency a score uses, in nanoseconds (100 µs). An estimate that
/// has faded below it (a mirror not heard from for many windows while others
/// were) counts as this much, so the in-flight factor still separates mirrors
/// whose estimates have all faded. It is below any first-byte time across a
/// real network, so it never hides a difference between mirrors in use.
const LATENCY_FLOOR_NANOS: f64 = 100_000.0;

#[derive(Debug)]
pub struct Fastest {
    decay: DecayWindow,
}

impl Fastest {
    pub fn new(decay: DecayWindow) -> Fastest {
        Fastest { decay }
    }
}

impl Selection for Fastest {
    #[inline]
    fn order(&self, mirrors: &[Arc<Mirror>]) -> AttemptOrder {
        let n_mirrors = mirrors.len();
        if n_mirrors <= 1 {
            return AttemptOrder::rotated(n_mirrors, 0);
        }
        let mut last = [LastEstimate::default(); MAX_MIRRORS];
        let mut newest_update = 0;
        for (last, mirror) in last.iter_mut().zip(mirrors) {
            *last = mirror.last_first_byte();
            newest_update = newest_update.max(last.updated_at);
        }
        let mut latency = [0f64; MAX_MIRRORS];
        let mut known_sum = 0.0;
        let mut n_known = 0u32;
        for (latency, last) in latency.iter_mut().zip(&last[..n_mirrors]) {
            *latency = last.faded_to(newest_update, self.decay);
            known_sum += *latency;
            n_known += u32::from(*latency > 0.0);
        }
        let never_observed = if n_known > 0 {
            known_sum / f64::from(n_known)
        } else {
            LATENCY_FLOOR_NANOS
        };
        let mut score = [0f64; MAX_MIRRORS];
        for ((score, &latency), mirror) in score.iter_mut().zip(&latency).zip(mirrors) {
            let latency = if latency > 0.0 {
                latency
            } else {
                never_observed
            };
            // Requests in flight cost a full latency each only beyond the
            // concurrency the mirror has been seen to sustain.
            let queued = mirror.in_flight() as f64 / mirror.sustained() as f64;
            *score = latency.max(LATENCY_FLOOR_NANOS) * (1.0 + queued);
        }
        // A stable sort over an order that starts at a per-thread turn: equal
        // scores (idle mirrors with faded estimates) take turns.
        let mut order = AttemptOrder::rotated(n_mirrors, next_turn() % n_mirrors);
        order.sort_by_score(&score);
        order
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{mirrors, observe_at, DECAY, SECOND};
    use super::super::GaugeRegistry;
    use super::*;

    #[test]
    fn fastest_orders_by_latency_times_load() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(3, &gauges);
        let now = 5 * SECOND;
        for (mirror, millis) in ms.iter().zip([2, 20, 80]) {
            observe_at(mirror, millis, now);
        }
        let fastest = Fastest::new(DecayWindow::new(DECAY));
        assert_eq!(fastest.order(&ms).collect::<Vec<_>>(), vec![0, 1, 2]);
        // Ten in flight on the 2 ms mirror: 2 × 11 = 22 > 20 × 1, so the
        // 20 ms mirror takes the next request; 80 ms stays last.
        let _busy: Vec<_> = (0..10).map(|_| ms[0].begin_attempt()).collect();
        assert_eq!(fastest.order(&ms).collect::<Vec<_>>(), vec![1, 0, 2]);
    }

    #[test]
    fn fastest_charges_queued_requests_only_beyond_the_sustained_concurrency() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(3, &gauges);
        let decay = DecayWindow::new(DECAY);
        for (mirror, millis) in ms.iter().zip([2, 20, 80]) {
            mirror.observe_first_byte(std::time::Duration::from_millis(millis), decay);
        }
        let fastest = Fastest::new(decay);
        let busy: Vec<_> = (0..10).map(|_| ms[0].begin_attempt()).collect();
        // Not yet seen to answer 10 at once: each queued request costs a
        // full 2 ms, and 2 × 11 > 20.
        assert_eq!(fastest.order(&ms).next(), Some(1));
        // It answers in 2 ms with 10 in flight: 2 × (1 + 10/10) < 20.
        ms[0].observe_first_byte(std::time::Duration::from_millis(2), decay);
        assert_eq!(ms[0].sustained(), 10);
        assert_eq!(fastest.order(&ms).collect::<Vec<_>>(), vec![0, 1, 2]);
        // A first byte more than twice as slow halves what it is trusted with.
        ms[0].observe_first_byte(std::time::Duration::from_millis(9), decay);
        assert_eq!(ms[0].sustained(), 5);
        drop(busy);
    }

    #[test]
    fn fastest_scores_a_never_observed_mirror_at_the_average() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(3, &gauges);
        let now = 5 * SECOND;
        observe_at(&ms[0], 2, now);
        observe_at(&ms[1], 20, now);
        let fastest = Fastest::new(DecayWindow::new(DECAY));
        // Mirror 2 counts as 11 ms: after the known-fast one, before the slow one.
        assert_eq!(fastest.order(&ms).collect::<Vec<_>>(), vec![0, 2, 1]);
        // Once the fast one is loaded, the unknown one is tried.
        let _busy: Vec<_> = (0..6).map(|_| ms[0].begin_attempt()).collect();
        assert_eq!(fastest.order(&ms).next(), Some(2));
    }

    #[test]
    fn fastest_tries_a_slow_mirror_again_once_its_estimate_fades() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(2, &gauges);
        let fastest = Fastest::new(DecayWindow::new(DECAY));
        observe_at(&ms[0], 2, 0);
        observe_at(&ms[1], 80, 0);
        assert_eq!(fastest.order(&ms).next(), Some(0));
        // The fast mirror keeps answering in 2 ms; the slow one gets no
        // traffic, so nothing refreshes its 80 ms, which fades: e^-4 × 80 ms
        // is 1.5 ms after four windows.
        for second in 1..=40 {
            observe_at(&ms[0], 2, second * SECOND);
        }
        assert_eq!(fastest.order(&ms).next(), Some(1));
        // Its answer is still slow: the peak is believed at once.
        observe_at(&ms[1], 80, 40 * SECOND);
        assert_eq!(fastest.order(&ms).next(), Some(0));
    }

    #[test]
    fn fastest_rotates_ties() {
        let ms = mirrors(4, &GaugeRegistry::default());
        let fastest = Fastest::new(DecayWindow::new(DECAY));
        let firsts: std::collections::HashSet<usize> =
            (0..4).map(|_| fastest.order(&ms).next().unwrap()).collect();
        assert_eq!(firsts.len(), 4);
    }
}
