//! The `composer` kind (issue 25) against a fixture Packagist on 127.0.0.1
//! and a dist host as its `files` mirrors: `packages.json`'s root-relative
//! `metadata-url` moved under the remote, a minified p2 file expanded and
//! its `dist.url`s rewritten, `dist.shasum` refusing a tampered first files
//! mirror, and an archive with an empty shasum pinned on first use: after
//! it is purged, other bytes upstream are refused, never served.

use sha1::Digest as _;

use crate::support::proxy::{config_text, get, get_json, start_text, warm_fetches_all};
use crate::support::{sha256_hex, tampered, test_bytes, MirrorServer};

const P2: &str = "/repo/p2/acme/hello.json";

fn remote(repo: &MirrorServer, files: &[&MirrorServer]) -> String {
    format!(
        "[[remote]]\nname = \"php\"\nkind = \"composer\"\nmirrors = [\"{}\"]\nfiles = {}\nstrategy = \"single\"\n",
        repo.url("/repo"),
        crate::support::toml_urls(files, "/dl")
    )
}

/// A minified p2 file: 1.0.0 declares its sha1, 1.1.0 has an empty shasum.
fn p2(dist: &MirrorServer, one: &[u8]) -> String {
    serde_json::json!({"minified": "composer/2.0", "packages": {"acme/hello": [
        {"name": "acme/hello", "version": "1.0.0", "type": "library",
         "dist": {"type": "zip", "url": dist.url("/dl/acme/hello/1.0.0.zip"),
                  "reference": "aaa", "shasum": hex::encode(sha1::Sha1::digest(one))}},
        {"version": "1.1.0", "type": "__unset",
         "dist": {"type": "zip", "url": dist.url("/dl/acme/hello/1.1.0.zip"),
                  "reference": "bbb", "shasum": ""}}
    ]}})
    .to_string()
    .replace('/', "\\/")
}

