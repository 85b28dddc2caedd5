//! Single-flight: many concurrent cold requests, one upstream fetch.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use crate::support::proxy::config_text;
use crate::support::{
    sha256_hex, test_bytes, wait_until, BinaryProxy, Fault, MirrorServer, TestProxy,
};

/// Streams a body through sha256, returning (digest, time to first byte).
async fn fetch_hashed(
    client: &reqwest::Client,
    url: &str,
) -> (u16, String, Duration, Result<String, String>) {
    let started = Instant::now();
    let response = client.get(url).send().await.unwrap();
    let status = response.status().as_u16();
    let cache = response
        .headers()
        .get("x-cache-status")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let mut stream = response.bytes_stream();
    let mut hasher = Sha256::new();
    let mut first_byte = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => {
                first_byte.get_or_insert_with(|| started.elapsed());
                hasher.update(&chunk);
            }
            Err(e) => return (status, cache, Duration::ZERO, Err(e.to_string())),
        }
    }
    (
        status,
        cache,
        first_byte.unwrap_or_default(),
        Ok(hex::encode(hasher.finalize())),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_misses_make_one_upstream_request_and_stream_early() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(4 * 1024 * 1024, 7);
    let expected = sha256_hex(&body);
    mirror.put("/m/big.bin", body);
    // 64 pieces, 20 ms apart: the fill takes over a second, so every client
    // arrives while it runs and must get bytes long before it ends.
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(20)));
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\n",
        mirror.url("/m")
    ))
    .await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(200)
        .build()
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let (client, url) = (client.clone(), proxy.url("/r/big.bin"));
            tokio::spawn(async move { fetch_hashed(&client, &url).await })
        })
        .collect();
    let mut first_bytes = Vec::new();
    for task in tasks {
        let (status, cache, first_byte, digest) = task.await.unwrap();
        assert_eq!((status, cache.as_str()), (200, "MISS"));
        assert_eq!(digest.unwrap(), expected);
        first_bytes.push(first_byte);
    }
    let fill_time = started.elapsed();
    assert_eq!(mirror.hits("/m/big.bin"), 1);
    let latest_first_byte = first_bytes.iter().max().unwrap();
    assert!(
        *latest_first_byte < fill_time / 2,
        "every client must receive bytes while the fill runs: latest first byte {latest_first_byte:?}, fill {fill_time:?}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_does_not_cancel_the_fill() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(1024 * 1024, 8);
    mirror.put("/m/f.bin", body.clone());
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(10)));
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\n",
        mirror.url("/m")
    ))
    .await;
    let client = reqwest::Client::new();
    let response = client.get(proxy.url("/r/f.bin")).send().await.unwrap();
    drop(response);
    // The fill goes on without its first client and commits.
    wait_until("the fill to commit", async || {
        let response = client.head(proxy.url("/r/f.bin")).send().await.unwrap();
        response.headers()["x-cache-status"] == "HIT"
    })
    .await;
    assert_eq!(mirror.hits("/m/f.bin"), 1);
    proxy.stop().await;
}

pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The target, against the real binary: 100 concurrent cold requests
/// for one 64 MiB artifact → 1 upstream request, 100 correct bodies, peak RSS
/// of the proxy process under 200 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_of_64_mib_to_100_clients_in_the_real_binary() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(64 * 1024 * 1024, 64);
    let expected = sha256_hex(&body);
    mirror.put("/m/64m.bin", body);

    let dir = tempfile::tempdir().unwrap();
    let remote = format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\n",
        mirror.url("/m")
    );
    let proxy = BinaryProxy::start(dir.path(), &config_text(dir.path(), &remote)).await;
    let base = proxy.base.clone();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(200)
        .build()
        .unwrap();

    let started = Instant::now();
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let (client, url) = (client.clone(), format!("{base}/r/64m.bin"));
            tokio::spawn(async move { fetch_hashed(&client, &url).await })
        })
        .collect();
    for task in tasks {
        let (status, _, _, digest) = task.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(digest.unwrap(), expected);
    }
    let elapsed = started.elapsed();
    let rss_mib = peak_rss_kib(proxy.pid()) / 1024;
    println!("fan-out 100 x 64 MiB: upstream requests {}, wall {elapsed:?}, proxy peak RSS {rss_mib} MiB", mirror.hits("/m/64m.bin"));
    assert_eq!(mirror.hits("/m/64m.bin"), 1);
    assert!(rss_mib < 200, "proxy peak RSS {rss_mib} MiB");
}
