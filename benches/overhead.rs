//! The proxy's overhead over real sockets: one client fetching an artifact
//! through mirrorcache (a hit, and a miss on a fresh path every iteration)
//! against the same client fetching it straight from the origin.
//!
//! Everything runs in this process on 127.0.0.1: the origin is a small axum
//! server answering `/size/{bytes}/{anything}` with that many bytes; the proxy
//! is `mirrorcache::http::server::Running` with one remote `o` pointing at it
//! (`immutable = ["**"]`, store and SQLite in a temp dir, no log subscriber, so
//! the per-request log line costs nothing here; that set-up is
//! `benches/support/proxy.rs`, shared with the copy bench). One request at a
//! time on a kept-alive connection: the figures are latencies, and the ratio
//! `through_proxy / direct` is the overhead.
//!
//! Command: `cargo bench --bench overhead`
//! Results: BENCHMARKS.md, "Criterion: proxy overhead".

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Uri;
use axum::response::Response;
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tokio::net::TcpListener;

#[path = "support/proxy.rs"]
mod proxy;
use proxy::ProxyBench;

/// Object sizes fetched: a small index file, a typical package, a large one.
const SIZES: [(usize, &str); 3] = [(1024, "1KiB"), (64 * 1024, "64KiB"), (1024 * 1024, "1MiB")];

struct Bench {
    shared: ProxyBench,
    origin: String,
    /// The remote `o` on the proxy: `http://ADDR/o`.
    proxy: String,
    /// Makes every miss path new, across sizes and samples.
    next_miss: AtomicU64,
}

/// The origin: `/size/{n}/...` answers `n` bytes (slices of one buffer, so the
/// origin costs the same whoever asks).
async fn origin_handler(uri: Uri) -> Response {
    static BODY: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    let body = BODY.get_or_init(|| Bytes::from(vec![0x5a; 4 * 1024 * 1024]));
    let n: usize = uri
        .path()
        .split('/')
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
        .min(body.len());
    Response::builder()
        .header("content-type", "application/octet-stream")
        .body(Body::from(body.slice(..n)))
        .expect("a valid response")
}

impl Bench {
    fn start() -> Bench {
        let (shared, origin) = ProxyBench::start("overhead.toml", "", || async {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
            let origin = format!("http://{}", listener.local_addr().expect("origin address"));
            let app = axum::Router::new().fallback(origin_handler);
            tokio::spawn(async move { axum::serve(listener, app).await });
            (origin.clone(), origin)
        });
        let proxy = format!("{}/o", shared.proxy);
        Bench {
            shared,
            origin,
            proxy,
            next_miss: AtomicU64::new(0),
        }
    }

    async fn fetch(&self, url: &str, expected: usize) {
        let response = self.shared.client.get(url).send().await.expect("request");
        assert!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        let body = response.bytes().await.expect("body");
        assert_eq!(body.len(), expected, "{url}");
    }

    /// Runs `iters` fetches of what `url` names and returns their total time.
    fn time(&self, iters: u64, size: usize, url: impl Fn() -> String) -> Duration {
        self.shared.runtime.block_on(async {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let url = url();
                let start = Instant::now();
                self.fetch(&url, size).await;
                total += start.elapsed();
            }
            // Let the misses' commits (fsync, rename, SQL) finish outside the
            // timed region, so one sample's background work does not land
            // on the next sample.
            self.shared.running.proxy.fills.wait_idle().await;
            total
        })
    }
}

fn overhead(c: &mut Criterion) {
    let bench = Bench::start();
    let mut group = c.benchmark_group("overhead");
    for (size, label) in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        let direct = format!("{}/size/{size}/direct", bench.origin);
        group.bench_function(BenchmarkId::new("direct", label), |b| {
            b.iter_custom(|iters| bench.time(iters, size, || direct.clone()))
        });

        let hot = format!("{}/size/{size}/hot", bench.proxy);
        bench.shared.runtime.block_on(async {
            bench.fetch(&hot, size).await;
            bench.shared.running.proxy.fills.wait_idle().await;
        });
        group.bench_function(BenchmarkId::new("proxy_hit", label), |b| {
            b.iter_custom(|iters| bench.time(iters, size, || hot.clone()))
        });

        group.bench_function(BenchmarkId::new("proxy_miss", label), |b| {
            b.iter_custom(|iters| {
                bench.time(iters, size, || {
                    let n = bench.next_miss.fetch_add(1, Ordering::Relaxed);
                    format!("{}/size/{size}/miss-{n}", bench.proxy)
                })
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // Short runs: the machine is shared, and the ratios matter, not the last
    // percent of precision.
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(1000))
        .measurement_time(Duration::from_secs(3));
    targets = overhead
}
criterion_main!(benches);