#[tokio::test]
async fn documents_are_expanded_and_rewritten_and_archives_checked_or_pinned() {
    let (repo, tampering, dist) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    let (one, two) = (test_bytes(9_000, 7), test_bytes(9_000, 8));
    repo.put(
        "/repo/packages.json",
        r#"{"packages":[],"metadata-url":"/p2/%package%.json","notify-batch":"https://packagist.org/downloads/"}"#,
    );
    repo.put(P2, p2(&tampering, &one));
    tampering.put("/dl/acme/hello/1.0.0.zip", tampered(&one));
    dist.put("/dl/acme/hello/1.0.0.zip", one.clone());
    dist.put("/dl/acme/hello/1.1.0.zip", two.clone());
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&repo, &[&tampering, &dist]))
        .replace("[server]\n", "[server]\nadmin_token = \"t\"\n");
    let running = start_text(&text).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();

    let root = get_json(&client, &format!("{base}/php/packages.json")).await;
    assert_eq!(
        root["metadata-url"],
        format!("{base}/php/p2/%package%.json")
    );
    assert!(root.get("notify-batch").is_none());

    let doc = get_json(&client, &format!("{base}/php/p2/acme/hello.json")).await;
    assert!(doc.get("minified").is_none());
    let versions = doc["packages"]["acme/hello"].as_array().unwrap();
    assert_eq!(versions[1]["name"], "acme/hello");
    assert!(versions[1].get("type").is_none());
    let url = |v: usize| versions[v]["dist"]["url"].as_str().unwrap().to_string();
    assert_eq!(url(0), format!("{base}/php/~files/acme/hello/1.0.0.zip"));

    // The declared sha1 refuses the first files mirror's bytes.
    let (status, _, body) = get(&client, &url(0)).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&one));
    assert_eq!(tampering.hits("/dl/acme/hello/1.0.0.zip"), 1);

    // Nothing declared for 1.1.0: its first download is pinned.
    tampering.put("/dl/acme/hello/1.1.0.zip", two.clone());
    let (status, _, body) = get(&client, &url(1)).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&two));

    // Purged, and the bytes changed upstream: refused and never served.
    running.proxy.fills.wait_idle().await;
    let response = client
        .delete(format!("{base}/-/cache/php/~files/acme/hello/1.1.0.zip"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    tampering.put("/dl/acme/hello/1.1.0.zip", tampered(&two));
    dist.put("/dl/acme/hello/1.1.0.zip", tampered(&two));
    let (status, _, body) = get(&client, &url(1)).await;
    assert_eq!(status, 502);
    let said = String::from_utf8_lossy(&body.unwrap()).to_string();
    assert!(said.contains(&sha256_hex(&two)), "{said}");
}

/// deny with a Composer constraint and a cooldown by each version's `time`:
/// the p2 file is served expanded without the refused versions, and `check`
/// takes the keys on a composer remote.
#[tokio::test]
async fn deny_and_cooldown_filter_the_p2_file_by_constraint_and_time() {
    let (repo, dist) = (MirrorServer::start().await, MirrorServer::start().await);
    let day = std::time::Duration::from_secs(24 * 3600);
    let at = |ago: u32| {
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() - day * ago).to_string()
    };
    let release = |version: &str, ago: u32| {
        serde_json::json!({"name": "acme/hello", "version": version, "time": at(ago),
            "dist": {"type": "zip", "url": dist.url(&format!("/dl/{version}.zip")),
                     "reference": version, "shasum": ""}})
    };
    let doc = serde_json::json!({"packages": {"acme/hello": [
        release("1.0.0", 30), release("1.1.0", 20), release("1.2.0", 10), release("2.0.0", 1)
    ]}});
    repo.put(P2, doc.to_string());
    let extra = "deny = [\"acme/hello@>=1.1 <1.2 || 1.2.*\"]\nmin_release_age = \"7d\"\n";
    let config = format!("{}{extra}", remote(&repo, &[&dist]));
    let output = crate::support::binary::check(&config);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config_text(dir.path(), &config)).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    let served = get_json(&client, &format!("{base}/php/p2/acme/hello.json")).await;
    let versions: Vec<&str> = served["packages"]["acme/hello"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["1.0.0"]);
    // Every version refused: the refusal, with the reason in the status line.
    let deny_all = format!("{}deny = [\"acme/*\"]\n", remote(&repo, &[&dist]));
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config_text(dir.path(), &deny_all)).await;
    let response = client
        .get(format!(
            "http://{}/php/p2/acme/hello.json",
            running.local_addr
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
}

/// `warm` reads a `composer.lock` made against the upstream: each archive
/// is found by its reference in the p2 file the proxy serves (and fetched
/// under `~files/`), checked against `dist.shasum`; a lock naming the
/// proxy's own address is fetched there.
#[tokio::test]
async fn warm_fetches_the_archives_a_composer_lock_names() {
    let (repo, dist) = (MirrorServer::start().await, MirrorServer::start().await);
    let (one, two) = (test_bytes(3_000, 21), test_bytes(3_000, 22));
    repo.put(P2, p2(&dist, &one));
    dist.put("/dl/acme/hello/1.0.0.zip", one.clone());
    dist.put("/dl/acme/hello/1.1.0.zip", two.clone());
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config_text(dir.path(), &remote(&repo, &[&dist]))).await;
    let base = format!("http://{}", running.local_addr);
    let lock = dir.path().join("composer.lock");
    let locked = serde_json::json!({"packages": [
        {"name": "acme/hello", "version": "1.0.0",
         "dist": {"type": "zip", "url": dist.url("/dl/acme/hello/1.0.0.zip"), "reference": "aaa",
                  "shasum": hex::encode(sha1::Sha1::digest(&one))}}
    ], "packages-dev": [
        {"name": "acme/hello", "version": "1.1.0",
         "dist": {"type": "zip", "url": format!("{base}/php/~files/acme/hello/1.1.0.zip"),
                  "reference": "bbb", "shasum": ""}}
    ]});
    std::fs::write(&lock, locked.to_string()).unwrap();
    warm_fetches_all(&base, "php", vec![lock], 2).await;
    assert_eq!(dist.hits("/dl/acme/hello/1.0.0.zip"), 1);
    assert_eq!(dist.hits("/dl/acme/hello/1.1.0.zip"), 1);
}
