//! Pruning `declared` (issue 23): digests learned from index documents no
//! cached document lists any more are deleted; those still listed, and pins
//! on first use, which nothing lists, are kept.

use base64::Engine as _;
use sha2::Digest as _;

use crate::support::proxy::get;
use crate::support::{test_bytes, toml_urls, wait_until, MirrorServer};

fn sri(bytes: &[u8]) -> String {
    format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(bytes))
    )
}

/// A packument of `name` listing `versions` (version, tarball bytes).
fn packument(mirror: &MirrorServer, name: &str, versions: &[(&str, &[u8])]) -> String {
    let base = mirror.url("/m");
    let versions: serde_json::Map<String, serde_json::Value> = versions
        .iter()
        .map(|(v, bytes)| {
            let dist = serde_json::json!({"dist": {
                "tarball": format!("{base}/{name}/-/{name}-{v}.tgz"),
                "integrity": sri(bytes),
            }});
            (v.to_string(), dist)
        })
        .collect();
    serde_json::json!({"name": name, "versions": versions}).to_string()
}

#[tokio::test]
async fn digests_no_cached_document_lists_are_pruned_and_listed_ones_and_pins_kept() {
    let mirror = MirrorServer::start().await;
    let (p1, p2, q1, z1) = (
        test_bytes(3000, 1),
        test_bytes(3000, 2),
        test_bytes(3000, 3),
        test_bytes(3000, 4),
    );
    mirror.put(
        "/m/p",
        packument(&mirror, "p", &[("1.0.0", &p1), ("2.0.0", &p2)]),
    );
    mirror.put("/m/q", packument(&mirror, "q", &[("1.0.0", &q1)]));
    // Listed by no packument the cache will hold: pinned on first use.
    mirror.put("/m/z/-/z-1.0.0.tgz", z1.clone());
    let dir = tempfile::tempdir().unwrap();
    let remotes = format!(
        "[[remote]]\nname = \"r\"\nkind = \"npm\"\nmirrors = {}\nfiles = []\npin_on_first_use = true\n",
        toml_urls(&[&mirror], "/m")
    );
    let text = crate::support::proxy::config_text(dir.path(), &remotes);
    let config = mirrorcache::config::Config::parse(&text, "test").unwrap();
    let remote = config.remotes[0].clone();
    let running = crate::support::proxy::start_text(&text).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    for path in ["/r/p", "/r/q", "/r/z/-/z-1.0.0.tgz"] {
        assert_eq!(
            get(&client, &format!("{base}{path}")).await.0,
            200,
            "{path}"
        );
    }
    running.proxy.fills.wait_idle().await;
    let cache = &running.proxy.cache;
    let declared = async |artifact: &str| {
        cache
            .meta
            .declarations()
            .declared("r", artifact)
            .await
            .unwrap()
    };
    for artifact in [
        "p/-/p-1.0.0.tgz",
        "p/-/p-2.0.0.tgz",
        "q/-/q-1.0.0.tgz",
        "z/-/z-1.0.0.tgz",
    ] {
        wait_until(artifact, async || declared(artifact).await.is_some()).await;
    }
    // Everything is listed or a pin: nothing goes; three rows are marked.
    let first = mirrorcache::cache::prune::prune_declared(cache, &remote)
        .await
        .unwrap();
    assert_eq!((first.documents, first.marked, first.deleted), (2, 3, 0));

    // q's packument leaves the cache; p's is replaced by one without 1.0.0.
    // (A packument is kept as its `full` variant.)
    cache.meta.forget_row("r", "q?full").await.unwrap();
    cache.meta.forget_row("r", "p?full").await.unwrap();
    mirror.put("/m/p", packument(&mirror, "p", &[("2.0.0", &p2)]));
    assert_eq!(get(&client, &format!("{base}/r/p")).await.0, 200);
    running.proxy.fills.wait_idle().await;
    // (A fetch in the same millisecond as the round would hold it back.)
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let second = mirrorcache::cache::prune::prune_declared(cache, &remote)
        .await
        .unwrap();
    assert_eq!((second.documents, second.deleted), (1, 2));
    assert_eq!(declared("p/-/p-1.0.0.tgz").await, None);
    assert_eq!(declared("q/-/q-1.0.0.tgz").await, None);
    assert!(declared("p/-/p-2.0.0.tgz").await.is_some(), "still listed");
    assert!(declared("z/-/z-1.0.0.tgz").await.is_some(), "a pin is kept");
    // What is kept still holds: the pinned artifact is served from the cache.
    let (status, cache_status, _) = get(&client, &format!("{base}/r/z/-/z-1.0.0.tgz")).await;
    assert_eq!((status, cache_status.as_str()), (200, "HIT"));
    running.shutdown().await;
}
