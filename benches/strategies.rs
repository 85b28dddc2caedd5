//! The strategies on real traffic: the proxy runs in-process in front of three
//! loopback mirrors whose first byte takes 2 ms, 20 ms and 80 ms, and 16
//! clients fetch distinct paths (every fetch a miss, so every fetch picks a
//! mirror). For each strategy, and for a baseline remote that lists only the
//! 2 ms mirror ("always the best mirror"), it prints the mean and p99 time to
//! first byte as the clients see it, and the share of fetches each mirror
//! served.
//!
//! Each run starts a fresh proxy (nothing learnt, nothing cached) and makes
//! two phases of 400 fetches: "cold", from the start, includes learning which
//! mirror is fast; "warm", right after, is the steady state a long-running
//! proxy is in. Each case is run three times; the table shows the median of
//! the three runs for each figure. Traffic goes only to 127.0.0.1 and every
//! loop is bounded.
//!
//! Command (as recorded):
//!     cargo bench --bench strategies
//! Results are recorded in BENCHMARKS.md, section "Strategies over loopback
//! mirrors".

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::header;
use axum::response::IntoResponse;
use mirrorcache::config::Config;
use mirrorcache::http::server::Running;

/// First-byte delays of the mirrors, in the order the remote lists them
/// (`single` uses the first listed: its result is whichever mirror that is).
const MIRROR_DELAYS_MS: [u64; 3] = [20, 2, 80];
const BEST_MIRROR: usize = 1;
const FETCHES_PER_PHASE: usize = 400;
const CONCURRENT_CLIENTS: usize = 16;
const RUNS: usize = 3;
const BODY_BYTES: usize = 4 * 1024;

/// A loopback mirror that waits `delay` before every response head.
struct SlowMirror {
    addr: SocketAddr,
    delay_ms: u64,
    requests: Arc<AtomicUsize>,
}

impl SlowMirror {
    async fn start(delay_ms: u64) -> SlowMirror {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        let router = axum::Router::new().fallback(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                (
                    [(header::CONTENT_TYPE, "application/octet-stream")],
                    vec![b'x'; BODY_BYTES],
                )
                    .into_response()
            }
        });
        // Runs until the bench process exits.
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        SlowMirror {
            addr,
            delay_ms,
            requests,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/m", self.addr)
    }
}

/// What one phase measured.
struct Phase {
    mean_ms: f64,
    p99_ms: f64,
    /// Share of the phase's fetches each mirror served, in percent.
    share: Vec<f64>,
}

/// `n_fetches` distinct cold fetches, numbered from `first`, by 16 clients.
async fn phase(
    client: &reqwest::Client,
    proxy: &Running,
    mirrors: &[SlowMirror],
    first: usize,
    n_fetches: usize,
) -> Phase {
    let before: Vec<usize> = mirrors
        .iter()
        .map(|m| m.requests.load(Ordering::Relaxed))
        .collect();
    let next = Arc::new(AtomicUsize::new(first));
    let end = first + n_fetches;
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENT_CLIENTS {
        let (client, next) = (client.clone(), next.clone());
        let base = format!("http://{}/r", proxy.local_addr);
        clients.spawn(async move {
            let mut ttfb = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= end {
                    return ttfb;
                }
                let sent = Instant::now();
                let response = client.get(format!("{base}/f{n}")).send().await.unwrap();
                ttfb.push(sent.elapsed());
                let status = response.status();
                let body = response.bytes().await.unwrap();
                assert_eq!(status, 200, "fetch {n}: {}", String::from_utf8_lossy(&body));
                assert_eq!(body.len(), BODY_BYTES);
            }
        });
    }
    let mut ttfb: Vec<Duration> = clients.join_all().await.into_iter().flatten().collect();
    // Let the last fills commit, so the next phase starts from a quiet proxy.
    proxy.proxy.fills.wait_idle().await;
    ttfb.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p99_rank = (ttfb.len() * 99).div_ceil(100);
    Phase {
        mean_ms: ttfb.iter().map(|&d| ms(d)).sum::<f64>() / ttfb.len() as f64,
        p99_ms: ms(ttfb[p99_rank - 1]),
        share: mirrors
            .iter()
            .zip(before)
            .map(|(m, before)| {
                let served = m.requests.load(Ordering::Relaxed) - before;
                100.0 * served as f64 / n_fetches as f64
            })
            .collect(),
    }
}

