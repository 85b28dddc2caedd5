//! Hardening against what users hit: a hung mirror (hedged attempts), late
//! arrivals around a fill's commit (one upstream fetch), encoded upstream
//! bodies, and the bounds on fills, slow readers and panics.

use std::time::{Duration, Instant};

use crate::support::proxy::{get, get_text, metric};
use crate::support::{sha256_hex, test_bytes, toml_urls, Fault, MirrorServer, TestProxy};

fn remote(name: &str, mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"{name}\"\nmirrors = {}\n{extra}\n",
        toml_urls(mirrors, "/m")
    )
}

/// A mirror that accepts connections and never answers costs a hedge delay,
/// not the 30 s `first_byte_timeout`, and is ejected after a few such losses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_mirror_costs_a_hedge_delay_not_the_first_byte_timeout() {
    let mirrors = [
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    ];
    let body = |i: u64| test_bytes(2000, i);
    for m in &mirrors {
        for i in 0..30 {
            m.put(&format!("/m/f{i}"), body(i));
        }
    }
    let hung = &mirrors[1];
    hung.set_fault(Fault::SlowFirstByte(Duration::from_secs(120)));
    // The default config but for the strategy: first_byte_timeout is 30 s.
    let proxy = TestProxy::start(&remote(
        "r",
        &[&mirrors[0], &mirrors[1], &mirrors[2]],
        "strategy = \"round_robin\"",
    ))
    .await;
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut times = Vec::new();
    for i in 0..30u64 {
        let t = Instant::now();
        let (status, _, bytes) = get(&client, &proxy.url(&format!("/r/f{i}"))).await;
        assert_eq!(status, 200);
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body(i)));
        times.push(t.elapsed());
    }
    let total = started.elapsed();
    let slowest = *times.iter().max().unwrap();
    let mut last20 = times[10..].to_vec();
    last20.sort();
    eprintln!(
        "30 requests in {total:?}; slowest {slowest:?}; median of the last 20 {:?}; hung mirror got {}",
        last20[10],
        hung.total()
    );
    // Never the first-byte timeout: each request costs at most a hedge delay
    // (capped at 2 s) plus the work, with room for a loaded machine.
    assert!(slowest < Duration::from_secs(10), "slowest {slowest:?}");
    // Three lost races eject it; later requests skip it but for a probe after
    // each cooldown (and, on a loaded machine, a hedge from a slow healthy
    // mirror may land there too).
    assert!(hung.total() <= 8, "hung mirror got {}", hung.total());
    let metrics = get_text(&client, &proxy.url("/-/metrics")).await;
    let hedges = metric(&metrics, "mirrorcache_upstream_hedges_total");
    assert!(hedges >= 3.0, "hedges counted: {hedges}");
    assert_eq!(metric(&metrics, "mirrorcache_upstream_fetches_total"), 30.0);
    proxy.stop().await;
}

/// `hedge_after = "off"` gives a mirror its whole first-byte timeout, and a
/// fixed `hedge_after` is honoured.
#[tokio::test]
async fn hedge_after_off_waits_and_a_fixed_delay_hedges() {
    let [slow, fast] = [MirrorServer::start().await, MirrorServer::start().await];
    for m in [&slow, &fast] {
        m.put("/m/a", test_bytes(100, 1));
        m.put("/m/b", test_bytes(100, 2));
    }
    slow.set_fault(Fault::SlowFirstByte(Duration::from_millis(700)));
    let config = format!(
        "{}{}",
        remote(
            "off",
            &[&slow, &fast],
            "strategy = \"single\"\nhedge_after = \"off\""
        ),
        remote(
            "fixed",
            &[&slow, &fast],
            "strategy = \"single\"\nhedge_after = \"100ms\""
        )
    );
    let proxy = TestProxy::start(&config).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/off/a")).await.0, 200);
    assert_eq!((slow.hits("/m/a"), fast.hits("/m/a")), (1, 0));
    assert_eq!(get(&client, &proxy.url("/fixed/b")).await.0, 200);
    assert_eq!((slow.hits("/m/b"), fast.hits("/m/b")), (1, 1));
    proxy.stop().await;
}

/// Clients arriving over a fill and just after its commit make exactly one
/// upstream request, in every one of 20 runs. (200 clients in a burst keep
/// SQLite's small pool busy, so a lookup can straddle the commit: the case
/// that made a second fetch.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_arrivals_around_the_commit_make_one_upstream_request() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(192 * 1024, 7);
    for run in 0..20 {
        mirror.put(&format!("/m/late{run}"), body.clone());
    }
    // 3 pieces of 64 KiB, 10 ms apart: a fill of about 30 ms.
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(10)));
    let proxy = TestProxy::start(&remote("r", &[&mirror], "")).await;
    let client = reqwest::Client::new();
    for run in 0..20 {
        let url = proxy.url(&format!("/r/late{run}"));
        let mut clients = Vec::new();
        for i in 0..200u64 {
            let (client, url) = (client.clone(), url.clone());
            clients.push(tokio::spawn(async move {
                // Spread over the fill and the 30 ms after it.
                tokio::time::sleep(Duration::from_micros(i * 300)).await;
                let (status, _, bytes) = get(&client, &url).await;
                (status, sha256_hex(&bytes.unwrap()))
            }));
        }
        for c in clients {
            assert_eq!(c.await.unwrap(), (200, sha256_hex(&body)));
        }
        assert_eq!(
            mirror.hits(&format!("/m/late{run}")),
            1,
            "run {run}: one upstream request"
        );
    }
    proxy.stop().await;
}

