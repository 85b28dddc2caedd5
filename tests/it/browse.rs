//! The browse pages (`/-/browse/{remote}/{prefix}`): every entry with its
//! size, hits and digest, a page at a time, a prefix search, purge buttons
//! only with an admin token, a hostile path shown as text, and with access
//! control only the remotes (and paths) the caller may read.

use scraper::{Html, Selector};

use crate::access::{basic, AuthProxy};
use crate::support::proxy::{get, get_text};
use crate::support::{sha256_hex, test_bytes, MirrorServer, TestProxy};

fn texts(html: &Html, selector: &str) -> Vec<String> {
    html.select(&Selector::parse(selector).unwrap())
        .map(|e| e.text().collect::<String>())
        .collect()
}

fn attrs(html: &Html, selector: &str, attr: &str) -> Vec<String> {
    html.select(&Selector::parse(selector).unwrap())
        .filter_map(|e| e.value().attr(attr).map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_listed_a_page_at_a_time_searched_by_prefix_and_escaped() {
    let mirror = MirrorServer::start().await;
    for i in 0..105 {
        mirror.put(
            &format!("/m/pkg/f{i:03}.bin"),
            test_bytes(100 + i, i as u64),
        );
    }
    let hostile_bytes = test_bytes(10, 99);
    // `<`, `>` and `"` travel percent-encoded and are shown decoded.
    let hostile =
        "/m/evil/%3Cscript%3Ealert(1)%3C%2Fscript%3E%22%3E%3Cimg%20src=x%20onerror=alert(2)%3E.bin";
    mirror.put(hostile, hostile_bytes.clone());
    let proxy = TestProxy::start_with_server(
        "admin_token = \"s3cret-admin\"",
        &format!(
            "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\nimmutable = [\"**\"]\n",
            mirror.url("/m")
        ),
    )
    .await;
    let client = reqwest::Client::new();
    for i in 0..105 {
        assert_eq!(
            get(&client, &proxy.url(&format!("/r/pkg/f{i:03}.bin")))
                .await
                .0,
            200
        );
    }
    let (status, _, body) = get(&client, &proxy.url(&hostile.replacen("/m/", "/r/", 1))).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), hostile_bytes);
    proxy.settle().await;

    let page = Html::parse_document(&get_text(&client, &proxy.url("/-/browse/r/pkg/")).await);
    let paths = texts(&page, "tr.entry td.path a");
    assert_eq!(paths.len(), 100);
    assert_eq!(paths[0], "pkg/f000.bin");
    assert_eq!(
        texts(&page, "#totals")[0],
        "105 entries, 15.6 KiB under pkg/"
    );
    let first = Selector::parse("tr.entry").unwrap();
    let first = page.select(&first).next().unwrap();
    let digest = first
        .select(&Selector::parse("td.digest").unwrap())
        .next()
        .unwrap();
    assert_eq!(
        digest.value().attr("title"),
        Some(sha256_hex(&test_bytes(100, 0)).as_str())
    );
    let next = attrs(&page, "a#next", "href");
    assert_eq!(next, ["/-/browse/r/?prefix=pkg%2F&after=pkg%2Ff099.bin"]);
    let page = Html::parse_document(&get_text(&client, &proxy.url(&next[0])).await);
    assert_eq!(
        texts(&page, "tr.entry td.path a"),
        (100..105)
            .map(|i| format!("pkg/f{i:03}.bin"))
            .collect::<Vec<_>>()
    );
    assert!(attrs(&page, "a#next", "href").is_empty());

    // The search box: `?prefix=`.
    let page =
        Html::parse_document(&get_text(&client, &proxy.url("/-/browse/r/?prefix=pkg%2Ff10")).await);
    assert_eq!(texts(&page, "tr.entry td.path a").len(), 5);

    // The hostile path: text, not markup; the purge button carries it as data.
    let text = get_text(&client, &proxy.url("/-/browse/r/evil/")).await;
    let page = Html::parse_document(&text);
    assert_eq!(
        texts(&page, "tr.entry td.path a"),
        ["evil/<script>alert(1)</script>\"><img src=x onerror=alert(2)>.bin"]
    );
    assert!(!text.contains("<script>alert"), "{text}");
    assert!(!text.contains("<img"), "{text}");
    assert_eq!(page.select(&Selector::parse("img").unwrap()).count(), 0);
    assert_eq!(
        attrs(&page, "button.purge", "data-key"),
        ["r/evil/%3Cscript%3Ealert(1)%3C%2Fscript%3E%22%3E%3Cimg%20src=x%20onerror=alert(2)%3E.bin"]
    );
    // The admin token is never on the page.
    assert!(!text.contains("s3cret-admin"));

    // The index and the dashboard link to the remote's page.
    let index = Html::parse_document(&get_text(&client, &proxy.url("/-/browse/")).await);
    assert_eq!(attrs(&index, "#remotes a", "href"), ["/-/browse/r/"]);
    let dashboard = Html::parse_document(&get_text(&client, &proxy.url("/-/")).await);
    assert_eq!(attrs(&dashboard, "a.browse", "href"), ["/-/browse/r/"]);
    assert_eq!(get(&client, &proxy.url("/-/browse/nope/")).await.0, 404);
    proxy.stop().await;
}

