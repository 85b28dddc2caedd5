//! Operations: metrics, readiness, status, reload on SIGHUP, JSON logs.

use std::time::Duration;

use crate::support::proxy::{config_text, get, get_json};
use crate::support::{wait_until, BinaryProxy, Fault, MirrorServer, TestProxy};

fn remote(name: &str, mirror: &MirrorServer, extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"{name}\"\nmirrors = [\"{}\"]\n{extra}\n",
        mirror.url("/m")
    )
}

#[tokio::test]
async fn metrics_ready_and_status_report_what_happened() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/a", vec![1u8; 1000]);
    let proxy = TestProxy::start(&remote("r", &mirror, "immutable = [\"**\"]")).await;
    let client = reqwest::Client::new();
    get(&client, &proxy.url("/r/a")).await.2.unwrap();
    proxy.settle().await;
    get(&client, &proxy.url("/r/a")).await.2.unwrap();
    get(&client, &proxy.url("/r/missing")).await.2.unwrap();

    let response = client.get(proxy.url("/-/metrics")).send().await.unwrap();
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .contains("openmetrics-text"));
    let metrics = response.text().await.unwrap();
    for line in [
        "mirrorcache_requests_total{remote=\"r\",cache=\"HIT\"} 1",
        "mirrorcache_requests_total{remote=\"r\",cache=\"MISS\"} 1",
        "mirrorcache_requests_total{remote=\"r\",cache=\"error\"} 1",
        "mirrorcache_served_bytes_total{remote=\"r\"} 2000",
        "mirrorcache_store_bytes 1000",
        "mirrorcache_fills_in_progress 0",
        "mirrorcache_coalesced_waiters_total 0",
        "mirrorcache_upstream_first_byte_seconds_count{remote=\"r\",mirror=",
        "mirrorcache_mirror_in_flight{remote=\"r\",mirror=",
        "mirrorcache_mirror_healthy{remote=\"r\",mirror=",
        "mirrorcache_evictions_total 0",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }

    assert_eq!(
        client
            .get(proxy.url("/-/ready"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let status = get_json(&client, &proxy.url("/-/status")).await;
    assert_eq!(status["remotes"][0]["name"], "r");
    assert_eq!(status["remotes"][0]["mirrors"][0]["url"], mirror.url("/m"));
    assert_eq!(status["remotes"][0]["mirrors"][0]["in_flight"], 0);
    assert_eq!(status["remotes"][0]["mirrors"][0]["health"], "healthy");
    assert_eq!(status["hit_ratio"], 0.5);
    assert_eq!(status["store_bytes"], 1000);
    proxy.stop().await;
}

/// SIGHUP: a new remote appears without a restart or a dropped connection;
/// in-flight gauges of unchanged mirrors carry over; a bad config is refused
/// with a logged reason and the old one stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_config_and_refuses_a_bad_one() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/x", b"x".to_vec());
    mirror.put("/m/slow", b"slow".to_vec());
    let dir = tempfile::tempdir().unwrap();
    let first = config_text(dir.path(), &remote("a", &mirror, ""));
    let proxy = BinaryProxy::start(dir.path(), &first).await;
    let port = proxy.base.rsplit(':').next().unwrap().to_string();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    assert_eq!(get(&client, &proxy.url("/a/x")).await.0, 200);
    assert_eq!(get(&client, &proxy.url("/b/x")).await.0, 404);

    // A slow request holds the mirror's in-flight gauge across the reload.
    mirror.set_fault(Fault::SlowFirstByte(Duration::from_millis(1500)));
    let slow = tokio::spawn({
        let (client, url) = (client.clone(), proxy.url("/a/slow"));
        async move { get(&client, &url).await.0 }
    });
    wait_until("the slow request to reach the mirror", async || {
        mirror.hits("/m/slow") > 0
    })
    .await;

    let second = config_text(
        dir.path(),
        &format!("{}{}", remote("a", &mirror, ""), remote("b", &mirror, "")),
    )
    .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    std::fs::write(&proxy.config_path, second).unwrap();
    proxy.signal("HUP");
    let mut status = serde_json::Value::Null;
    wait_until("the reload to add remote b", async || {
        status = get_json(&client, &proxy.url("/-/status")).await;
        status["remotes"][1]["name"] == "b"
    })
    .await;
    assert_eq!(status["remotes"][0]["name"], "a");
    assert_eq!(
        status["remotes"][0]["mirrors"][0]["in_flight"], 1,
        "the gauge survived the reload"
    );
    assert_eq!(status["remotes"][1]["name"], "b");
    assert_eq!(
        slow.await.unwrap(),
        200,
        "the request in flight during the reload completed"
    );
    mirror.set_fault(Fault::None);
    assert_eq!(get(&client, &proxy.url("/b/x")).await.0, 200);

    std::fs::write(&proxy.config_path, "[server]\nlisten = 7\n").unwrap();
    proxy.signal("HUP");
    wait_until("the bad config to be refused", async || {
        proxy.log().contains("new config refused")
    })
    .await;
    assert_eq!(get(&client, &proxy.url("/b/x")).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_can_be_json_with_one_line_per_request() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/x", b"x".to_vec());
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[log]\nformat = \"json\"\n",
        config_text(dir.path(), &remote("r", &mirror, ""))
    );
    let proxy = BinaryProxy::start(dir.path(), &text).await;
    let client = reqwest::Client::new();
    get(&client, &proxy.url("/r/x")).await.2.unwrap();
    // Every whole line written so far is JSON; wait for the request's line.
    let request_line = || {
        proxy
            .log()
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .unwrap_or_else(|e| panic!("not JSON: {l}: {e}"))
            })
            .find(|v| v["fields"]["message"] == "request" && v["fields"]["path"] == "/r/x")
    };
    wait_until("the request's log line", async || request_line().is_some()).await;
    let request_line = request_line().unwrap();
    assert_eq!(request_line["fields"]["status"], 200);
    assert_eq!(request_line["fields"]["cache"], "MISS");
    assert_eq!(request_line["fields"]["mirror"], mirror.url("/m"));
    assert_eq!(request_line["fields"]["bytes"], 1);
}