/// One run: a fresh proxy whose remote lists `listed` with `strategy`.
async fn run(
    client: &reqwest::Client,
    mirrors: &[SlowMirror],
    listed: &[usize],
    strategy: &str,
) -> (Phase, Phase) {
    let dir = tempfile::tempdir().unwrap();
    let urls: Vec<String> = listed
        .iter()
        .map(|&i| format!("\"{}\"", mirrors[i].url()))
        .collect();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[storage]\npath = \"{dir}/store\"\n\n\
         [metadata]\nurl = \"sqlite://{dir}/meta.db\"\n\n\
         [[remote]]\nname = \"r\"\nmirrors = [{urls}]\nstrategy = \"{strategy}\"\n",
        dir = dir.path().display(),
        urls = urls.join(", "),
    );
    let config = Config::parse(&text, "bench").unwrap();
    let proxy = Running::start(&config).await.unwrap();
    let cold = phase(client, &proxy, mirrors, 0, FETCHES_PER_PHASE).await;
    let warm = phase(
        client,
        &proxy,
        mirrors,
        FETCHES_PER_PHASE,
        FETCHES_PER_PHASE,
    )
    .await;
    proxy.shutdown().await;
    (cold, warm)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut mirrors = Vec::new();
        for delay in MIRROR_DELAYS_MS {
            mirrors.push(SlowMirror::start(delay).await);
        }
        let all: Vec<usize> = (0..mirrors.len()).collect();
        let cases: [(&str, &[usize], &str); 5] = [
            ("single", &all, "single"),
            ("round_robin", &all, "round_robin"),
            ("least_conn", &all, "least_conn"),
            ("fastest", &all, "fastest"),
            ("best only", &[BEST_MIRROR], "single"),
        ];
        let client = reqwest::Client::new();
        let delays: Vec<String> = mirrors
            .iter()
            .map(|m| format!("{} ms", m.delay_ms))
            .collect();
        println!(
            "mirrors listed: {}; {FETCHES_PER_PHASE} fetches per phase, \
             {CONCURRENT_CLIENTS} clients, median of {RUNS} runs",
            delays.join(", ")
        );
        println!(
            "{:<12} {:>10} {:>10} {:>10} {:>10}   warm share per mirror ({})",
            "strategy",
            "cold mean",
            "cold p99",
            "warm mean",
            "warm p99",
            delays.join(" / ")
        );
        for (name, listed, strategy) in cases {
            let mut runs = Vec::new();
            for _ in 0..RUNS {
                runs.push(run(&client, &mirrors, listed, strategy).await);
            }
            for (i, (cold, warm)) in runs.iter().enumerate() {
                eprintln!(
                    "  {name} run {i}: cold {:.2}/{:.2} ms, warm {:.2}/{:.2} ms (mean/p99)",
                    cold.mean_ms, cold.p99_ms, warm.mean_ms, warm.p99_ms
                );
            }
            let of = |figure: fn(&(Phase, Phase)) -> f64| median(runs.iter().map(figure).collect());
            // Shares are of the listed mirrors; put them back in mirror order.
            let share: Vec<String> = (0..mirrors.len())
                .map(|mirror| match listed.iter().position(|&l| l == mirror) {
                    Some(_) => {
                        let per_run = runs.iter().map(|(_, warm)| warm.share[mirror]).collect();
                        format!("{:.1}%", median(per_run))
                    }
                    None => "-".to_string(),
                })
                .collect();
            println!(
                "{name:<12} {:>7.2} ms {:>7.2} ms {:>7.2} ms {:>7.2} ms   {}",
                of(|r| r.0.mean_ms),
                of(|r| r.0.p99_ms),
                of(|r| r.1.mean_ms),
                of(|r| r.1.p99_ms),
                share.join(" / ")
            );
        }
    });
}
