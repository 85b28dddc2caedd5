//! One reading of what the operations pages show: `/-/status` serialises it,
//! the dashboard (`/-/`) renders it. Both read the same atomics and counters
//! the request path already keeps; taking a snapshot writes nothing.

use serde::Serialize;

use crate::clock::now_ms;
use crate::fill::FillProgress;
use crate::metrics::{RecentError, RemoteCounts};
use crate::proxy::Proxy;

#[derive(Debug, Serialize)]
pub struct Snapshot {
    pub remotes: Vec<RemoteView>,
    /// Over every remote.
    pub hit_ratio: f64,
    /// `None` (JSON `null`) for a caller some remote does not admit: the
    /// total counts that remote's bytes too.
    pub store_bytes: Option<u64>,
    pub store_max_bytes: u64,
    pub fills_in_progress: usize,
    pub fills: Vec<FillProgress>,
    /// Oldest first.
    pub recent_errors: Vec<RecentError>,
    /// When the snapshot was taken (unix ms).
    pub now_ms: i64,
    /// The `[[advisories]]` feeds: what is in force, and why a read failed.
    pub advisories: Vec<crate::advisories::FeedStatus>,
    /// What the quarantine refused, the latest first.
    pub quarantine_refusals: Vec<crate::advisories::Refusal>,
}

#[derive(Debug, Serialize)]
pub struct RemoteView {
    pub name: String,
    pub kind: &'static str,
    pub strategy: String,
    pub mirrors: Vec<MirrorView>,
    /// Answered requests (hits and misses).
    pub requests: u64,
    pub hit_ratio: f64,
    #[serde(flatten)]
    pub counts: RemoteCounts,
}

#[derive(Debug, Serialize)]
pub struct MirrorView {
    /// As configured: credentials are never in a mirror URL.
    pub url: String,
    pub in_flight: usize,
    /// `healthy`, `ejected` or `probation`; `hidden` where the mirror is
    /// shared with a remote the caller may not read.
    pub health: &'static str,
    pub consecutive_failures: u32,
    /// When the cooldown ends (unix ms), while ejected or on probation.
    pub ejected_until_ms: Option<i64>,
    /// The first-byte latency estimate as last updated; none before the
    /// first answer.
    pub first_byte_ms: Option<f64>,
    /// Failed attempts since start.
    pub failures: u64,
    /// Until when (unix ms) the mirror is not asked, after a 429.
    pub rate_limited_until_ms: Option<i64>,
    /// What the mirror's last `RateLimit-Remaining` said (Docker Hub).
    pub ratelimit_remaining: Option<i64>,
}

impl MirrorView {
    /// Takes out what the mirror's remotes share (its in-flight gauge, its
    /// health and latency are kept by URL): for a caller who may not read
    /// every remote that lists the mirror. `failures` is this remote's own.
    pub fn hide_shared_state(&mut self) {
        self.in_flight = 0;
        self.health = "hidden";
        self.consecutive_failures = 0;
        self.ejected_until_ms = None;
        self.first_byte_ms = None;
        self.rate_limited_until_ms = None;
    }
}

impl Snapshot {
    pub fn take(proxy: &Proxy) -> Snapshot {
        let now = now_ms();
        let remotes = proxy.remotes();
        let mut names: Vec<&String> = remotes.keys().collect();
        names.sort();
        let (mut all_hits, mut all_total) = (0, 0);
        let remotes = names
            .into_iter()
            .map(|name| {
                let remote = &remotes[name];
                let counts = remote.counters.snapshot();
                let total = counts.hits + counts.misses;
                all_hits += counts.hits;
                all_total += total;
                let mirrors = remote
                    .mirror_sets()
                    .flat_map(|set| {
                        set.mirrors
                            .iter()
                            .zip(&set.health)
                            .zip(&set.metrics)
                            .map(|((mirror, health), metrics)| (mirror, health, metrics))
                    })
                    .map(|(mirror, health, metrics)| {
                        let first_byte = mirror.last_first_byte().nanos;
                        MirrorView {
                            url: mirror.base().to_string(),
                            in_flight: mirror.in_flight(),
                            health: health.state(now).as_str(),
                            consecutive_failures: health.consecutive_failures(),
                            ejected_until_ms: health.ejected_until_ms(),
                            first_byte_ms: (first_byte > 0.0).then(|| first_byte / 1e6),
                            failures: metrics.failures.get(),
                            rate_limited_until_ms: health.rate_limited_until_ms(now),
                            ratelimit_remaining: Some(metrics.ratelimit_remaining.get())
                                .filter(|&left| left >= 0),
                        }
                    })
                    .collect();
                RemoteView {
                    name: name.clone(),
                    kind: remote.config.kind.name(),
                    strategy: format!("{:?}", remote.config.strategy),
                    mirrors,
                    requests: total,
                    hit_ratio: ratio(counts.hits, total),
                    counts,
                }
            })
            .collect();
        let fills = proxy.fills.snapshot();
        Snapshot {
            remotes,
            hit_ratio: ratio(all_hits, all_total),
            store_bytes: Some(proxy.cache.size()),
            store_max_bytes: proxy.cache.max_size(),
            fills_in_progress: fills.len(),
            fills,
            recent_errors: proxy.metrics.recent_errors.list(),
            now_ms: now,
            advisories: proxy.advisories.status(),
            quarantine_refusals: proxy.advisories.refusals.list(),
        }
    }
}

fn ratio(hits: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        hits as f64 / total as f64
    }
}
