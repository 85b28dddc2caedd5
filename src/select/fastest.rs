//! `fastest`: the mirror expected to send its first byte soonest goes first.
//!
//! Each mirror's score is its first-byte latency estimate (a peak-sensitive
//! EWMA, see [`super::peak_ewma`]) times its requests in flight plus one: the
//! wait a new request can expect if the mirror serves its queue at the speed
//! it has shown. Every mirror is scored and the order is all of them by score,
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
            *score = latency.max(LATENCY_FLOOR_NANOS) * (mirror.in_flight() + 1) as f64;
        }
        // A stable sort over an order that starts at a per-thread turn: equal
        // scores (idle mirrors with faded estimates) take turns.
        let mut order = AttemptOrder::rotated(n_mirrors, next_turn() % n_mirrors);
        let idx = order.as_mut_slice();
        for i in 1..idx.len() {
            let mut j = i;
            while j > 0 && score[idx[j - 1] as usize] > score[idx[j] as usize] {
                idx.swap(j - 1, j);
                j -= 1;
            }
        }
        order
    }
}
