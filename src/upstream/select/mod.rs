//! Mirror selection: the order in which a miss tries a remote's mirrors.
//!
//! Each strategy lives in its own file behind [`Selection`] (`order.rs`, with
//! the [`AttemptOrder`] it returns); [`Selector`] dispatches statically. The
//! mirror and its shared gauges are in `mirror.rs`. Selection reads atomics only: no lock, no map lookup,
//! no allocation (the order is a fixed-capacity array on the stack). What is
//! known of each mirror (requests in flight, first-byte latency) is shared
//! through [`GaugeRegistry`], keyed by mirror URL, so a remote rebuilt from a
//! reloaded config keeps what was learnt about its mirrors. The one way to
//! count an attempt is [`Mirror::begin_attempt`], whose RAII guard gives the
//! count back on drop, whether the request ends, fails, panics or is
//! cancelled.

mod fastest;
mod least_conn;
mod mirror;
mod order;
mod peak_ewma;
mod round_robin;
mod single;

use std::sync::Arc;
use std::time::Duration;

use crate::config::Strategy;
pub use crate::config::MAX_MIRRORS;
pub use fastest::Fastest;
pub use least_conn::LeastConn;
pub use mirror::{GaugeRegistry, InflightGuard, Mirror, MirrorGauges};
use order::next_turn;
pub use order::{AttemptOrder, Selection};
pub use peak_ewma::{now_nanos, DecayWindow, LastEstimate};
pub use round_robin::RoundRobin;
pub use single::Single;

/// The configured strategy of one remote, with the remote's latency decay
/// window (which every strategy uses to record first-byte times, since the
/// estimates are shared with remotes that may choose by them).
#[derive(Debug)]
pub struct Selector {
    strategy: ByStrategy,
    first_byte_decay: DecayWindow,
}

#[derive(Debug)]
enum ByStrategy {
    Single(Single),
    RoundRobin(RoundRobin),
    LeastConn(LeastConn),
    Fastest(Fastest),
}

impl Selector {
    /// `latency_decay` is the remote's `latency_decay` key.
    pub fn new(strategy: Strategy, latency_decay: Duration) -> Selector {
        let first_byte_decay = DecayWindow::new(latency_decay);
        let strategy = match strategy {
            Strategy::Single => ByStrategy::Single(Single),
            Strategy::RoundRobin => ByStrategy::RoundRobin(RoundRobin::default()),
            Strategy::LeastConn => ByStrategy::LeastConn(LeastConn),
            Strategy::Fastest => ByStrategy::Fastest(Fastest::new(first_byte_decay)),
        };
        Selector {
            strategy,
            first_byte_decay,
        }
    }

    /// The window over which first-byte observations fade, for
    /// [`Mirror::observe_first_byte`].
    pub fn first_byte_decay(&self) -> DecayWindow {
        self.first_byte_decay
    }

    /// The attempt order, skipping mirrors `accept` refuses (ejected ones)
    /// unless it refuses them all.
    #[inline]
    pub fn order_accepting(
        &self,
        mirrors: &[Arc<Mirror>],
        accept: impl Fn(usize) -> bool,
    ) -> AttemptOrder {
        if mirrors.len() <= 1 {
            // Nothing to choose, and an only mirror is tried even if refused.
            return AttemptOrder::list_order(mirrors.len());
        }
        let mut order = self.order(mirrors);
        order.retain_or_keep_all(accept);
        order
    }
}

