//! Prometheus metrics (`GET /-/metrics`), with `prometheus-client`.
//!
//! Per-remote and per-mirror handles are resolved once when a remote is built
//! (a `Counter` clone shares its value), so counting on the request path is an
//! atomic add with no label lookup or allocation. Gauges that mirror state
//! held elsewhere (in-flight, health, store size) are set at scrape time.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// How a request was answered, as `X-Cache-Status` and the request metrics
/// say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    Hit,
    Miss,
    Revalidated,
    Stale,
    /// An API route proxied uncached.
    Pass,
}

impl CacheStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "HIT",
            CacheStatus::Miss => "MISS",
            CacheStatus::Revalidated => "REVALIDATED",
            CacheStatus::Stale => "STALE",
            CacheStatus::Pass => "PASS",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub remote: String,
    pub cache: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RemoteLabels {
    pub remote: String,
}

/// Where served bytes came from: the store, or a mirror (through a fill).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub remote: String,
    pub source: &'static str,
}

/// A quarantine refusal: the remote and the advisory's class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuarantineLabels {
    pub remote: String,
    pub class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MirrorLabels {
    pub remote: String,
    pub mirror: String,
}

fn latency_histogram() -> Histogram {
    // 1 ms to ~33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    bytes_served: Family<RemoteLabels, Counter>,
    bytes_served_by_source: Family<SourceLabels, Counter>,
    upstream_first_byte: Family<MirrorLabels, Histogram, fn() -> Histogram>,
    upstream_failures: Family<MirrorLabels, Counter>,
    upstream_ratelimit_remaining: Family<MirrorLabels, Gauge>,
    /// Not exported (the histogram above is): kept in families so a reload,
    /// which resolves a mirror's handles again, keeps their values.
    first_byte_us: Family<MirrorLabels, Counter>,
    first_bytes: Family<MirrorLabels, Counter>,
    integrity_failures: Family<MirrorLabels, Counter>,
    upstream_fetches: Family<RemoteLabels, Counter>,
    upstream_hedges: Family<RemoteLabels, Counter>,
    pub mirror_in_flight: Family<MirrorLabels, Gauge>,
    pub mirror_healthy: Family<MirrorLabels, Gauge>,
    quarantine_refusals: Family<QuarantineLabels, Counter>,
    pub store_bytes: Gauge,
    pub store_max_bytes: Gauge,
    pub evictions: Counter,
    pub evicted_bytes: Counter,
    pub coalesced_waiters: Counter,
    pub fills_in_progress: Gauge,
    /// Group commit: batches committed, commits in them, commits queued or
    /// in the batch being committed, and fills waiting for a place in the
    /// queue (back-pressure).
    pub commit_batches: Counter,
    pub commits: Counter,
    pub commits_queued: Gauge,
    pub commits_waiting: Gauge,
    pub metadata_errors: Counter,
    pub redis_errors: Counter,
    /// The last few failures, for the dashboard.
    pub recent_errors: RecentErrors,
}

/// The counters of one remote, resolved once.
#[derive(Clone, Debug)]
pub struct RemoteCounters {
    hit: Counter,
    miss: Counter,
    revalidated: Counter,
    stale: Counter,
    pass: Counter,
    error: Counter,
    bytes: Counter,
    bytes_from_cache: Counter,
    bytes_from_upstream: Counter,
    /// Upstream fetches (one per fill that went to the mirrors).
    pub fetches: Counter,
    /// Attempts started beside a mirror that had not answered in time.
    pub hedges: Counter,
}

