//! The dashboard's per-minute history: for each remote, what happened in
//! each of the last 24 hours' minutes (requests, hits, bytes from the cache
//! and from upstream, upstream errors, first-byte time), in a fixed ring of
//! [`MINUTES`] buckets.
//!
//! Nothing here is on the request path. A sampler (`Proxy::sample_history`,
//! once a minute) reads the counters the request path keeps anyway — relaxed
//! atomics — and records the difference from its last reading into the
//! bucket of the current minute; a bucket is reused when its minute comes
//! round again a day later. Memory is bounded: `MINUTES` buckets per
//! configured remote. Time comes from a [`Clock`], so tests move it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use serde::Serialize;

use crate::clock::{Clock, SystemClock};

/// Buckets kept: one a minute for 24 hours.
pub const MINUTES: usize = 24 * 60;

/// The counters of one remote at one moment, as the sampler reads them
/// (all monotonic since the process started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Answered requests: hits, misses and errors.
    pub requests: u64,
    /// Answered from the store (HIT, REVALIDATED, STALE).
    pub hits: u64,
    pub bytes_from_cache: u64,
    pub bytes_from_upstream: u64,
    /// Failed upstream attempts over the remote's mirrors.
    pub upstream_errors: u64,
    /// Sum (µs) and count of upstream first-byte times.
    pub first_byte_us: u64,
    pub first_bytes: u64,
}

impl Totals {
    /// What happened since `before`. A counter that went down (a remote
    /// rebuilt under new handles) counts from zero.
    fn since(&self, before: &Totals) -> Totals {
        let d = |now: u64, then: u64| if now >= then { now - then } else { now };
        Totals {
            requests: d(self.requests, before.requests),
            hits: d(self.hits, before.hits),
            bytes_from_cache: d(self.bytes_from_cache, before.bytes_from_cache),
            bytes_from_upstream: d(self.bytes_from_upstream, before.bytes_from_upstream),
            upstream_errors: d(self.upstream_errors, before.upstream_errors),
            first_byte_us: d(self.first_byte_us, before.first_byte_us),
            first_bytes: d(self.first_bytes, before.first_bytes),
        }
    }

    fn add(&mut self, other: &Totals) {
        self.requests += other.requests;
        self.hits += other.hits;
        self.bytes_from_cache += other.bytes_from_cache;
        self.bytes_from_upstream += other.bytes_from_upstream;
        self.upstream_errors += other.upstream_errors;
        self.first_byte_us += other.first_byte_us;
        self.first_bytes += other.first_bytes;
    }
}

/// One minute of one or more remotes.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Minute {
    /// Unix minute (unix ms / 60 000).
    pub minute: i64,
    pub requests: u64,
    pub hits: u64,
    pub bytes_from_cache: u64,
    pub bytes_from_upstream: u64,
    pub upstream_errors: u64,
    /// Mean upstream first-byte time of the minute; none without a fetch.
    pub first_byte_ms: Option<f64>,
}

impl Minute {
    /// Hits over requests; none in a minute without requests.
    pub fn hit_ratio(&self) -> Option<f64> {
        (self.requests > 0).then(|| self.hits as f64 / self.requests as f64)
    }
}

/// One remote's ring.
struct Ring {
    /// `(unix minute, what happened in it)`, indexed by minute mod `MINUTES`.
    buckets: Box<[(i64, Totals)]>,
    /// The last reading, which the next one is measured from.
    last: Totals,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            buckets: vec![(i64::MIN, Totals::default()); MINUTES].into_boxed_slice(),
            last: Totals::default(),
        }
    }
}

pub struct History {
    /// Held to record or read, never across an await, never by a request.
    rings: Mutex<HashMap<String, Ring>>,
    clock: RwLock<Arc<dyn Clock>>,
}

impl Default for History {
    fn default() -> Self {
        History::new(Arc::new(SystemClock))
    }
}

impl History {
    pub fn new(clock: Arc<dyn Clock>) -> History {
        History {
            rings: Mutex::new(HashMap::new()),
            clock: RwLock::new(clock),
        }
    }

    /// Replaces the clock (tests).
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        *self.clock.write().expect("history clock poisoned") = clock;
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.read().expect("history clock poisoned").now_ms()
    }

    /// Records `now`'s reading of `remote`'s counters into the current
    /// minute's bucket (adding to it if the minute already has one).
    pub fn record(&self, remote: &str, now: Totals) {
        let minute = self.now_ms().div_euclid(60_000);
        let mut rings = self.rings.lock().expect("history poisoned");
        let ring = rings.entry(remote.to_string()).or_insert_with(Ring::new);
        let delta = now.since(&ring.last);
        ring.last = now;
        let bucket = &mut ring.buckets[minute.rem_euclid(MINUTES as i64) as usize];
        if bucket.0 != minute {
            *bucket = (minute, Totals::default());
        }
        bucket.1.add(&delta);
    }

    /// Forgets remotes not in `keep` (removed by a reload).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.rings
            .lock()
            .expect("history poisoned")
            .retain(|name, _| keep(name));
    }

    /// The last [`MINUTES`] minutes up to now, oldest first, summed over the
    /// remotes `include` admits; a minute nothing was recorded for is zero.
    pub fn window(&self, include: impl Fn(&str) -> bool) -> Vec<Minute> {
        let end = self.now_ms().div_euclid(60_000);
        let start = end - MINUTES as i64 + 1;
        let mut sums = vec![Totals::default(); MINUTES];
        let rings = self.rings.lock().expect("history poisoned");
        for (_, ring) in rings.iter().filter(|(name, _)| include(name)) {
            for (minute, totals) in ring.buckets.iter() {
                if (start..=end).contains(minute) {
                    sums[(minute - start) as usize].add(totals);
                }
            }
        }
        drop(rings);
        sums.iter()
            .enumerate()
            .map(|(i, t)| Minute {
                minute: start + i as i64,
                requests: t.requests,
                hits: t.hits,
                bytes_from_cache: t.bytes_from_cache,
                bytes_from_upstream: t.bytes_from_upstream,
                upstream_errors: t.upstream_errors,
                first_byte_ms: (t.first_bytes > 0)
                    .then(|| t.first_byte_us as f64 / t.first_bytes as f64 / 1000.0),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::time::Duration;

    fn requests(n: u64) -> Totals {
        Totals {
            requests: n,
            hits: n / 2,
            ..Totals::default()
        }
    }

    #[test]
    fn each_minute_gets_what_happened_in_it_and_old_minutes_fall_out() {
        let clock = Arc::new(ManualClock::at(1_000 * 60_000));
        let history = History::new(clock.clone());
        history.record("a", requests(10));
        clock.advance(Duration::from_secs(60));
        history.record("a", requests(14));
        history.record("b", requests(1));
        let window = history.window(|_| true);
        assert_eq!(window.len(), MINUTES);
        assert_eq!(window[MINUTES - 2].requests, 10);
        assert_eq!(window[MINUTES - 1].requests, 4 + 1);
        assert_eq!(history.window(|r| r == "a")[MINUTES - 1].requests, 4);
        // A day later the same buckets hold the new minutes.
        clock.advance(Duration::from_secs(24 * 3600));
        history.record("a", requests(20));
        let window = history.window(|r| r == "a");
        assert_eq!(window[MINUTES - 1].requests, 6);
        assert_eq!(window.iter().map(|m| m.requests).sum::<u64>(), 6);
    }
}
