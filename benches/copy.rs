//! The miss path's tee (upstream socket → client socket + temp file + sha256)
//! against a plain `tokio::io::copy` between the same sockets, end to end
//! over TCP on 127.0.0.1.
//!
//! The fill is not a standalone function, so both sides are whole paths:
//! - upstream: a raw TCP server answering `GET /{n}/{len}/{anything}` with a
//!   `Content-Length` body written as `n` separate writes of `len` bytes
//!   (TCP_NODELAY, so small messages reach the reader as small reads, which is
//!   what stresses the per-chunk cost of the tee);
//! - `mirrorcache_miss`: client → mirrorcache (in-process, one remote, a fresh
//!   path every iteration, so every request is a fill; set up by
//!   `benches/support/proxy.rs`, shared with the overhead bench) → upstream;
//! - `tokio_io_copy`: client → a minimal relay (per connection: connect
//!   upstream, `tokio::io::copy` each way) → upstream.
//!
//! The client (reqwest, one kept-alive connection) reads every body to the end.
//! The timed region ends when the client has the last byte; the fill's commit
//! (fsync, rename, SQL row) runs after that and is waited for, and the cache
//! purged, outside the timed region. The ratio `tokio_io_copy / mirrorcache`
//! of the times is the tee's relative throughput (target ≥ 0.8).
//!
//! Command: `cargo bench --bench copy`
//! Results: BENCHMARKS.md, "Criterion: tee vs tokio::io::copy".

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "support/proxy.rs"]
mod proxy;
use proxy::ProxyBench;

/// (messages, bytes per message): the shapes the upstream writes.
const MATRIX: [(usize, usize); 6] = [
    (10_000, 170),
    (500, 320),
    (9_000, 2_900),
    (5_000, 30_000),
    (10_000, 10),
    (10_000, 15),
];

const ADMIN_TOKEN: &str = "bench-token";

/// Serves one connection: requests one after another (keep-alive), each
/// answered with `n` writes of `len` bytes.
async fn upstream_connection(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let payload = vec![0x61u8; 64 * 1024];
    let mut buf = Vec::with_capacity(4096);
    loop {
        // Read one request head.
        let head_end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let mut chunk = [0u8; 4096];
            let read = stream.read(&mut chunk).await?;
            if read == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..read]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let path = head.split(' ').nth(1).unwrap_or("/");
        let mut parts = path.split('/').skip(1);
        let n: usize = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let len: usize = parts
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
            .min(payload.len());
        let response_head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\n\r\n",
            n * len
        );
        stream.write_all(response_head.as_bytes()).await?;
        for _ in 0..n {
            stream.write_all(&payload[..len]).await?;
        }
    }
}

/// The baseline: a byte pipe, client ⇄ upstream, `tokio::io::copy` each way.
async fn relay_connection(
    client: TcpStream,
    upstream: std::net::SocketAddr,
) -> std::io::Result<()> {
    let upstream = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let (up, down) = tokio::join!(
        tokio::io::copy(&mut client_read, &mut upstream_write),
        tokio::io::copy(&mut upstream_read, &mut client_write),
    );
    up.and(down).map(|_| ())
}

struct Bench {
    shared: ProxyBench,
    relay: String,
    next_path: AtomicU64,
}

impl Bench {
    fn start() -> Bench {
        let (shared, relay) = ProxyBench::start(
            "copy.toml",
            &format!("admin_token = \"{ADMIN_TOKEN}\"\n"),
            || async {
                let upstream = TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind upstream");
                let upstream_addr = upstream.local_addr().expect("upstream address");
                tokio::spawn(async move {
                    while let Ok((stream, _)) = upstream.accept().await {
                        tokio::spawn(upstream_connection(stream));
                    }
                });
                let relay = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
                let relay_addr = relay.local_addr().expect("relay address");
                tokio::spawn(async move {
                    while let Ok((stream, _)) = relay.accept().await {
                        tokio::spawn(relay_connection(stream, upstream_addr));
                    }
                });
                (
                    format!("http://{upstream_addr}"),
                    format!("http://{relay_addr}"),
                )
            },
        );
        Bench {
            shared,
            relay,
            next_path: AtomicU64::new(0),
        }
    }

    /// Fetches `url` and reads the body to the end, chunk by chunk (so a
    /// 150 MB body is not held in memory); returns the bytes read.
    async fn fetch(&self, url: &str) -> u64 {
        let mut response = self.shared.client.get(url).send().await.expect("request");
        assert!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        let mut read = 0;
        while let Some(chunk) = response.chunk().await.expect("body") {
            read += chunk.len() as u64;
        }
        read
    }

    /// `iters` fetches from `base` of fresh paths of shape `n`×`len`, timed
    /// from request to last byte; then (untimed) waits for fills to commit and
    /// purges the cache, so the store does not grow without bound.
    fn time(&self, iters: u64, base: &str, n: usize, len: usize) -> Duration {
        self.shared.runtime.block_on(async {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let id = self.next_path.fetch_add(1, Ordering::Relaxed);
                let url = format!("{base}/{n}/{len}/{id}");
                let start = Instant::now();
                let read = self.fetch(&url).await;
                total += start.elapsed();
                assert_eq!(read, (n * len) as u64, "{url}");
            }
            self.shared.running.proxy.fills.wait_idle().await;
            if base == self.proxy_base() {
                let purge = format!("{}/-/cache/o/purge", self.shared.proxy);
                let response = self
                    .shared
                    .client
                    .post(purge)
                    .bearer_auth(ADMIN_TOKEN)
                    .send()
                    .await
                    .expect("purge");
                assert!(
                    response.status().is_success(),
                    "purge: {}",
                    response.status()
                );
            }
            total
        })
    }

    fn proxy_base(&self) -> String {
        format!("{}/o", self.shared.proxy)
    }
}

fn tee(c: &mut Criterion) {
    let bench = Bench::start();
    let proxy_base = bench.proxy_base();
    let mut group = c.benchmark_group("tee");
    // Each iteration is a whole transfer (up to 150 MB): same iteration
    // count in every sample.
    group.sampling_mode(SamplingMode::Flat);
    for (n, len) in MATRIX {
        let label = format!("{n}x{len}B");
        group.throughput(Throughput::Bytes((n * len) as u64));
        group.bench_function(BenchmarkId::new("tokio_io_copy", &label), |b| {
            b.iter_custom(|iters| bench.time(iters, &bench.relay, n, len))
        });
        group.bench_function(BenchmarkId::new("mirrorcache_miss", &label), |b| {
            b.iter_custom(|iters| bench.time(iters, &proxy_base, n, len))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // Ten samples of short runs: the whole matrix takes a few minutes on a
    // shared 2-core machine.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = tee
}
criterion_main!(benches);