#[tokio::test]
async fn without_an_admin_token_there_is_no_purge_button() {
    let mirror = MirrorServer::start().await;
    mirror.put("/a.bin", vec![1u8; 10]);
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\n",
        mirror.url("")
    ))
    .await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/r/a.bin")).await.0, 200);
    proxy.settle().await;
    for _ in 0..2 {
        assert_eq!(get(&client, &proxy.url("/r/a.bin")).await.1, "HIT");
    }
    let page = Html::parse_document(&get_text(&client, &proxy.url("/-/browse/r/")).await);
    assert_eq!(texts(&page, "tr.entry td.path a"), ["a.bin"]);
    // Hits not yet flushed to the database are counted.
    assert_eq!(texts(&page, "tr.entry td.hits"), ["2"]);
    assert_eq!(
        page.select(&Selector::parse("button.purge").unwrap())
            .count(),
        0
    );
    proxy.stop().await;
}

/// The remotes `/-/browse/` lists for this `Authorization`.
async fn index(proxy: &AuthProxy, auth: Option<&str>) -> Vec<String> {
    let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
    let (status, _, body) = proxy.get("/-/browse/", &headers).await;
    assert_eq!(status, 200);
    let page = Html::parse_document(&String::from_utf8_lossy(&body));
    texts(&page, "#remotes a")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_access_control_a_caller_browses_only_what_it_may_read() {
    let proxy = AuthProxy::start().await;
    let ci = basic("ci", "ci-pass");
    let dev = basic("dev", "dev-pass");
    // Cache something in each remote.
    for (path, auth) in [
        ("/pub/a.txt", None),
        ("/secret/hidden-package/x", Some(&ci)),
        ("/team/t.txt", Some(&dev)),
    ] {
        let headers: Vec<(&str, &str)> = auth
            .map(|a| ("authorization", a.as_str()))
            .into_iter()
            .collect();
        assert_eq!(proxy.get(path, &headers).await.0, 200, "{path}");
    }
    proxy.running.proxy.fills.wait_idle().await;

    assert_eq!(index(&proxy, None).await, ["pub"]);
    assert_eq!(index(&proxy, Some(&dev)).await, ["pub", "team"]);
    assert_eq!(index(&proxy, Some(&ci)).await, ["pub", "secret", "team"]);

    // A remote's page is refused as its artifacts are, and shows nothing.
    let (status, headers, body) = proxy.get("/-/browse/secret/", &[]).await;
    assert_eq!(status, 401);
    assert!(headers.contains_key("www-authenticate"));
    assert!(!String::from_utf8_lossy(&body).contains("hidden-package"));
    let (status, _, body) = proxy
        .get("/-/browse/secret/", &[("authorization", &dev)])
        .await;
    assert_eq!(status, 404);
    assert!(!String::from_utf8_lossy(&body).contains("hidden-package"));
    let (status, _, body) = proxy
        .get("/-/browse/secret/", &[("authorization", &ci)])
        .await;
    assert_eq!(status, 200);
    let page = Html::parse_document(&String::from_utf8_lossy(&body));
    assert_eq!(texts(&page, "tr.entry td.path a"), ["hidden-package/x"]);

    // The dashboard's history and browse links follow the same rule.
    let (_, _, body) = proxy.get("/-/", &[("authorization", &dev)]).await;
    let page = Html::parse_document(&String::from_utf8_lossy(&body));
    assert_eq!(
        attrs(&page, "a.browse", "href"),
        ["/-/browse/pub/", "/-/browse/team/"]
    );
    proxy.running.shutdown().await;
}
