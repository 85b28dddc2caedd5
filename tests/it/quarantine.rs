//! Advisory quarantine: OSV exports (zips of records written here in the
//! OSV schema: `MAL-` and `GHSA-` ids, ECOSYSTEM and SEMVER ranges,
//! `versions` lists, `database_specific`, CVSS vectors) served by a fixture
//! mirror as `[[advisories]]` feeds. A quarantined version stays in the
//! packument marked deprecated (simple pages: yanked) and its tarball is
//! refused with the advisory id, also after it was cached, and listed on
//! the dashboard; `quarantine_allow` lets one through; a broken feed keeps
//! the last good index and says why on `/-/status`; an offline import is
//! read at start.

use std::process::Command;

use serde_json::{json, Value};

use crate::guard::wheel_link;
use crate::support::osv::{malicious, osv_zip};
use crate::support::proxy::status_line;
use crate::support::{MirrorServer, TestProxy};

/// `mc-worm` 1.0.1 is malware (a `versions` list).
fn malware() -> Value {
    malicious("MAL-2025-47001", "npm", "mc-worm", &["1.0.1"])
}

/// `mc-lib` from 2.0.0 up to (not including) 2.1.3, critical by its CVSS
/// vector; an ECOSYSTEM range of PyPI beside it.
fn vulnerability() -> Value {
    json!({
        "schema_version": "1.6.0",
        "id": "GHSA-mc11-mc22-mc33",
        "aliases": ["CVE-2025-99001"],
        "modified": "2025-09-09T12:00:00Z",
        "summary": "Remote code execution in mc-lib",
        "severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}],
        "affected": [
            {
                "package": {"ecosystem": "npm", "name": "mc-lib", "purl": "pkg:npm/mc-lib"},
                "ranges": [{"type": "SEMVER", "events": [{"introduced": "2.0.0"}, {"fixed": "2.1.3"}]}]
            },
            {
                "package": {"ecosystem": "PyPI", "name": "MC_Lib"},
                "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"last_affected": "2.1"}]}]
            }
        ]
    })
}

/// An npm registry with `mc-worm` 1.0.0 and 1.0.1, `mc-lib` 1.9.0, 2.1.0
/// and 2.1.3 (latest), packuments and tarballs.
fn npm_registry(registry: &MirrorServer) {
    for (name, versions) in [
        ("mc-worm", &["1.0.0", "1.0.1"][..]),
        ("mc-lib", &["1.9.0", "2.1.0", "2.1.3"][..]),
    ] {
        let mut listed = serde_json::Map::new();
        for v in versions {
            let tarball = registry.url(&format!("/{name}/-/{name}-{v}.tgz"));
            listed.insert(
                v.to_string(),
                json!({"name": name, "version": v, "dist": {"tarball": tarball}}),
            );
            registry.put(&format!("/{name}/-/{name}-{v}.tgz"), format!("{name} {v}"));
        }
        let latest = versions.last().unwrap();
        // mc-worm 1.0.1 was published in 2019 (for `quarantine_since`).
        let time = json!({"1.0.1": "2019-06-01T00:00:00.000Z"});
        let doc = json!({"name": name, "dist-tags": {"latest": latest}, "versions": listed, "time": time});
        registry.put_typed(&format!("/{name}"), doc.to_string(), "application/json");
    }
}

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The versions a packument served by the proxy offers to a range (those
/// not marked `deprecated`), and its `latest`.
async fn listed(proxy: &TestProxy, path: &str) -> (Vec<String>, String) {
    let (status, body) = get(&proxy.url(path)).await;
    assert_eq!(status, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    let versions = doc["versions"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, manifest)| manifest.get("deprecated").is_none())
        .map(|(version, _)| version.clone())
        .collect();
    (
        versions,
        doc["dist-tags"]["latest"].as_str().unwrap().to_string(),
    )
}

/// The dashboard's quarantine table: remote, package, version, advisory,
/// class and count of each row.
async fn refused_on_dashboard(proxy: &TestProxy) -> Vec<[String; 6]> {
    let (status, page) = get(&proxy.url("/-/")).await;
    assert_eq!(status, 200);
    let html = scraper::Html::parse_document(&page);
    let rows = scraper::Selector::parse("#quarantine-body tr").unwrap();
    let cell = |name: &str| scraper::Selector::parse(&format!("td.{name}")).unwrap();
    html.select(&rows)
        .map(|row| {
            ["remote", "package", "version", "advisory", "class", "count"].map(|name| {
                row.select(&cell(name))
                    .map(|c| c.text().collect::<String>())
                    .collect()
            })
        })
        .collect()
}

/// `mirrorcache advisories import --config config export`.
fn import_feed(config: &std::path::Path, export: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["advisories", "import", "--config"])
        .arg(config)
        .arg(export)
        .output()
        .unwrap()
}