impl RemoteCounters {
    pub fn count(&self, cache: Option<CacheStatus>, bytes: u64) {
        match cache {
            Some(CacheStatus::Hit) => &self.hit,
            Some(CacheStatus::Miss) => &self.miss,
            Some(CacheStatus::Revalidated) => &self.revalidated,
            Some(CacheStatus::Stale) => &self.stale,
            Some(CacheStatus::Pass) => &self.pass,
            None => &self.error,
        }
        .inc();
        self.bytes.inc_by(bytes);
        let source = match cache {
            // A revalidated or stale answer is the stored body too.
            Some(CacheStatus::Hit | CacheStatus::Revalidated | CacheStatus::Stale) => {
                &self.bytes_from_cache
            }
            // A pass-through API answer comes from upstream, uncached.
            Some(CacheStatus::Miss | CacheStatus::Pass) => &self.bytes_from_upstream,
            None => return,
        };
        source.inc_by(bytes);
    }

    /// The counts the dashboard and `/-/status` show, read now.
    pub fn snapshot(&self) -> RemoteCounts {
        let (hits, total) = self.hits_and_total();
        RemoteCounts {
            hits,
            misses: total - hits,
            errors: self.error.get(),
            bytes_from_cache: self.bytes_from_cache.get(),
            bytes_from_upstream: self.bytes_from_upstream.get(),
        }
    }

    /// (hits, all answered requests) for the hit ratio.
    pub fn hits_and_total(&self) -> (u64, u64) {
        let hits = self.hit.get() + self.revalidated.get() + self.stale.get();
        (hits, hits + self.miss.get())
    }
}

/// A remote's request and byte counts at one moment.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct RemoteCounts {
    /// Answered from the store (HIT, REVALIDATED, STALE).
    pub hits: u64,
    pub misses: u64,
    /// Requests answered with an error.
    pub errors: u64,
    /// Body bytes announced to clients, by where they came from.
    pub bytes_from_cache: u64,
    pub bytes_from_upstream: u64,
}

/// The metrics of one mirror of one remote, resolved once.
#[derive(Clone, Debug)]
pub struct MirrorMetrics {
    pub first_byte: Histogram,
    /// The sum (µs) and count of the first-byte times in `first_byte`, for
    /// the dashboard's per-minute history (a histogram's sum is not public).
    pub first_byte_us: Counter,
    pub first_bytes: Counter,
    pub failures: Counter,
    /// The mirror's `RateLimit-Remaining` as its last answer said (Docker
    /// Hub's pulls left in its window); -1 until one says.
    pub ratelimit_remaining: Gauge,
    /// The process's ring of recent errors, where failed attempts are noted.
    pub recent_errors: RecentErrors,
}

impl MirrorMetrics {
    /// A response head arrived `secs` after the request went out (miss path only).
    pub fn observe_first_byte(&self, secs: f64) {
        self.first_byte.observe(secs);
        self.first_byte_us.inc_by((secs * 1e6) as u64);
        self.first_bytes.inc();
    }
}

/// How many errors [`RecentErrors`] keeps.
pub const RECENT_ERRORS: usize = 20;

/// One failure as the dashboard lists it. `what` is an error's display text,
/// which never holds a secret (the rule of the logs).
#[derive(Clone, Debug, serde::Serialize)]
pub struct RecentError {
    pub at_ms: i64,
    /// The remote, or the remote and mirror URL.
    pub source: String,
    pub what: String,
}

/// The last [`RECENT_ERRORS`] failures, newest last. Written only on failure
/// paths (a failed attempt, a 5xx answer), never on a hit.
#[derive(Clone, Debug, Default)]
pub struct RecentErrors {
    // A std mutex: held to push or copy, never across an await.
    ring: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<RecentError>>>,
}

impl RecentErrors {
    pub fn push(&self, at_ms: i64, source: String, what: String) {
        let mut ring = self.ring.lock().expect("recent errors poisoned");
        if ring.len() == RECENT_ERRORS {
            ring.pop_front();
        }
        ring.push_back(RecentError {
            at_ms,
            source,
            what,
        });
    }

