//! Mirror selection: the order in which a miss tries a remote's mirrors.
//!
//! Each strategy lives in its own file behind [`Selection`]; [`Selector`]
//! dispatches statically. Selection reads atomics only: no lock, no map lookup,
//! no allocation (the order is a fixed-capacity array on the stack). What is
//! known of each mirror (requests in flight, first-byte latency) is shared
//! through [`GaugeRegistry`], keyed by mirror URL, so a remote rebuilt from a
//! reloaded config keeps what was learnt about its mirrors. The one way to
//! count an attempt is [`Mirror::begin_attempt`], whose RAII guard gives the
//! count back on drop, whether the request ends, fails, panics or is
//! cancelled.

mod fastest;
mod least_conn;
mod peak_ewma;
mod round_robin;
mod single;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use url::Url;

use crate::config::Strategy;
pub use crate::config::MAX_MIRRORS;
pub use fastest::Fastest;
pub use least_conn::LeastConn;
use peak_ewma::PeakEwma;
pub use peak_ewma::{now_nanos, DecayWindow, LastEstimate};
pub use round_robin::RoundRobin;
pub use single::Single;

/// One upstream mirror of a remote.
#[derive(Debug)]
pub struct Mirror {
    url: Url,
    /// `url` as text without a trailing slash, ready to have a path appended.
    base: String,
    gauges: Arc<MirrorGauges>,
}

impl Mirror {
    pub fn new(url: Url, registry: &GaugeRegistry) -> Mirror {
        let base = url.as_str().trim_end_matches('/').to_string();
        let gauges = registry.gauges_of(&base);
        Mirror { url, base, gauges }
    }

    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The mirror's base URL as text (no trailing slash).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The upstream URL of `path` (no leading slash) on this mirror.
    pub fn url_for(&self, path: &str) -> String {
        let mut s = String::with_capacity(self.base.len() + 1 + path.len());
        s.push_str(&self.base);
        s.push('/');
        s.push_str(path);
        s
    }

    /// Requests to this mirror in flight now, from every remote that lists it.
    #[inline]
    pub fn in_flight(&self) -> usize {
        self.gauges.in_flight.load(Ordering::Relaxed)
    }

    /// Counts one attempt until the returned guard is dropped.
    #[inline]
    pub fn begin_attempt(&self) -> InflightGuard<'_> {
        // Relaxed: the gauge is a load hint that orders no other memory.
        self.gauges.in_flight.fetch_add(1, Ordering::Relaxed);
        InflightGuard {
            gauge: &self.gauges.in_flight,
        }
    }

    /// Records how long an attempt took to get its response head (for a
    /// failed attempt, the penalty the caller charges instead). `decay` is the
    /// remote's `latency_decay`, from [`Selector::first_byte_decay`].
    pub fn observe_first_byte(&self, elapsed: Duration, decay: DecayWindow) {
        self.gauges.first_byte.observe(elapsed, now_nanos(), decay);
    }

    /// The first-byte latency estimate at `now` ([`now_nanos`]), in
    /// nanoseconds; 0 if never observed.
    pub fn first_byte_estimate(&self, now: u64, decay: DecayWindow) -> f64 {
        self.gauges.first_byte.estimate_at(now, decay)
    }

    /// The first-byte latency estimate as last updated, and when.
    #[inline]
    pub fn last_first_byte(&self) -> LastEstimate {
        self.gauges.first_byte.last()
    }
}

/// What is known of one mirror, shared by every remote that lists it.
#[derive(Debug, Default)]
pub struct MirrorGauges {
    in_flight: AtomicUsize,
    first_byte: PeakEwma,
}

/// Holds one unit of a mirror's in-flight gauge; gives it back on drop.
#[must_use = "the attempt is counted only while the guard lives"]
pub struct InflightGuard<'a> {
    gauge: &'a AtomicUsize,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.gauge.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Mirror gauges by mirror URL, shared by every remote and kept across
/// config reloads. Touched only when remotes are built, never per request.
#[derive(Default)]
pub struct GaugeRegistry {
    // A std mutex, not a concurrent map: it is taken only while building
    // remotes, never on the request path.
    gauges: Mutex<HashMap<String, Arc<MirrorGauges>>>,
}

impl GaugeRegistry {
    /// The gauges of the mirror at `url`, created on first use.
    pub fn gauges_of(&self, url: &str) -> Arc<MirrorGauges> {
        let mut gauges = self.gauges.lock().expect("gauge registry poisoned");
        gauges.entry(url.to_string()).or_default().clone()
    }
}

/// The next number of a per-thread counter, for rotating ties. Threads start
/// at different numbers; unlike a shared cursor, it costs no cache-line
/// traffic between cores, so selecting from many threads at once stays as
/// cheap as from one.
#[inline]
fn next_turn() -> usize {
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

    const DECAY: Duration = Duration::from_secs(10);
    const SECOND: u64 = 1_000_000_000;

    fn mirrors(n: usize, gauges: &GaugeRegistry) -> Vec<Arc<Mirror>> {
        (0..n)
            .map(|i| {
                Arc::new(Mirror::new(
                    Url::parse(&format!("http://m{i}.test/x")).unwrap(),
                    gauges,
                ))
            })
            .collect()
    }

    /// A xorshift generator: enough randomness for tests, and repeatable.
    struct Xorshift(u64);

    impl Xorshift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn observe_at(mirror: &Mirror, millis: u64, now: u64) {
        mirror.gauges.first_byte.observe(
            Duration::from_millis(millis),
            now,
            DecayWindow::new(DECAY),
        );
    }

    #[test]
    fn every_order_is_a_permutation() {
        let gauges = GaugeRegistry::default();
        let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
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
    fn single_is_primary_then_fallbacks() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(3, &gauges);
        let sel = Selector::new(Strategy::Single, DECAY);
        assert_eq!(sel.order(&ms).collect::<Vec<_>>(), vec![0, 1, 2]);
    }

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
        let mut random = Xorshift(0x2545_f491_4f6c_dd1d);
        let mut tasks = Vec::with_capacity(N_TASKS);
        for task_no in 0..N_TASKS {
            let (task_mirrors, selector) = (ms.clone(), selector.clone());
            let mut task_random = Xorshift(random.next() | 1);
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
