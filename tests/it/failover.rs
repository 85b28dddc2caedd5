//! Mirror selection and failover against real mirrors with faults.

use std::time::Duration;

use crate::support::proxy::get;
use crate::support::{
    sha256_hex, test_bytes, toml_urls, wait_until, Fault, MirrorServer, TestProxy,
};

fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"r\"\nmirrors = {}\n{extra}\n",
        toml_urls(mirrors, "/m")
    )
}

async fn three_mirrors_with(files: usize) -> [MirrorServer; 3] {
    let mirrors = [
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    ];
    for i in 0..files {
        for m in &mirrors {
            m.put(&format!("/m/f{i}"), test_bytes(1000, i as u64));
        }
    }
    mirrors
}

#[tokio::test]
async fn one_down_and_one_failing_still_serves_every_request() {
    let [a, b, c] = three_mirrors_with(10).await;
    a.stop();
    b.set_fault(Fault::Status(500));
    let proxy = TestProxy::start(&remote(&[&a, &b, &c], "strategy = \"single\"")).await;
    let client = reqwest::Client::new();
    for i in 0..10 {
        let (status, _, bytes) = get(&client, &proxy.url(&format!("/r/f{i}"))).await;
        assert_eq!(status, 200);
        assert_eq!(
            sha256_hex(&bytes.unwrap()),
            sha256_hex(&test_bytes(1000, i))
        );
    }
    // The failing mirror is ejected after 3 consecutive failures: from then on
    // it costs nothing, and every request goes straight to the healthy one.
    assert_eq!((b.total(), c.total()), (3, 10));
    proxy.stop().await;
}

#[tokio::test]
async fn a_404_on_one_mirror_is_served_from_another_and_404_everywhere_is_404() {
    let [a, b, _c] = three_mirrors_with(0).await;
    b.put("/m/only-on-b", b"b has it".to_vec());
    let proxy = TestProxy::start(&remote(&[&a, &b], "")).await;
    let client = reqwest::Client::new();
    let (status, _, bytes) = get(&client, &proxy.url("/r/only-on-b")).await;
    assert_eq!((status, &bytes.unwrap()[..]), (200, &b"b has it"[..]));
    let (status, _, _) = get(&client, &proxy.url("/r/nowhere")).await;
    assert_eq!(status, 404);
    assert_eq!((a.hits("/m/nowhere"), b.hits("/m/nowhere")), (1, 1));
    proxy.stop().await;
}

#[tokio::test]
async fn every_mirror_failing_is_502_and_timeouts_are_504() {
    let [a, b, _c] = three_mirrors_with(1).await;
    a.set_fault(Fault::Status(503));
    b.stop();
    let proxy = TestProxy::start(&remote(&[&a, &b], "")).await;
    let client = reqwest::Client::new();
    let (status, _, _) = get(&client, &proxy.url("/r/f0")).await;
    assert_eq!(status, 502);
    proxy.stop().await;

    let [slow, _, _] = three_mirrors_with(1).await;
    slow.set_fault(Fault::SlowFirstByte(Duration::from_secs(5)));
    let proxy = TestProxy::start(&remote(&[&slow], "first_byte_timeout = \"200ms\"")).await;
    let (status, _, _) = get(&client, &proxy.url("/r/f0")).await;
    assert_eq!(status, 504);
    proxy.stop().await;
}

#[tokio::test]
async fn round_robin_spreads_cold_fetches_evenly() {
    let [a, b, c] = three_mirrors_with(30).await;
    let proxy = TestProxy::start(&remote(
        &[&a, &b, &c],
        "strategy = \"round_robin\"\nhedge_after = \"off\"",
    ))
    .await;
    let client = reqwest::Client::new();
    for i in 0..30 {
        let (status, _, _) = get(&client, &proxy.url(&format!("/r/f{i}"))).await;
        assert_eq!(status, 200);
    }
    assert_eq!((a.total(), b.total(), c.total()), (10, 10, 10));
    proxy.stop().await;
}