/// Starts a proxy with extra `[server]` keys; returns it with its temp dir.
async fn start_with_server_keys(
    server_keys: &str,
    remotes: &str,
) -> (mirrorcache::http::server::Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let text = crate::support::proxy::config_text(dir.path(), remotes)
        .replace("[server]\n", &format!("[server]\n{server_keys}\n"));
    (crate::support::proxy::start_text(&text).await, dir)
}

/// Beyond `max_fills` a miss gets 503 with Retry-After; a fill whose client
/// went away still finishes (and counts until then), warming the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fills_beyond_max_fills_get_503_and_an_abandoned_fill_still_finishes() {
    let mirror = MirrorServer::start().await;
    let big = test_bytes(1024 * 1024, 3);
    mirror.put("/m/big", big.clone());
    mirror.put("/m/small", test_bytes(100, 4));
    // 16 pieces, 50 ms apart: the fill of /big takes about 0.8 s.
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(50)));
    let (running, _dir) =
        start_with_server_keys("max_fills = 1", &remote("r", &[&mirror], "")).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    // Start /big and walk away once its head is in.
    let response = client.get(format!("{base}/r/big")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    drop(response);
    let busy = client.get(format!("{base}/r/small")).send().await.unwrap();
    assert_eq!(busy.status(), 503);
    assert_eq!(busy.headers()["retry-after"], "1");
    running.proxy.fills.wait_idle().await;
    let (status, cache, bytes) = get(&client, &format!("{base}/r/big")).await;
    assert_eq!(
        (status, cache.as_str()),
        (200, "HIT"),
        "the abandoned fill finished"
    );
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&big));
    assert_eq!(get(&client, &format!("{base}/r/small")).await.0, 200);
    assert_eq!(mirror.hits("/m/big"), 1);
    running.shutdown().await;
}

/// A client that reads nothing is dropped after `send_timeout`, freeing its
/// connection slot; the fill it was reading completes and is cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_nothing_is_dropped_after_send_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mirror = MirrorServer::start().await;
    let body = test_bytes(16 * 1024 * 1024, 5);
    mirror.put("/m/big", body.clone());
    let (running, _dir) = start_with_server_keys(
        "send_timeout = \"300ms\"\nmax_connections = 1",
        &remote("r", &[&mirror], ""),
    )
    .await;
    let addr = running.local_addr;
    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(b"GET /r/big HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // Read nothing while the socket buffers fill and the timeout passes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut received = Vec::new();
    let read =
        tokio::time::timeout(Duration::from_secs(20), stalled.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the connection was closed");
    assert!(
        received.len() < body.len(),
        "got {} of {} bytes: the stalled client was cut off",
        received.len(),
        body.len()
    );
    // The slot is free again, and the fill went on to completion.
    running.proxy.fills.wait_idle().await;
    let client = reqwest::Client::new();
    let (status, cache, bytes) = get(&client, &format!("http://{addr}/r/big")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));
    assert_eq!(mirror.hits("/m/big"), 1);
    running.shutdown().await;
}

/// A panic in a fill ends it as failed (502) and frees the key; a panic in a
/// handler answers 500; the server goes on serving. (The panics are reached
/// through a path marker that only debug builds act on.)
#[tokio::test]
async fn panics_in_a_fill_or_a_handler_are_contained() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/ok", test_bytes(100, 6));
    let proxy = TestProxy::start(&remote("r", &[&mirror], "")).await;
    let client = reqwest::Client::new();
    for _ in 0..2 {
        let url = proxy.url("/r/__mirrorcache_test_panic_in_fill__");
        let status = tokio::time::timeout(Duration::from_secs(10), get(&client, &url))
            .await
            .expect("a panicked fill must not leave its key joined to a dead fill")
            .0;
        assert_eq!(status, 502);
    }
    assert_eq!(proxy.running.proxy.fills.len(), 0);
    let url = proxy.url("/r/__mirrorcache_test_panic_in_handler__");
    assert_eq!(get(&client, &url).await.0, 500);
    assert_eq!(get(&client, &proxy.url("/r/ok")).await.0, 200);
    proxy.stop().await;
}

/// A mirror that gzips whatever it is asked: the client gets the artifact's
/// own bytes (decoded), on the miss and on the hit; an encoding the proxy
/// cannot decode is a 502 and nothing is cached.
#[tokio::test]
async fn encoded_upstream_bodies_are_never_served_as_identity() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(300_000, 8);
    mirror.put("/m/a.bin", body.clone());
    mirror.put("/m/b.bin", body.clone());
    let proxy = TestProxy::start(&remote("r", &[&mirror], "")).await;
    // A client that does not decode, as curl without --compressed.
    let client = reqwest::Client::builder().no_gzip().build().unwrap();
    mirror.set_fault(Fault::Encoded("gzip"));
    for expect in ["MISS", "HIT"] {
        let response = client.get(proxy.url("/r/a.bin")).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-cache-status"], expect);
        assert!(response.headers().get("content-encoding").is_none());
        assert_eq!(
            sha256_hex(&response.bytes().await.unwrap()),
            sha256_hex(&body)
        );
    }
    mirror.set_fault(Fault::Encoded("br"));
    assert_eq!(get(&client, &proxy.url("/r/b.bin")).await.0, 502);
    mirror.set_fault(Fault::None);
    let (status, cache, bytes) = get(&client, &proxy.url("/r/b.bin")).await;
    assert_eq!(
        (status, cache.as_str()),
        (200, "MISS"),
        "nothing was cached"
    );
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));
    proxy.stop().await;
}