    /// The errors kept, oldest first.
    pub fn list(&self) -> Vec<RecentError> {
        self.ring
            .lock()
            .expect("recent errors poisoned")
            .iter()
            .cloned()
            .collect()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("mirrorcache");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Artifact requests answered, by remote and cache status (error = no artifact)",
            requests.clone(),
        );
        let bytes_served = Family::<RemoteLabels, Counter>::default();
        registry.register(
            "served_bytes",
            "Body bytes announced to clients",
            bytes_served.clone(),
        );
        let bytes_served_by_source = Family::<SourceLabels, Counter>::default();
        registry.register(
            "bytes_served",
            "Body bytes announced to clients, by source: cache (HIT, REVALIDATED, STALE) or upstream (MISS)",
            bytes_served_by_source.clone(),
        );
        let upstream_first_byte =
            Family::<MirrorLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram as fn() -> Histogram,
            );
        registry.register(
            "upstream_first_byte_seconds",
            "Time from sending an upstream request to its response head",
            upstream_first_byte.clone(),
        );
        let upstream_ratelimit_remaining = Family::<MirrorLabels, Gauge>::default();
        registry.register(
            "upstream_ratelimit_remaining",
            "Requests the mirror's RateLimit-Remaining header said were left (Docker Hub's pull limit); -1 before one said",
            upstream_ratelimit_remaining.clone(),
        );
        let upstream_failures = Family::<MirrorLabels, Counter>::default();
        registry.register(
            "upstream_failures",
            "Failed upstream attempts (connect, timeout, 5xx, broken body)",
            upstream_failures.clone(),
        );
        let integrity_failures = Family::<MirrorLabels, Counter>::default();
        registry.register(
            "integrity_failures",
            "Bodies whose digest differed from the one their index declared (mirror \"cache\": a cached copy found wrong later)",
            integrity_failures.clone(),
        );
        let upstream_fetches = Family::<RemoteLabels, Counter>::default();
        registry.register(
            "upstream_fetches",
            "Upstream fetches (each may make several attempts)",
            upstream_fetches.clone(),
        );
        let upstream_hedges = Family::<RemoteLabels, Counter>::default();
        registry.register(
            "upstream_hedges",
            "Hedged attempts: the next mirror started because the one tried had not answered within the hedge delay",
            upstream_hedges.clone(),
        );
        let mirror_in_flight = Family::<MirrorLabels, Gauge>::default();
        registry.register(
            "mirror_in_flight",
            "Upstream requests in flight per mirror",
            mirror_in_flight.clone(),
        );
        let mirror_healthy = Family::<MirrorLabels, Gauge>::default();
        registry.register(
            "mirror_healthy",
            "1 when the mirror is selectable, 0 while ejected",
            mirror_healthy.clone(),
        );
        let store_bytes = Gauge::default();
        registry.register(
            "store_bytes",
            "Bytes of blobs in the content store",
            store_bytes.clone(),
        );
        let store_max_bytes = Gauge::default();
        registry.register(
            "store_max_bytes",
            "The configured storage.max_size",
            store_max_bytes.clone(),
        );
        let evictions = Counter::default();
        registry.register(
            "evictions",
            "Cache entries evicted to stay under storage.max_size",
            evictions.clone(),
        );
        let evicted_bytes = Counter::default();
        registry.register(
            "evicted_bytes",
            "Blob bytes deleted by eviction",
            evicted_bytes.clone(),
        );
        let coalesced_waiters = Counter::default();
        registry.register(
            "coalesced_waiters",
            "Requests that joined a fill already in progress",
            coalesced_waiters.clone(),
        );
        let fills_in_progress = Gauge::default();
        registry.register(
            "fills_in_progress",
            "Upstream fills in progress",
            fills_in_progress.clone(),
        );
        let commit_batches = Counter::default();
        registry.register(
            "commit_batches",
            "Group commits: batches of fills made durable together",
            commit_batches.clone(),
        );
        let commits = Counter::default();
        registry.register(
            "commits",
            "Fills committed (in all batches)",
            commits.clone(),
        );
        let commits_queued = Gauge::default();
        registry.register(
            "commits_queued",
            "Fills whose body has arrived, waiting for their commit to be durable",
            commits_queued.clone(),
        );
        let commits_waiting = Gauge::default();
        registry.register(
            "commits_waiting",
            "Fills waiting for a place in the full commit queue (back-pressure)",
            commits_waiting.clone(),
        );
        let quarantine_refusals = Family::<QuarantineLabels, Counter>::default();
        registry.register(
            "quarantine_refusals",
            "Artifact requests refused by the advisory quarantine, by remote and advisory class",
            quarantine_refusals.clone(),
        );
        let metadata_errors = Counter::default();
        let redis_errors = Counter::default();
        registry.register(
            "redis_errors",
            "Redis operations that failed or timed out (the instance went on alone)",
            redis_errors.clone(),
        );
        registry.register(
            "metadata_errors",
            "Metadata database operations that failed",
            metadata_errors.clone(),
        );
        Metrics {
            registry,
            requests,
            quarantine_refusals,
            bytes_served,
            bytes_served_by_source,
            upstream_first_byte,
            upstream_failures,
            upstream_ratelimit_remaining,
            first_byte_us: Family::default(),
            first_bytes: Family::default(),
            integrity_failures,
            upstream_fetches,
            upstream_hedges,
            mirror_in_flight,
            mirror_healthy,
            store_bytes,
            store_max_bytes,
            evictions,
            evicted_bytes,
            coalesced_waiters,
            fills_in_progress,
            commit_batches,
            commits,
            commits_queued,
            commits_waiting,
            metadata_errors,
            redis_errors,
            recent_errors: RecentErrors::default(),
        }
    }

    pub fn remote_counters(&self, remote: &str) -> RemoteCounters {
        let labels = RemoteLabels {
            remote: remote.to_string(),
        };
        let counter = |cache: &'static str| {
            self.requests
                .get_or_create(&RequestLabels {
                    remote: remote.to_string(),
                    cache,
                })
                .clone()
        };
        RemoteCounters {
            hit: counter("HIT"),
            miss: counter("MISS"),
            revalidated: counter("REVALIDATED"),
            stale: counter("STALE"),
            pass: counter("PASS"),
            error: counter("error"),
            bytes: self.bytes_served.get_or_create(&labels).clone(),
            bytes_from_cache: self.by_source(remote, "cache"),
            bytes_from_upstream: self.by_source(remote, "upstream"),
            fetches: self.upstream_fetches.get_or_create(&labels).clone(),
            hedges: self.upstream_hedges.get_or_create(&labels).clone(),
        }
    }

    pub fn mirror_metrics(&self, remote: &str, mirror: &str) -> MirrorMetrics {
        let labels = MirrorLabels {
            remote: remote.to_string(),
            mirror: mirror.to_string(),
        };
        MirrorMetrics {
            first_byte: self.upstream_first_byte.get_or_create(&labels).clone(),
            first_byte_us: self.first_byte_us.get_or_create(&labels).clone(),
            first_bytes: self.first_bytes.get_or_create(&labels).clone(),
            failures: self.upstream_failures.get_or_create(&labels).clone(),
            ratelimit_remaining: {
                let gauge = self
                    .upstream_ratelimit_remaining
                    .get_or_create(&labels)
                    .clone();
                if gauge.get() == 0 {
                    gauge.set(-1);
                }
                gauge
            },
            recent_errors: self.recent_errors.clone(),
        }
    }

    /// Counts a body that did not match its declared digest.
    /// Counts an artifact request the quarantine refused.
    pub fn quarantine_refusal(&self, remote: &str, class: &'static str) {
        let labels = QuarantineLabels {
            remote: remote.to_string(),
            class,
        };
        self.quarantine_refusals.get_or_create(&labels).inc();
    }

    pub fn integrity_failure(&self, remote: &str, mirror: &str) {
        self.integrity_failures
            .get_or_create(&MirrorLabels {
                remote: remote.to_string(),
                mirror: mirror.to_string(),
            })
            .inc();
    }

    fn by_source(&self, remote: &str, source: &'static str) -> Counter {
        self.bytes_served_by_source
            .get_or_create(&SourceLabels {
                remote: remote.to_string(),
                source,
            })
            .clone()
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
