//! Advisory feeds fetched through the cache: each `[[advisories]]` feed is
//! `all.zip` of its own remote (`advisories.{name}`, whose mirrors are the
//! feed's URLs, each a full URL of the export): failover across the URLs,
//! a cache entry `ls` lists and bundles carry, read from the cache after a
//! restart without asking upstream, revalidated (304) rather than downloaded again, and a
//! broken export purged from the cache rather than revalidated.

use std::path::Path;

use serde_json::Value;

use crate::support::mirror::Fault;
use crate::support::osv::{feed_status, malicious, osv_zip};
use crate::support::proxy::config_text;
use crate::support::{wait_until, MirrorServer, TestProxy};

/// The rows `mirrorcache ls --json` lists for `filter`.
fn listed(config: &Path, filter: &str) -> Vec<Value> {
    serde_json::from_str(&crate::support::binary::ls(config, &[filter, "--json"])).unwrap()
}

/// An npm remote quarantining malware, and feed `osv-npm` at `urls`.
fn remotes(urls: &[String], refresh: &str) -> String {
    let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"http://127.0.0.1:1\"]\nquarantine = [\"malicious\"]\n\n\
         [[advisories]]\nname = \"osv-npm\"\nurls = [{}]\nrefresh = \"{refresh}\"\n",
        urls.join(", ")
    )
}

/// A proxy in a fresh dir with feed `osv-npm` at `urls`, its config
/// written for `ls`: (dir, config file, remotes, proxy).
async fn started(
    urls: &[String],
    refresh: &str,
) -> (tempfile::TempDir, std::path::PathBuf, String, TestProxy) {
    let dir = tempfile::tempdir().unwrap();
    let remotes = remotes(urls, refresh);
    let config = dir.path().join("test.toml");
    std::fs::write(&config, config_text(dir.path(), &remotes)).unwrap();
    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    (dir, config, remotes, proxy)
}

#[tokio::test]
async fn a_feed_fails_over_to_its_next_url_is_cached_and_after_a_restart_or_in_a_bundle_comes_from_the_cache(
) {
    let (down, failing, good) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    down.stop();
    failing.set_fault(Fault::Status(500));
    let export = osv_zip(&[malicious("MAL-2025-47001", "npm", "mc-worm", &["1.0.1"])]);
    failing.put("/npm/all.zip", export.clone());
    // Each URL is the export itself, whatever its path on its host.
    good.put("/mirror/osv/npm/all.zip", export.clone());
    let urls = [
        down.url("/npm/all.zip"),
        failing.url("/npm/all.zip"),
        good.url("/mirror/osv/npm/all.zip"),
    ];
    let (dir, config, remotes, proxy) = started(&urls, "1h").await;
    let feed = feed_status(&proxy.base, "osv-npm", |f| f["report"]["records"] == 1).await;
    assert!(
        feed["source"]
            .as_str()
            .unwrap()
            .ends_with("/mirror/osv/npm/all.zip"),
        "{feed}"
    );
    // Connection refused, then a 500, then the export: one request each.
    assert_eq!(failing.hits("/npm/all.zip"), 1);
    assert_eq!(good.hits("/mirror/osv/npm/all.zip"), 1);
    assert_eq!(good.total(), 1);
    // A cache entry like any other, which clients cannot ask for.
    proxy.settle().await;
    let rows = listed(&config, "advisories.osv-npm");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["path"], "all.zip");
    assert_eq!(rows[0]["size"], export.len() as u64);
    let response = reqwest::get(proxy.url("/advisories.osv-npm/all.zip"))
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(good.total(), 1);
    proxy.stop().await;

    // Restarted without the saved copy: the feed comes from the cache,
    // no URL is asked, and the saved copy is written again.
    std::fs::remove_dir_all(dir.path().join("store/advisories")).unwrap();
    let (failing_before, good_before) = (failing.total(), good.total());
    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let feed = feed_status(&proxy.base, "osv-npm", |f| f["report"]["records"] == 1).await;
    assert_eq!(
        feed["source"], "the cache (advisories.osv-npm/all.zip)",
        "{feed}"
    );
    assert_eq!(
        (failing.total(), good.total()),
        (failing_before, good_before)
    );
    // Counted as a request of the feed's remote, as a client's is.
    let hits = "mirrorcache_requests_total{remote=\"advisories.osv-npm\",cache=\"HIT\"}";
    assert_eq!(proxy.metric(hits).await, 1.0);
    let response = reqwest::get(proxy.url("/npm/mc-worm/-/mc-worm-1.0.1.tgz"))
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(
        std::fs::read(dir.path().join("store/advisories/osv-npm.zip")).unwrap(),
        export
    );
    proxy.stop().await;

    // A bundle carries the entry (and the saved copy) to an offline site
    // with the same feed: in force there, no URL asked.
    let bundle = dir.path().join("feeds.mcb");
    let out = mirrorcache(&["export", "--out"], &bundle, &config, "advisories.osv-npm");
    assert!(out.contains("exported 1 entries"), "{out}");
    let asked = (failing.total(), good.total());
    failing.stop();
    good.stop();
    let offline = tempfile::tempdir().unwrap();
    let offline_config = offline.path().join("test.toml");
    std::fs::write(&offline_config, config_text(offline.path(), &remotes)).unwrap();
    let out = mirrorcache(&["import"], &bundle, &offline_config, "");
    assert!(out.contains("imported 1 entries"), "{out}");
    let rows = listed(&offline_config, "advisories.osv-npm");
    assert_eq!(rows[0]["size"], export.len() as u64);
    let proxy = TestProxy::start_in(offline.path(), &remotes).await;
    feed_status(&proxy.base, "osv-npm", |f| {
        f["report"]["records"] == 1 && f["unchanged_at_ms"].is_i64()
    })
    .await;
    assert_eq!((failing.total(), good.total()), asked);
    proxy.stop().await;
}