#[tokio::test]
async fn least_conn_prefers_the_idle_mirror_while_another_is_busy() {
    let [busy, idle, _] = three_mirrors_with(11).await;
    busy.set_fault(Fault::SlowFirstByte(Duration::from_millis(1500)));
    let proxy = TestProxy::start(&remote(
        &[&busy, &idle],
        "strategy = \"least_conn\"\nhedge_after = \"off\"",
    ))
    .await;
    let client = reqwest::Client::new();
    // The first request finds both idle; the rotating tie-break starts at the
    // first mirror, which then holds it for 1.5 s.
    let slow = tokio::spawn({
        let (client, url) = (client.clone(), proxy.url("/r/f0"));
        async move { get(&client, &url).await.0 }
    });
    wait_until("the first request to reach the busy mirror", async || {
        busy.total() > 0
    })
    .await;
    for i in 1..11 {
        let (status, _, _) = get(&client, &proxy.url(&format!("/r/f{i}"))).await;
        assert_eq!(status, 200);
    }
    assert_eq!((busy.total(), idle.total()), (1, 10));
    assert_eq!(slow.await.unwrap(), 200);
    proxy.stop().await;
}

#[tokio::test]
async fn a_truncated_body_fails_the_transfer_and_caches_nothing() {
    for fault in [Fault::Truncate(40_000), Fault::LongerContentLength(1000)] {
        let [a, b, _] = three_mirrors_with(0).await;
        let body = test_bytes(200_000, 9);
        a.put("/m/t.bin", body.clone());
        b.put("/m/t.bin", body.clone());
        a.set_fault(fault);
        let proxy = TestProxy::start(&remote(&[&a, &b], "strategy = \"single\"")).await;
        let client = reqwest::Client::new();

        let (status, cache, bytes) = get(&client, &proxy.url("/r/t.bin")).await;
        assert_eq!((status, cache.as_str()), (200, "MISS"));
        assert!(
            bytes.is_err(),
            "{fault:?}: a broken upstream body must break the client's transfer"
        );
        // Nothing partial stays behind.
        wait_until("the partial temp file to go", async || {
            proxy.temp_files() == 0
        })
        .await;

        // The bad mirror goes away; the next fetch is a fresh miss with the right bytes.
        a.stop();
        let (status, cache, bytes) = get(&client, &proxy.url("/r/t.bin")).await;
        assert_eq!((status, cache.as_str()), (200, "MISS"), "{fault:?}");
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));
        let (_, cache, bytes) = get(&client, &proxy.url("/r/t.bin")).await;
        assert_eq!(cache, "HIT");
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));
        proxy.stop().await;
    }
}

/// A mirror whose `/m/foreign` redirects to a live server on another port of
/// 127.0.0.1 (another host:port, so not one of the remote's), and whose
/// `/m/own` redirects to another path on its own host:port.
#[tokio::test]
async fn redirects_are_followed_only_to_the_remotes_own_hosts() {
    // The foreign server would answer 200, and counts what it is asked.
    let foreign = MirrorServer::start().await;
    foreign.put("/evil", b"not from the remote".to_vec());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let evil = foreign.url("/evil");
    let app = axum::Router::new()
        .route(
            "/m/foreign",
            axum::routing::get(move || async move { axum::response::Redirect::temporary(&evil) }),
        )
        .route(
            "/m/own",
            axum::routing::get(move || async move {
                axum::response::Redirect::temporary(&format!("http://{addr}/files/own"))
            }),
        )
        .route("/files/own", axum::routing::get(|| async { "own bytes" }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"http://{addr}/m\"]\n"
    ))
    .await;
    let client = reqwest::Client::new();

    let (status, _, _) = get(&client, &proxy.url("/r/foreign")).await;
    assert_eq!(status, 502);
    assert_eq!(
        foreign.total(),
        0,
        "the redirect to a foreign host was followed"
    );

    let (status, _, bytes) = get(&client, &proxy.url("/r/own")).await;
    assert_eq!((status, &bytes.unwrap()[..]), (200, &b"own bytes"[..]));
    proxy.stop().await;
}
