//! One mirror of a remote, and what is known of it (requests in flight,
//! first-byte latency), shared by URL through the [`GaugeRegistry`] so that a
//! reload keeps it. The one way to count an attempt is
//! [`Mirror::begin_attempt`], whose RAII guard gives the count back on drop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use url::Url;

use super::peak_ewma::{now_nanos, DecayWindow, LastEstimate, PeakEwma};

/// One upstream mirror of a remote.
#[derive(Debug)]
pub struct Mirror {
    url: Url,
    /// `url` as text without a trailing slash, ready to have a path appended.
    base: String,
    pub(super) gauges: Arc<MirrorGauges>,
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

    /// The upstream URL of `path` (no leading slash) on this mirror; the
    /// mirror's URL itself for an empty `path` (an advisory feed's file).
    pub fn url_for(&self, path: &str) -> String {
        if path.is_empty() {
            return self.base.clone();
        }
        let mut s = String::with_capacity(self.base.len() + 1 + path.len());
        s.push_str(&self.base);
        s.push('/');
        s.push_str(path);
        s
    }

    /// [`Mirror::url_for`] as a parsed URL, built from the mirror's own:
    /// only the path is parsed (a miss's GET would otherwise have reqwest
    /// parse the scheme and host again, IDNA included). A mirror URL with
    /// a query or fragment, or a `path` with `?` or `#` or ending in a
    /// space or control character (which a parse of the whole text trims),
    /// is parsed whole; `Err` only where that parse fails.
    pub fn parsed_url_for(&self, path: &str) -> Result<Url, url::ParseError> {
        if self.url.query().is_some()
            || self.url.fragment().is_some()
            || self.url.cannot_be_a_base()
            || path.contains(['?', '#'])
            || path.ends_with(|c: char| c <= ' ')
        {
            return Url::parse(&self.url_for(path));
        }
        let base = self.url.path().trim_end_matches('/');
        let mut joined = String::with_capacity(base.len() + 1 + path.len());
        joined.push_str(base);
        if !path.is_empty() {
            joined.push('/');
            joined.push_str(path);
        }
        let mut url = self.url.clone();
        url.set_path(&joined);
        Ok(url)
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
        let now = now_nanos();
        let before = self.gauges.first_byte.estimate_at(now, decay);
        self.gauges.first_byte.observe(elapsed, now, decay);
        self.gauges
            .note_concurrency(self.in_flight(), elapsed.as_nanos() as f64, before);
    }

    /// How many requests in flight this mirror has been seen to answer
    /// without slowing down (at least 1; see [`MirrorGauges::sustained`]).
    #[inline]
    pub fn sustained(&self) -> usize {
        self.gauges.sustained.load(Ordering::Relaxed).max(1) as usize
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
    pub(super) in_flight: AtomicUsize,
    pub(super) first_byte: PeakEwma,
    /// The concurrency the mirror has been seen to sustain: the most
    /// requests in flight at which a first byte came no slower than
    /// [`SLOWER`] × the estimate before it. It grows to the largest such
    /// count and halves on a slower first byte (or a failure, whose penalty
    /// is slow), so it follows a mirror that starts queueing. 0 (never
    /// observed) counts as 1: every queued request then costs a full
    /// latency, the classic peak-EWMA score.
    pub(super) sustained: AtomicU32,
}

/// A first byte more than this many times the estimate before it means the
/// mirror did not keep up with its load.
const SLOWER: f64 = 2.0;

impl MirrorGauges {
    fn note_concurrency(&self, in_flight: usize, sample_nanos: f64, estimate_before: f64) {
        let in_flight = u32::try_from(in_flight).unwrap_or(u32::MAX);
        // Relaxed: a hint for the next selection, ordering nothing else.
        if estimate_before > 0.0 && sample_nanos > SLOWER * estimate_before {
            let _ = self
                .sustained
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| Some(k / 2));
        } else {
            self.sustained.fetch_max(in_flight, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The URL built from the mirror's parsed one is the URL reqwest would
    /// parse from the text: for every mirror shape and path the proxy sends.
    #[test]
    fn a_parsed_url_equals_the_parse_of_its_text() {
        let mirrors = [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "https://files.example.org/pypi/",
            "https://Mirror.Example.ORG:443/a//",
            "https://xn--bcher-kva.example/simple",
            "https://bücher.example/simple/",
            "http://[::1]:9000/v2",
            "https://host/prefix%20x/?token=abc",
            "https://host/p#frag",
            "https://user:pa%40ss@host/p",
        ];
        let paths = [
            "",
            "simple/requests/",
            "packages/a/b/c-1.0.tar.gz",
            "a/../b/./c",
            "%2e%2e/etc/passwd",
            "pkg with space/ü.tgz",
            "x%20y/%3Fq",
            "dir\\file",
            "a?b=c",
            "a#b",
            "@scope%2fname",
            "v2/library/alpine/manifests/sha256:abc",
            "..",
            "//double",
            "a ",
            "a\u{1}",
            "a\tb\n",
            " lead",
        ];
        let registry = GaugeRegistry::default();
        for base in mirrors {
            let mirror = Mirror::new(Url::parse(base).unwrap(), &registry);
            for path in paths {
                let text = mirror.url_for(path);
                assert_eq!(
                    mirror.parsed_url_for(path).map(String::from),
                    Url::parse(&text).map(String::from),
                    "{base} + {path}"
                );
            }
        }
    }
}
