//! The supply-chain guard's smaller gaps (issue 24): PEP 658 `.metadata`
//! files checked against the digest their simple page declares, pypi's JSON
//! API filtered by the cooldown, go modules under a cooldown dated by their
//! `.info`'s `Time`, and npm's two spellings of a scoped packument as one
//! cache entry. Publish times are fixture timestamps relative to now.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::support::proxy::get;
use crate::support::{sha256_hex, tampered, test_bytes, MirrorServer, TestProxy};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn ago(ago: Duration) -> String {
    humantime::format_rfc3339_millis(SystemTime::now() - ago).to_string()
}

fn remote(kind: &str, mirror: &MirrorServer, extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"r\"\nkind = \"{kind}\"\nmirrors = [\"{}\"]\nfiles = []\n{extra}\n",
        mirror.url("/m")
    )
}

#[tokio::test]
async fn a_metadata_file_that_is_not_the_digest_its_page_declares_is_refused() {
    let mirror = MirrorServer::start().await;
    let metadata = b"Metadata-Version: 2.1\nName: six\nVersion: 1.0\n".to_vec();
    let wheel = test_bytes(10_000, 3);
    let page = format!(
        "<html><body><a href=\"../../packages/six-1.0-py3-none-any.whl#sha256={}\" \
         data-dist-info-metadata=\"sha256={}\" data-core-metadata=\"sha256={}\">six</a></body></html>",
        sha256_hex(&wheel),
        sha256_hex(&metadata),
        sha256_hex(&metadata)
    );
    mirror.put("/m/simple/six/", page);
    mirror.put("/m/packages/six-1.0-py3-none-any.whl", wheel.clone());
    mirror.put(
        "/m/packages/six-1.0-py3-none-any.whl.metadata",
        tampered(&metadata),
    );
    let proxy = TestProxy::start(&remote("pypi", &mirror, "")).await;
    let client = reqwest::Client::new();
    let (status, _, _) = get(&client, &proxy.url("/r/simple/six/")).await;
    assert_eq!(status, 200);
    let at = proxy.url("/r/packages/six-1.0-py3-none-any.whl.metadata");
    let (status, _, body) = get(&client, &at).await;
    assert_eq!(status, 502);
    let said = String::from_utf8_lossy(&body.unwrap()).to_string();
    assert!(said.contains(&sha256_hex(&metadata)), "{said}");
    assert_eq!(
        proxy.metric("mirrorcache_integrity_failures_total").await,
        1.0
    );
    // The mirror sends the right bytes again: served.
    mirror.put(
        "/m/packages/six-1.0-py3-none-any.whl.metadata",
        metadata.clone(),
    );
    let (status, _, body) = get(&client, &at).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&metadata));
    proxy.stop().await;
}

#[tokio::test]
async fn the_pypi_json_api_loses_versions_under_the_cooldown() {
    let mirror = MirrorServer::start().await;
    let file = |version: &str, at: String| {
        json!({"filename": format!("six-{version}.tar.gz"),
               "url": mirror.url(&format!("/m/packages/six-{version}.tar.gz")),
               "digests": {"sha256": "ab".repeat(32)},
               "upload_time_iso_8601": at})
    };
    let api = json!({
        "info": {"name": "six", "version": "1.1"},
        "urls": [file("1.1", ago(DAY))],
        "releases": {"1.0": [file("1.0", ago(60 * DAY))], "1.1": [file("1.1", ago(DAY))]},
    });
    mirror.put_typed("/m/pypi/six/json", api.to_string(), "application/json");
    let proxy = TestProxy::start(&remote("pypi", &mirror, "min_release_age = \"7d\"")).await;
    let client = reqwest::Client::new();
    let (status, _, body) = get(&client, &proxy.url("/r/pypi/six/json")).await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_slice(&body.unwrap()).unwrap();
    let releases: Vec<&String> = doc["releases"].as_object().unwrap().keys().collect();
    assert_eq!(releases, ["1.0"]);
    assert_eq!(doc["urls"], json!([]));
    proxy.stop().await;
}

#[tokio::test]
async fn go_versions_under_the_cooldown_leave_the_list_and_their_files_get_403() {
    let mirror = MirrorServer::start().await;
    let module = "/m/example.com/!cool/m/@v";
    mirror.put(&format!("{module}/list"), "v1.0.0\nv1.1.0\n");
    for (version, at) in [("v1.0.0", ago(60 * DAY)), ("v1.1.0", ago(DAY))] {
        mirror.put(
            &format!("{module}/{version}.info"),
            json!({"Version": version, "Time": at}).to_string(),
        );
        mirror.put(&format!("{module}/{version}.zip"), format!("zip {version}"));
        mirror.put(
            &format!("{module}/{version}.mod"),
            "module example.com/Cool/m\n",
        );
    }
    let proxy = TestProxy::start(&remote(
        "go",
        &mirror,
        "min_release_age = \"7d\"\ndeny = [\"example.com/Bad/m\"]",
    ))
    .await;
    let client = reqwest::Client::new();
    let at = |file: &str| proxy.url(&format!("/r/example.com/!cool/m/@v/{file}"));
    let (status, _, body) = get(&client, &at("list")).await;
    assert_eq!(status, 200);
    assert_eq!(&body.unwrap()[..], b"v1.0.0\n");
    for file in ["v1.1.0.zip", "v1.1.0.mod"] {
        let response = client.get(at(file)).send().await.unwrap();
        assert_eq!(response.status(), 403, "{file}");
        let reason = response.text().await.unwrap();
        assert!(reason.contains("example.com/Cool/m@v1.1.0"), "{reason}");
    }
    let (status, _, body) = get(&client, &at("v1.0.0.zip")).await;
    assert_eq!(status, 200);
    assert_eq!(&body.unwrap()[..], b"zip v1.0.0");
    // `deny` names the module as the go command spells it.
    let denied = proxy.url("/r/example.com/!bad/m/@v/v1.0.0.zip");
    assert_eq!(get(&client, &denied).await.0, 403);
    proxy.stop().await;
}

#[tokio::test]
async fn both_spellings_of_a_scoped_packument_are_one_cache_entry() {
    let registry = MirrorServer::start().await;
    let packument = json!({"name": "@mc/cool", "versions": {}}).to_string();
    registry.put_typed("/m/@mc%2Fcool", packument.clone(), "application/json");
    registry.put_typed("/m/@mc/cool", packument.clone(), "application/json");
    let proxy = TestProxy::start(&remote("npm", &registry, "")).await;
    let client = reqwest::Client::new();
    let mut caches = Vec::new();
    for spelling in ["/r/@mc%2Fcool", "/r/@mc/cool", "/r/@mc%2fcool"] {
        let (status, cache, body) = get(&client, &proxy.url(spelling)).await;
        assert_eq!(status, 200, "{spelling}");
        let doc: Value = serde_json::from_slice(&body.unwrap()).unwrap();
        assert_eq!(doc["name"], "@mc/cool");
        caches.push(cache);
        proxy.settle().await;
    }
    assert_eq!(caches, ["MISS", "HIT", "HIT"]);
    let upstream: usize = registry.requests().iter().map(|(_, n)| n).sum();
    assert_eq!(upstream, 1, "{:?}", registry.requests());
    proxy.stop().await;
}
