//! Mirror selection: the order in which a miss tries a remote's mirrors.
//!
//! Each strategy lives in its own file behind [`Selection`]; [`Selector`]
//! dispatches statically. Selection reads atomics only: no lock, no map lookup,
//! no allocation (the order is a fixed-capacity array on the stack). The
//! in-flight gauges are shared through [`GaugeRegistry`], keyed by mirror URL,
//! so a remote rebuilt from a reloaded config keeps the counts of its mirrors.
//! The one way to count an attempt is [`Mirror::begin_attempt`], whose RAII
//! guard gives the count back on drop, whether the request ends, fails,
//! panics or is cancelled.

mod least_conn;
mod round_robin;
mod single;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use url::Url;

use crate::config::Strategy;
pub use crate::config::MAX_MIRRORS;
pub use least_conn::LeastConn;
pub use round_robin::RoundRobin;
pub use single::Single;

/// One upstream mirror of a remote.
#[derive(Debug)]
pub struct Mirror {
    url: Url,
    /// `url` as text without a trailing slash, ready to have a path appended.
    base: String,
    in_flight: Arc<AtomicUsize>,
}

impl Mirror {
    pub fn new(url: Url, gauges: &GaugeRegistry) -> Mirror {
        let base = url.as_str().trim_end_matches('/').to_string();
        let in_flight = gauges.gauge(&base);
        Mirror {
            url,
            base,
            in_flight,
        }
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
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts one attempt until the returned guard is dropped.
    pub fn begin_attempt(&self) -> InflightGuard<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InflightGuard {
            gauge: &self.in_flight,
        }
    }
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

/// In-flight gauges by mirror URL, shared by every remote and kept across
/// config reloads. Touched only when remotes are built, never per request.
#[derive(Default)]
pub struct GaugeRegistry {
    // A std mutex, not a concurrent map: it is taken only while building
    // remotes, never on the request path.
    gauges: Mutex<HashMap<String, Arc<AtomicUsize>>>,
}

impl GaugeRegistry {
    pub fn gauge(&self, url: &str) -> Arc<AtomicUsize> {
        let mut gauges = self.gauges.lock().expect("gauge registry poisoned");
        gauges.entry(url.to_string()).or_default().clone()
    }
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
    pub fn rotated(n: usize, start: usize) -> AttemptOrder {
        debug_assert!(n <= MAX_MIRRORS && (n == 0 || start < n));
        let mut idx = [0u8; MAX_MIRRORS];
        let mut i = start;
        for slot in idx.iter_mut().take(n) {
            *slot = i as u8;
            i += 1;
            if i == n {
                i = 0;
            }
        }
        AttemptOrder {
            idx,
            len: n as u8,
            pos: 0,
        }
    }

    /// The remaining indices, in order.
    pub fn as_slice(&self) -> &[u8] {
        &self.idx[self.pos as usize..self.len as usize]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.idx[self.pos as usize..self.len as usize]
    }
}

impl Iterator for AttemptOrder {
    type Item = usize;

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
    pub fn retain_or_keep_all(&mut self, accept: impl Fn(usize) -> bool) {
        let mut kept = [0u8; MAX_MIRRORS];
        let mut n = 0;
        for &i in self.as_slice() {
            if accept(i as usize) {
                kept[n] = i;
                n += 1;
            }
        }
        if n > 0 {
            self.idx = kept;
            self.len = n as u8;
            self.pos = 0;
        }
    }
}

/// The configured strategy of one remote.
#[derive(Debug)]
pub enum Selector {
    Single(Single),
    RoundRobin(RoundRobin),
    LeastConn(LeastConn),
}

impl Selector {
    pub fn new(strategy: Strategy) -> Selector {
        match strategy {
            Strategy::Single => Selector::Single(Single),
            Strategy::RoundRobin => Selector::RoundRobin(RoundRobin::default()),
            Strategy::LeastConn => Selector::LeastConn(LeastConn::default()),
            // TODO(fastest): its own strategy file; least_conn until then.
            Strategy::Fastest => Selector::LeastConn(LeastConn::default()),
        }
    }

    /// The attempt order, skipping mirrors `accept` refuses (ejected ones)
    /// unless it refuses them all.
    #[inline]
    pub fn order_accepting(
        &self,
        mirrors: &[Arc<Mirror>],
        accept: impl Fn(usize) -> bool,
    ) -> AttemptOrder {
        let mut order = self.order(mirrors);
        order.retain_or_keep_all(accept);
        order
    }
}

impl Selection for Selector {
    #[inline]
    fn order(&self, mirrors: &[Arc<Mirror>]) -> AttemptOrder {
        match self {
            Selector::Single(s) => s.order(mirrors),
            Selector::RoundRobin(s) => s.order(mirrors),
            Selector::LeastConn(s) => s.order(mirrors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn every_order_is_a_permutation() {
        let gauges = GaugeRegistry::default();
        for n in 1..=MAX_MIRRORS {
            let ms = mirrors(n, &gauges);
            for strategy in [Strategy::Single, Strategy::RoundRobin, Strategy::LeastConn] {
                let sel = Selector::new(strategy);
                for _ in 0..n + 1 {
                    let mut seen: Vec<usize> = sel.order(&ms).collect();
                    seen.sort();
                    assert_eq!(seen, (0..n).collect::<Vec<_>>());
                }
            }
        }
    }

    #[test]
    fn single_is_primary_then_fallbacks() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(3, &gauges);
        let sel = Selector::new(Strategy::Single);
        assert_eq!(sel.order(&ms).collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn round_robin_is_exact() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(3, &gauges);
        let sel = Selector::new(Strategy::RoundRobin);
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
        let sel = Selector::new(Strategy::LeastConn);
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
    fn gauges_survive_a_rebuild_and_return_to_zero() {
        let gauges = GaugeRegistry::default();
        let a = mirrors(2, &gauges);
        let guard = a[1].begin_attempt();
        let b = mirrors(2, &gauges);
        assert_eq!(b[1].in_flight(), 1);
        drop(guard);
        assert_eq!(b[1].in_flight(), 0);
    }
}