/// `[log] buffer` and `flush`: request lines wait in memory (here for up
/// to an hour) and a graceful stop (SIGTERM) writes every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_log_lines_are_all_written_on_a_graceful_stop() {
    let mirror = MirrorServer::start().await;
    for name in ["a", "b", "c"] {
        mirror.put(&format!("/m/{name}"), name.as_bytes().to_vec());
    }
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[log]\nbuffer = \"1MiB\"\nflush = \"1h\"\n",
        config_text(dir.path(), &remote("r", &mirror, ""))
    );
    let mut proxy = BinaryProxy::start(dir.path(), &text).await;
    let client = reqwest::Client::new();
    for name in ["a", "b", "c"] {
        assert_eq!(get(&client, &proxy.url(&format!("/r/{name}"))).await.0, 200);
    }
    // Held in memory: not one request line is in the file yet.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!proxy.log().contains("/r/a"), "{}", proxy.log());
    proxy.signal("TERM");
    let status = proxy.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let log = proxy.log();
    for name in ["a", "b", "c"] {
        assert!(log.contains(&format!("/r/{name}")), "{log}");
    }
}

/// The log of a server run with `RUST_LOG=filter` that answered `/r/x`
/// twice (a miss and a hit), written whole by a graceful stop.
async fn log_with_filter(filter: &str) -> String {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/x", b"x".to_vec());
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote("r", &mirror, ""));
    let mut proxy = BinaryProxy::start_logging(dir.path(), &text, filter).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/r/x")).await.0, 200);
    assert_eq!(get(&client, &proxy.url("/r/x")).await.0, 200);
    proxy.signal("TERM");
    assert!(proxy.child.wait().unwrap().success());
    let log = proxy.log();
    assert!(log.contains("shutting down"), "{log}");
    log
}

/// The log filter decides whether request lines are written, in the text
/// format too (where they skip `tracing`'s formatter), as it decides for
/// the event: turned off for their target, none is written while the
/// server's other `INFO` lines are; a directive naming a field the line
/// lacks (`audit`: an anonymous remote's line) leaves them on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_filter_decides_which_request_lines_are_written() {
    let log = log_with_filter("info,mirrorcache::http::request=off").await;
    assert!(!log.contains("/r/x"), "{log}");
    let log = log_with_filter("info,mirrorcache::http::request[{audit}]=off").await;
    assert_eq!(log.matches("path=\"/r/x\"").count(), 2, "{log}");
}