impl Selection for Selector {
    #[inline]
    fn order(&self, mirrors: &[Arc<Mirror>]) -> AttemptOrder {
        match &self.strategy {
            ByStrategy::Single(s) => s.order(mirrors),
            ByStrategy::RoundRobin(s) => s.order(mirrors),
            ByStrategy::LeastConn(s) => s.order(mirrors),
            ByStrategy::Fastest(s) => s.order(mirrors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;
    use url::Url;

    pub(super) const DECAY: Duration = Duration::from_secs(10);
    pub(super) const SECOND: u64 = 1_000_000_000;

    pub(super) fn mirrors(n: usize, gauges: &GaugeRegistry) -> Vec<Arc<Mirror>> {
        (0..n)
            .map(|i| {
                Arc::new(Mirror::new(
                    Url::parse(&format!("http://m{i}.test/x")).unwrap(),
                    gauges,
                ))
            })
            .collect()
    }

    pub(super) fn observe_at(mirror: &Mirror, millis: u64, now: u64) {
        mirror.gauges.first_byte.observe(
            Duration::from_millis(millis),
            now,
            DecayWindow::new(DECAY),
        );
    }

    #[test]
    fn every_order_is_a_permutation() {
        let gauges = GaugeRegistry::default();
        let mut random = XorShift(0x9e37_79b9_7f4a_7c15);
        for n in 1..=MAX_MIRRORS {
            let ms = mirrors(n, &gauges);
            // Uneven loads and latencies, so the sorting strategies move things.
            let mut guards = Vec::new();
            for mirror in &ms {
                for _ in 0..random.below(3) {
                    guards.push(mirror.begin_attempt());
                }
                if random.below(4) > 0 {
                    mirror.observe_first_byte(
                        Duration::from_millis(random.below(100)),
                        DecayWindow::new(DECAY),
                    );
                }
            }
            for strategy in [
                Strategy::Single,
                Strategy::RoundRobin,
                Strategy::LeastConn,
                Strategy::Fastest,
            ] {
                let sel = Selector::new(strategy, DECAY);
                for _ in 0..n + 1 {
                    let mut seen: Vec<usize> = sel.order(&ms).collect();
                    seen.sort();
                    assert_eq!(
                        seen,
                        (0..n).collect::<Vec<_>>(),
                        "{strategy:?}, {n} mirrors"
                    );
                }
            }
        }
    }

    #[test]
    fn order_accepting_skips_refused_mirrors_unless_all_are_refused() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(4, &gauges);
        let sel = Selector::new(Strategy::Single, DECAY);
        let order = sel.order_accepting(&ms, |i| i % 2 == 1);
        assert_eq!(order.collect::<Vec<_>>(), vec![1, 3]);
        let order = sel.order_accepting(&ms, |_| false);
        assert_eq!(order.collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn gauges_survive_a_rebuild_and_return_to_zero() {
        let gauges = GaugeRegistry::default();
        let a = mirrors(2, &gauges);
        let guard = a[1].begin_attempt();
        a[1].observe_first_byte(Duration::from_millis(7), DecayWindow::new(DECAY));
        let b = mirrors(2, &gauges);
        assert_eq!(b[1].in_flight(), 1);
        assert!(b[1].first_byte_estimate(now_nanos(), DecayWindow::new(DECAY)) > 0.0);
        drop(guard);
        assert_eq!(b[1].in_flight(), 0);
    }

    /// Thousands of fetch-like tasks hold attempt guards across awaits and
    /// are aborted at random points, as a client disconnect or a shutdown
    /// would cancel them: every gauge must come back to exactly zero.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gauges_return_to_zero_after_attempts_cancelled_at_random_points() {
        const N_TASKS: usize = 4_000;
        let gauges = GaugeRegistry::default();
        let ms = Arc::new(mirrors(4, &gauges));
        let selector = Arc::new(Selector::new(Strategy::Fastest, DECAY));
        let mut random = XorShift(0x2545_f491_4f6c_dd1d);
        let mut tasks = Vec::with_capacity(N_TASKS);
        for task_no in 0..N_TASKS {
            let (task_mirrors, selector) = (ms.clone(), selector.clone());
            let mut task_random = XorShift(random.next() | 1);
            tasks.push(tokio::spawn(async move {
                // Like `upstream::fetch`: attempts in the selector's order,
                // each guard alive across the awaits of its request.
                let n_attempts = 1 + task_random.below(3) as usize;
                for mirror_idx in selector.order(&task_mirrors).take(n_attempts) {
                    let mirror = &task_mirrors[mirror_idx];
                    let _attempt = mirror.begin_attempt();
                    for _ in 0..task_random.below(4) {
                        tokio::task::yield_now().await;
                    }
                    match task_random.below(8) {
                        // A mirror that never answers: only the abort ends it.
                        0 => std::future::pending::<()>().await,
                        1..=4 => {
                            let pause = Duration::from_micros(task_random.below(300));
                            tokio::time::sleep(pause).await;
                        }
                        _ => {}
                    }
                    let first_byte = Duration::from_micros(task_random.below(5_000));
                    mirror.observe_first_byte(first_byte, selector.first_byte_decay());
                }
            }));
            // Cancel a random earlier task now and then, whatever it is doing.
            if random.below(3) == 0 {
                tasks[random.below(tasks.len() as u64) as usize].abort();
            }
            if task_no % 64 == 0 {
                tokio::task::yield_now().await;
                // A gauge that went below zero would wrap to a huge count.
                for mirror in ms.iter() {
                    assert!(mirror.in_flight() <= N_TASKS, "a gauge underflowed");
                }
            }
        }
        // Then cancel everything still running, wherever each task is.
        tokio::time::sleep(Duration::from_micros(200)).await;
        let held_before_sweep: usize = ms.iter().map(|m| m.in_flight()).sum();
        assert!(held_before_sweep > 0, "no attempt was in flight to cancel");
        for task in &tasks {
            task.abort();
        }
        let mut n_cancelled = 0;
        for task in tasks {
            match task.await {
                Ok(()) => {}
                Err(e) if e.is_cancelled() => n_cancelled += 1,
                Err(e) => panic!("attempt task failed: {e}"),
            }
        }
        assert!(
            n_cancelled >= N_TASKS / 10,
            "only {n_cancelled} tasks were cancelled"
        );
        for mirror in ms.iter() {
            assert_eq!(mirror.in_flight(), 0, "{} kept a count", mirror.base());
        }
    }
}