async fn feed_status(proxy: &TestProxy, name: &str, ready: impl Fn(&Value) -> bool) -> Value {
    crate::support::osv::feed_status(&proxy.base, name, ready).await
}

fn remotes(registry: &MirrorServer, feeds: &MirrorServer) -> String {
    format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{registry}\"]\nquarantine = [\"malicious\", \"critical\"]\n\n\
         [[remote]]\nname = \"npm-allow\"\nkind = \"npm\"\nmirrors = [\"{registry}\"]\nquarantine = [\"malicious\", \"GHSA-mc11-mc22-mc33\"]\nquarantine_allow = [\"mc-worm@1.0.1\", \"CVE-2025-99001\"]\n\n\
         [[remote]]\nname = \"npm-since\"\nkind = \"npm\"\nmirrors = [\"{registry}\"]\nquarantine = [\"malicious\"]\nquarantine_since = \"2025-09-01\"\n\n\
         [[advisories]]\nname = \"osv-npm\"\nurls = [\"{gone}\", \"{feed}\"]\nrefresh = \"1s\"\n",
        registry = registry.url(""),
        gone = feeds.url("/gone/all.zip"),
        feed = feeds.url("/npm/all.zip"),
    )
}

#[tokio::test]
async fn quarantined_versions_are_deprecated_in_packuments_and_their_tarballs_get_403() {
    let (registry, feeds) = (MirrorServer::start().await, MirrorServer::start().await);
    npm_registry(&registry);
    feeds.put("/npm/all.zip", osv_zip(&[malware()]));
    let proxy = TestProxy::start(&remotes(&registry, &feeds)).await;
    let feed = feed_status(&proxy, "osv-npm", |f| f["report"]["records"] == 1).await;
    assert!(
        feed["source"].as_str().unwrap().ends_with("/npm/all.zip"),
        "{feed}"
    );
    assert_eq!(
        feeds.hits("/gone/all.zip"),
        1,
        "the first URL was tried first"
    );
    // Refreshed every second with the validators of the copy in force: a
    // 304 keeps the index, nothing is downloaded or read again.
    let unchanged = feed_status(&proxy, "osv-npm", |f| f["unchanged_at_ms"].is_i64()).await;
    assert_eq!(unchanged["loaded_at_ms"], feed["loaded_at_ms"]);

    // Clients resolve to the newest version no advisory names.
    assert_eq!(
        listed(&proxy, "/npm/mc-worm").await,
        (vec!["1.0.0".to_string()], "1.0.0".to_string())
    );
    let (status, body) = get(&proxy.url("/npm/mc-worm/-/mc-worm-1.0.1.tgz")).await;
    assert_eq!(status, 403);
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        error["error"],
        "mc-worm@1.0.1 is quarantined by this proxy: MAL-2025-47001 (malicious): Malicious code in mc-worm (npm)"
    );
    assert_eq!(registry.hits("/mc-worm/-/mc-worm-1.0.1.tgz"), 0);
    let counted = "mirrorcache_quarantine_refusals_total{remote=\"npm\",class=\"malicious\"}";
    assert_eq!(proxy.metric(counted).await, 1.0);
    let _ = get(&proxy.url("/npm/mc-worm/-/mc-worm-1.0.1.tgz")).await;
    assert_eq!(
        refused_on_dashboard(&proxy).await,
        [[
            "npm",
            "mc-worm",
            "1.0.1",
            "MAL-2025-47001",
            "malicious",
            "2"
        ]]
    );
    assert_eq!(
        get(&proxy.url("/npm/mc-worm/-/mc-worm-1.0.0.tgz")).await,
        (200, "mc-worm 1.0.0".to_string())
    );
    // The break-glass remote serves the allowed version.
    assert_eq!(
        get(&proxy.url("/npm-allow/mc-worm/-/mc-worm-1.0.1.tgz")).await,
        (200, "mc-worm 1.0.1".to_string())
    );

    // Published before `quarantine_since`: listed and served.
    assert_eq!(
        listed(&proxy, "/npm-since/mc-worm").await.0,
        ["1.0.0", "1.0.1"]
    );
    assert_eq!(
        get(&proxy.url("/npm-since/mc-worm/-/mc-worm-1.0.1.tgz"))
            .await
            .0,
        200
    );

    // mc-lib 2.1.0 is cached before any advisory names it.
    assert_eq!(
        get(&proxy.url("/npm/mc-lib/-/mc-lib-2.1.0.tgz")).await,
        (200, "mc-lib 2.1.0".to_string())
    );
    assert_eq!(listed(&proxy, "/npm/mc-lib").await.0.len(), 3);
    // The feed names it: refused at once, from the cache too, no purge.
    feeds.put("/npm/all.zip", osv_zip(&[malware(), vulnerability()]));
    feed_status(&proxy, "osv-npm", |f| f["report"]["records"] == 2).await;
    let (status, body) = get(&proxy.url("/npm/mc-lib/-/mc-lib-2.1.0.tgz")).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("GHSA-mc11-mc22-mc33 (critical): Remote code execution in mc-lib"),
        "{body}"
    );
    assert_eq!(registry.hits("/mc-lib/-/mc-lib-2.1.0.tgz"), 1);
    assert_eq!(
        listed(&proxy, "/npm/mc-lib").await,
        (
            vec!["1.9.0".to_string(), "2.1.3".to_string()],
            "2.1.3".to_string()
        )
    );
    // What a team must rebuild: the cached artifacts an advisory names.
    let (status, body) = get(&proxy.url("/-/advisories/npm/affected")).await;
    assert_eq!(status, 200, "{body}");
    let affected: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        affected,
        json!([{"path": "mc-lib/-/mc-lib-2.1.0.tgz", "package": "mc-lib", "version": "2.1.0",
                "advisory": "GHSA-mc11-mc22-mc33", "class": "critical",
                "summary": "Remote code execution in mc-lib"}])
    );
    // Allowed by an alias of the advisory the remote names by id.
    assert_eq!(
        get(&proxy.url("/npm-allow/mc-lib/-/mc-lib-2.1.0.tgz"))
            .await
            .0,
        200
    );
    let line = status_line(&proxy.base, "/npm/mc-lib/-/mc-lib-2.1.0.tgz").await;
    assert_eq!(line, "HTTP/1.1 403 Forbidden");
    let counted = "mirrorcache_quarantine_refusals_total{remote=\"npm\",class=\"critical\"}";
    assert_eq!(proxy.metric(counted).await, 2.0);

    // Broken feeds: truncated, not a zip, a malformed record. The last
    // good index stays in force and the status says why.
    let good = osv_zip(&[malware()]);
    let malformed = osv_zip(&[json!({"id": "GHSA-bad", "affected": {"not": "a list"}})]);
    for (broken, says) in [
        (good[..good.len() - 30].to_vec(), "not a readable zip"),
        (b"<html>maintenance</html>".to_vec(), "not a readable zip"),
        (malformed, "GHSA-bad.json is not an OSV record"),
    ] {
        feeds.put("/npm/all.zip", broken);
        let feed = feed_status(&proxy, "osv-npm", |f| {
            f["error"].as_str().is_some_and(|e| e.contains(says))
        })
        .await;
        assert_eq!(feed["report"]["records"], 2, "{feed}");
        assert_eq!(
            get(&proxy.url("/npm/mc-lib/-/mc-lib-2.1.0.tgz")).await.0,
            403
        );
        assert_eq!(listed(&proxy, "/npm/mc-worm").await.0, ["1.0.0"]);
    }
    let saved = std::fs::read(proxy.dir.join("store/advisories/osv-npm.zip")).unwrap();
    assert_eq!(
        saved,
        osv_zip(&[malware(), vulnerability()]),
        "the last good zip is kept"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn an_offline_import_is_in_force_at_start_and_beside_a_running_server_and_pypi_shows_the_id()
{
    let dir = tempfile::tempdir().unwrap();
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let wheel = |v: &str| format!("mc_lib-{v}-py3-none-any.whl");
    let link = |v: &str| wheel_link(&files, &wheel(v));
    let html = format!(
        "<html><body>{}{}{}</body></html>",
        link("2.0"),
        link("2.1"),
        link("2.2")
    );
    index.put_typed("/simple/mc-lib/", html, "text/html");
    for v in ["2.0", "2.1", "2.2"] {
        files.put(&format!("/packages/{}", wheel(v)), format!("wheel {v}"));
    }
    let remotes = format!(
        "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\nquarantine = [\"critical\", \"malicious\"]\nquarantine_since = \"2020-01-01\"\n",
        index.url(""),
        files.url("")
    );
    let config = dir.path().join("mirrorcache.toml");
    std::fs::write(
        &config,
        crate::support::proxy::config_text(dir.path(), &remotes),
    )
    .unwrap();
    let export = dir.path().join("carried.zip");
    std::fs::write(&export, osv_zip(&[vulnerability(), malware()])).unwrap();
    let out = import_feed(&config, &export);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("feed \"imported\": 2 records"), "{stdout}");
    // A file that is no OSV export is refused and nothing is saved.
    std::fs::write(dir.path().join("bad.zip"), b"PK\x03\x04 truncated").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["advisories", "import", "--name", "bad", "--config"])
        .arg(&config)
        .arg(dir.path().join("bad.zip"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!dir.path().join("store/advisories/bad.zip").exists());

    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let feed = feed_status(&proxy, "imported", |f| f["report"]["records"] == 2).await;
    assert_eq!(feed["report"]["packages"]["PyPI"], 1, "{feed}");
    let (status, body) = get(&proxy.url("/pypi/simple/mc-lib/")).await;
    assert_eq!(status, 200);
    // Listed, yanked with the reason: pip takes them only for an exact pin.
    for v in ["2.0", "2.1"] {
        let marked = format!(
            "<a data-yanked=\"mc-lib@{v} is quarantined by this proxy: GHSA-mc11-mc22-mc33 (critical): Remote code execution in mc-lib\" href=\"{}",
            proxy.url(&format!("/pypi/~files/packages/{}", wheel(v)))
        );
        assert!(body.contains(&marked), "{body}");
    }
    assert!(
        body.contains(&format!(
            "<a href=\"{}",
            proxy.url(&format!("/pypi/~files/packages/{}", wheel("2.2")))
        )),
        "{body}"
    );
    // pip shows only the status line of a failed download.
    let line = status_line(
        &proxy.base,
        &format!("/pypi/~files/packages/{}", wheel("2.1")),
    )
    .await;
    assert!(
        line.starts_with(
            "HTTP/1.1 403 mc-lib@2.1 is quarantined by this proxy: GHSA-mc11-mc22-mc33 (critical)"
        ),
        "{line}"
    );
    assert_eq!(files.hits(&format!("/packages/{}", wheel("2.1"))), 0);
    assert_eq!(
        get(&proxy.url(&format!("/pypi/~files/packages/{}", wheel("2.2")))).await,
        (200, "wheel 2.2".to_string())
    );
    // A newer export imported beside the running server is in force
    // within seconds, without a restart.
    let mut newer = vec![vulnerability(), malware()];
    newer.push(malicious("MAL-2025-47030", "PyPI", "mc-lib", &["2.2"]));
    std::fs::write(&export, osv_zip(&newer)).unwrap();
    let out = import_feed(&config, &export);
    assert!(out.status.success());
    feed_status(&proxy, "imported", |f| f["report"]["records"] == 3).await;
    let line = status_line(
        &proxy.base,
        &format!("/pypi/~files/packages/{}", wheel("2.2")),
    )
    .await;
    assert!(line.contains("MAL-2025-47030 (malicious)"), "{line}");
    proxy.stop().await;
}
