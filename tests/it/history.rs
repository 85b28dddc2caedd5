//! The dashboard's per-minute history, with the history's clock moved by
//! hand: each minute's bucket gets what happened in it, the charts on `/-/`
//! say so, and a day later the same buckets hold the new minutes.

use std::sync::Arc;
use std::time::Duration;

use scraper::{Html, Selector};

use crate::support::proxy::{get, get_text};
use crate::support::{test_bytes, MirrorServer, TestProxy};
use mirrorcache::clock::ManualClock;
use mirrorcache::history::MINUTES;

fn summary(html: &Html, chart: &str) -> String {
    let selector = Selector::parse(&format!("#chart-{chart} .summary")).unwrap();
    html.select(&selector)
        .next()
        .unwrap_or_else(|| panic!("no chart {chart}"))
        .text()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_buckets_fill_per_minute_and_roll_over_after_a_day() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/a.bin", test_bytes(1000, 1));
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\nimmutable = [\"**\"]\n",
        mirror.url("/m")
    ))
    .await;
    let history = proxy.running.proxy.history.clone();
    let clock = Arc::new(ManualClock::at(29_000_000 * 60_000));
    history.set_clock(clock.clone());
    let client = reqwest::Client::new();

    // Minute 0: a miss and three hits.
    assert_eq!(get(&client, &proxy.url("/r/a.bin")).await.1, "MISS");
    proxy.settle().await;
    for _ in 0..3 {
        assert_eq!(get(&client, &proxy.url("/r/a.bin")).await.1, "HIT");
    }
    proxy.running.proxy.sample_history();
    // Minute 1: two hits.
    clock.advance(Duration::from_secs(60));
    for _ in 0..2 {
        assert_eq!(get(&client, &proxy.url("/r/a.bin")).await.1, "HIT");
    }
    proxy.running.proxy.sample_history();

    let window = history.window(|_| true);
    let (m0, m1) = (&window[MINUTES - 2], &window[MINUTES - 1]);
    assert_eq!(
        (
            m0.requests,
            m0.hits,
            m0.bytes_from_cache,
            m0.bytes_from_upstream
        ),
        (4, 3, 3000, 1000)
    );
    assert_eq!((m1.requests, m1.hits, m1.bytes_from_cache), (2, 2, 2000));
    assert!(m0.first_byte_ms.is_some() && m1.first_byte_ms.is_none());
    let html = Html::parse_document(&get_text(&client, &proxy.url("/-/")).await);
    assert_eq!(summary(&html, "requests"), "24 h: 6 · peak 4");
    assert!(
        summary(&html, "hit-ratio").starts_with("last 100.0%"),
        "{}",
        summary(&html, "hit-ratio")
    );
    assert_eq!(summary(&html, "from-cache"), "24 h: 4.9 KiB · peak 2.9 KiB");
    let saved = Selector::parse("#saved-today").unwrap();
    assert_eq!(
        html.select(&saved)
            .next()
            .unwrap()
            .text()
            .collect::<String>(),
        "4.9 KiB"
    );
    let path = Selector::parse("#chart-requests svg path").unwrap();
    assert!(html
        .select(&path)
        .next()
        .unwrap()
        .value()
        .attr("d")
        .unwrap()
        .starts_with("M0 98.0L1 98.0"));

    // A day and a minute later: minute 0 has left the window, and its
    // bucket holds the new minute.
    clock.advance(Duration::from_secs(24 * 3600));
    assert_eq!(get(&client, &proxy.url("/r/a.bin")).await.1, "HIT");
    proxy.running.proxy.sample_history();
    let window = history.window(|_| true);
    assert_eq!(window.iter().map(|m| m.requests).sum::<u64>(), 1);
    assert_eq!(window[MINUTES - 1].requests, 1);
    let html = Html::parse_document(&get_text(&client, &proxy.url("/-/")).await);
    assert_eq!(summary(&html, "requests"), "24 h: 1 · peak 1");
    proxy.stop().await;
}

#[tokio::test]
async fn with_history_off_the_dashboard_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let text = crate::support::proxy::config_text(
        dir.path(),
        "[[remote]]\nname = \"r\"\nmirrors = [\"http://127.0.0.1:9/\"]\n",
    )
    .replace("[server]\n", "[server]\nhistory = false\n");
    let running = crate::support::proxy::start_text(&text).await;
    let page = get_text(
        &reqwest::Client::new(),
        &format!("http://{}/-/", running.local_addr),
    )
    .await;
    assert!(page.contains("History is off"), "{page}");
    running.shutdown().await;
}
