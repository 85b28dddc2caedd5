//! The dashboard, `GET /-/`: parsed as HTML, it names every remote and mirror,
//! shows a slow fill's progress, escapes what comes from the config or a
//! failure, and counts bytes by source like `/-/metrics`.

use std::time::Duration;

use scraper::{Html, Selector};

use crate::support::proxy::{get, get_text};
use crate::support::{test_bytes, wait_until, Fault, MirrorServer, TestProxy};

async fn page(client: &reqwest::Client, proxy: &TestProxy) -> Html {
    let response = client.get(proxy.url("/-/")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    Html::parse_document(&response.text().await.unwrap())
}

fn texts(html: &Html, selector: &str) -> Vec<String> {
    html.select(&Selector::parse(selector).unwrap())
        .map(|e| e.text().collect::<String>())
        .collect()
}

#[tokio::test]
async fn every_remote_and_mirror_is_shown_and_names_are_escaped() {
    let (good, bad) = (MirrorServer::start().await, MirrorServer::start().await);
    good.put("/m/a.tgz", vec![7u8; 1000]);
    bad.set_fault(Fault::Status(503));
    // Remote names are [A-Za-z0-9._-]; a mirror URL can carry `&lt;`, which
    // unescaped would read as `<` (`<` itself the URL parser percent-encodes).
    let tricky = good.url("/a&lt;script&gt;alert(1)&lt;/script&gt;");
    let remotes = format!(
        "[[remote]]\nname = \"npm\"\nmirrors = [\"{}\"]\nimmutable = [\"**\"]\n\n\
         [[remote]]\nname = \"pypi.x-1\"\nmirrors = [\"{}\"]\neject_after = 1\n\n\
         [[remote]]\nname = \"zz\"\nmirrors = [\"{tricky}\"]\n",
        good.url("/m"),
        bad.url("/b"),
    );
    let proxy = TestProxy::start(&remotes).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/npm/a.tgz")).await.1, "MISS");
    proxy.settle().await;
    assert_eq!(get(&client, &proxy.url("/npm/a.tgz")).await.1, "HIT");
    let (status, ..) = get(&client, &proxy.url("/pypi.x-1/b.whl")).await;
    assert!(status >= 500, "{status}");
    // A failure text with markup in it, through the same ring the proxy uses.
    proxy.running.proxy.metrics.recent_errors.push(
        0,
        "test".into(),
        "<script>alert(2)</script>".into(),
    );

    let html = page(&client, &proxy).await;
    assert_eq!(
        texts(&html, "tr[data-remote] td.name"),
        ["npm", "pypi.x-1", "zz"]
    );
    let urls = texts(&html, "td.url");
    assert_eq!(urls, [good.url("/m"), bad.url("/b"), tricky.clone()]);
    // The only script element is the page's own refresher.
    assert_eq!(html.select(&Selector::parse("script").unwrap()).count(), 1);
    let errors = texts(&html, "#errors-list li");
    assert!(
        errors
            .iter()
            .any(|e| e.ends_with("test: <script>alert(2)</script>")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains(&bad.url("/b")) && e.contains("503")),
        "the failed attempt is listed: {errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains(&format!("{status} /pypi.x-1/b.whl"))),
        "the {status} answer is listed: {errors:?}"
    );

    let npm = Selector::parse("tr[data-remote=\"npm\"]").unwrap();
    let row = html.select(&npm).next().unwrap();
    let cell = |class: &str| {
        row.select(&Selector::parse(&format!("td.{class}")).unwrap())
            .next()
            .unwrap()
            .text()
            .collect::<String>()
    };
    assert_eq!(cell("hits"), "1");
    assert_eq!(cell("misses"), "1");
    assert_eq!(cell("ratio"), "50.0%");
    assert_eq!(cell("from-cache"), "1000 B");
    assert_eq!(cell("from-upstream"), "1000 B");

    let health = texts(&html, "td.health");
    assert_eq!(health[0], "healthy");
    assert!(health[1].starts_with("ejected until "), "{health:?}");
    let store = Selector::parse("progress#store-bar").unwrap();
    let bar = html.select(&store).next().unwrap();
    assert_eq!(bar.value().attr("value"), Some("1000"));

    let metrics = get_text(&client, &proxy.url("/-/metrics")).await;
    for line in [
        "mirrorcache_bytes_served_total{remote=\"npm\",source=\"cache\"} 1000",
        "mirrorcache_bytes_served_total{remote=\"npm\",source=\"upstream\"} 1000",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_fill_shows_its_progress() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(1024 * 1024, 3);
    mirror.put("/m/big.tgz", body.clone());
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(100)));
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nmirrors = [\"{}\"]\n",
        mirror.url("/m")
    ))
    .await;
    let client = reqwest::Client::new();
    let download = tokio::spawn({
        let (client, url) = (client.clone(), proxy.url("/npm/big.tgz"));
        async move { get(&client, &url).await.2.unwrap().len() }
    });

    let fill = Selector::parse("#fills-body tr.fill").unwrap();
    let progress = Selector::parse("progress").unwrap();
    let mut seen = None;
    wait_until("the fill to show some progress", async || {
        let html = page(&client, &proxy).await;
        let Some(row) = html.select(&fill).next() else {
            return false;
        };
        let bar = row.select(&progress).next().unwrap().value();
        let value: u64 = bar.attr("value").unwrap_or("0").parse().unwrap();
        if value == 0 {
            return false;
        }
        seen = Some((
            row.text().collect::<String>(),
            value,
            bar.attr("max").map(str::to_string),
        ));
        true
    })
    .await;
    let (text, value, max) = seen.unwrap();
    assert_eq!(max.as_deref(), Some("1048576"));
    assert!(value < 1024 * 1024, "still in progress: {value}");
    assert!(text.contains("npm/big.tgz"), "{text}");
    assert!(
        text.contains("of 1 MiB") || text.contains("of 1.0 MiB"),
        "{text}"
    );

    mirror.set_fault(Fault::None);
    assert_eq!(download.await.unwrap(), body.len());
    proxy.settle().await;
    assert!(texts(&page(&client, &proxy).await, "#fills-body tr").is_empty());
    proxy.stop().await;
}