/// `mirrorcache ARGS… FILE --config CONFIG [LAST]`'s output, once it succeeded.
fn mirrorcache(args: &[&str], file: &Path, config: &Path, last: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(args)
        .arg(file)
        .arg("--config")
        .arg(config)
        .args([last].into_iter().filter(|l| !l.is_empty()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn an_unchanged_feed_is_revalidated_not_downloaded_and_a_broken_one_is_not_kept() {
    let feeds = MirrorServer::start().await;
    let first = osv_zip(&[malicious("MAL-2025-47001", "npm", "mc-worm", &["1.0.1"])]);
    feeds.put("/npm/all.zip", first);
    let (_dir, config, _, proxy) = started(&[feeds.url("/npm/all.zip")], "1s").await;
    let feed = feed_status(&proxy.base, "osv-npm", |f| f["report"]["records"] == 1).await;
    // Every refresh after the first download is a conditional request the
    // feed's host answers 304: nothing downloaded or read again.
    wait_until("two refreshes answered 304", async || {
        let answered_304 = feeds.not_modified();
        answered_304 >= 2 && feeds.hits("/npm/all.zip") == answered_304 + 1
    })
    .await;
    let unchanged = feed_status(&proxy.base, "osv-npm", |f| f["unchanged_at_ms"].is_i64()).await;
    assert_eq!(unchanged["loaded_at_ms"], feed["loaded_at_ms"]);

    // A broken export: the index in force stays, and its bytes leave the
    // cache, so the next refreshes download again instead of revalidating.
    feeds.put("/npm/all.zip", b"<html>maintenance</html>".to_vec());
    feed_status(&proxy.base, "osv-npm", |f| {
        f["error"]
            .as_str()
            .is_some_and(|e| e.contains("not a readable zip"))
    })
    .await;
    let (asked, answered_304) = (feeds.hits("/npm/all.zip"), feeds.not_modified());
    wait_until("two more refreshes", async || {
        feeds.hits("/npm/all.zip") >= asked + 2
    })
    .await;
    assert_eq!(feeds.not_modified(), answered_304);
    let feed = feed_status(&proxy.base, "osv-npm", |f| f["error"].is_string()).await;
    assert_eq!(feed["report"]["records"], 1, "{feed}");

    // A good export again: in force, and the cache entry is its bytes.
    let second = osv_zip(&[
        malicious("MAL-2025-47001", "npm", "mc-worm", &["1.0.1"]),
        malicious("MAL-2025-47002", "npm", "mc-evil", &["1.0.0"]),
    ]);
    feeds.put("/npm/all.zip", second.clone());
    feed_status(&proxy.base, "osv-npm", |f| {
        f["report"]["records"] == 2 && f["error"].is_null()
    })
    .await;
    proxy.settle().await;
    let rows = listed(&config, "advisories.osv-npm");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["size"], second.len() as u64);
    proxy.stop().await;
}

#[tokio::test]
async fn a_url_answering_something_else_than_an_export_gives_way_to_the_next_and_is_not_kept() {
    let (maintenance, good) = (MirrorServer::start().await, MirrorServer::start().await);
    maintenance.put("/npm/all.zip", b"<html>maintenance</html>".to_vec());
    let export = osv_zip(&[malicious("MAL-2025-47001", "npm", "mc-worm", &["1.0.1"])]);
    good.put("/osv/npm/all.zip", export.clone());
    let urls = [
        maintenance.url("/npm/all.zip"),
        good.url("/osv/npm/all.zip"),
    ];
    let (_dir, config, _, proxy) = started(&urls, "1h").await;
    let feed = feed_status(&proxy.base, "osv-npm", |f| f["report"]["records"] == 1).await;
    assert!(
        feed["source"]
            .as_str()
            .unwrap()
            .ends_with("/osv/npm/all.zip"),
        "{feed}"
    );
    assert!(feed["error"].is_null(), "{feed}");
    assert_eq!((maintenance.total(), good.total()), (1, 1));
    // The entry is the export's bytes, not the page's.
    proxy.settle().await;
    let rows = listed(&config, "advisories.osv-npm");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["size"], export.len() as u64);
    proxy.stop().await;
}
