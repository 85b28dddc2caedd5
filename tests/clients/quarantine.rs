//! Advisory quarantine with the real clients: an OSV export (records
//! written here in the OSV schema) served by a fixture mirror as the
//! `[[advisories]]` feed. npm, pip, cargo and mvn resolve a range to the
//! newest version no advisory names; an exact pin of a quarantined version
//! fails with the advisory id in the client's output: npm prints it as the
//! deprecation warning and the tarball's 403 body (`npm-registry-fetch`
//! `errors.js`), pip as the yank reason and the download's status line
//! (`network/download.py` `raise_for_status`), cargo as the dependency it
//! cannot find, mvn as the pom's status line. A package whose every version
//! is quarantined fails with the id as well.

use std::process::Command;

use crate::fixtures::{assert_leaf_downloaded, cargo_consumer};
use crate::guard::{
    fails, npm_install, npm_publish, pip_builds_wheels, pip_install, pypi_publish, show,
};
use crate::maven;
use crate::support::osv::{feed_status, malicious, osv_zip};
use crate::support::{available, sha256_hex, MirrorServer, TestProxy};
use crate::{client, run, version, write};

/// The feed: `mc-worm` 1.0.1 and every `mc-evil` (npm), `mc-snake` 1.1 and
/// every `mc-viper` (PyPI) are malware.
fn feed() -> Vec<u8> {
    osv_zip(&[
        malicious("MAL-2025-47001", "npm", "mc-worm", &["1.0.1"]),
        malicious("MAL-2025-47002", "npm", "mc-evil", &["1.0.0"]),
        malicious("MAL-2025-47003", "PyPI", "mc-snake", &["1.1"]),
        malicious("MAL-2025-47004", "PyPI", "mc_viper", &["1.0"]),
    ])
}

fn advisories(feeds: &MirrorServer) -> String {
    format!(
        "[[advisories]]\nname = \"osv\"\nurls = [\"{}\"]\n",
        feeds.url("/all.zip")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_resolves_past_quarantined_versions_and_prints_the_advisory() {
    let Some(_npm) = version("npm", "--version") else {
        available("npm", false);
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (registry, feeds) = (MirrorServer::start().await, MirrorServer::start().await);
    feeds.put("/all.zip", feed());
    npm_publish(&registry, w, "mc-worm", &[("1.0.0", None), ("1.0.1", None)]);
    npm_publish(&registry, w, "mc-evil", &[("1.0.0", None)]);
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\nquarantine = [\"malicious\"]\n\n{}",
        registry.url(""),
        advisories(&feeds)
    ))
    .await;
    feed_status(&proxy.base, "osv", |f| f["report"]["records"] == 4).await;
    let registry_url = proxy.url("/npm/");
    let npm = |n: usize, package: &str| npm_install(w, &registry_url, n, package);
    tokio::task::block_in_place(|| {
        let (mut cmd, project) = npm(1, "mc-worm");
        run(&mut cmd);
        let installed = std::fs::read_to_string(project.join("node_modules/mc-worm/package.json"));
        let installed: serde_json::Value = serde_json::from_str(&installed.unwrap()).unwrap();
        assert_eq!(installed["version"], "1.0.0");

        let (mut cmd, project) = npm(4, "mc-worm@^1.0.0");
        run(&mut cmd);
        let installed = std::fs::read_to_string(project.join("node_modules/mc-worm/package.json"));
        let installed: serde_json::Value = serde_json::from_str(&installed.unwrap()).unwrap();
        assert_eq!(installed["version"], "1.0.0");

        let said = fails(&mut npm(2, "mc-worm@1.0.1").0);
        show("npm quarantined pin", &said, "403 Forbidden");
        show("npm quarantined pin", &said, "MAL-2025-47001");
        let said = fails(&mut npm(3, "mc-evil").0);
        show("npm quarantined", &said, "MAL-2025-47002");
    });
    assert_eq!(registry.hits("/mc-worm/-/mc-worm-1.0.1.tgz"), 0);
    assert_eq!(registry.hits("/mc-evil/-/mc-evil-1.0.0.tgz"), 0);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_resolves_past_quarantined_versions_and_prints_the_advisory() {
    if !pip_builds_wheels() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (index, files, feeds) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    feeds.put("/all.zip", feed());
    pypi_publish(
        &index,
        &files,
        w,
        "mc-snake",
        &[("1.0", None), ("1.1", None)],
    );
    pypi_publish(&index, &files, w, "mc-viper", &[("1.0", None)]);
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\nquarantine = [\"malicious\"]\n\n{}",
        index.url(""),
        files.url(""),
        advisories(&feeds)
    ))
    .await;
    feed_status(&proxy.base, "osv", |f| f["report"]["records"] == 4).await;
    let index_url = proxy.url("/pypi/simple/");
    let pip = |n: usize, package: &str| pip_install(w, &index_url, n, package);
    tokio::task::block_in_place(|| {
        run(&mut pip(1, "mc-snake"));
        assert!(w.join("target1/mc_snake-1.0.dist-info").exists());
        assert!(!w.join("target1/mc_snake-1.1.dist-info").exists());

        run(&mut pip(4, "mc-snake>=1.0"));
        assert!(w.join("target4/mc_snake-1.0.dist-info").exists());

        let said = fails(&mut pip(2, "mc-snake==1.1"));
        show("pip quarantined pin", &said, "403 Client Error");
        show("pip quarantined pin", &said, "MAL-2025-47003");
        let said = fails(&mut pip(3, "mc-viper"));
        show("pip quarantined", &said, "403 Client Error");
        assert!(said.contains("MAL-2025-47004"), "{said}");
    });
    assert_eq!(files.hits("/packages/mc_snake-1.1-py3-none-any.whl"), 0);
    proxy.stop().await;
}

/// A critical advisory in the GitHub Advisory Database's shape: a SEMVER
/// range of crates.io's `mc_leaf` from 0.1.1 to 0.1.2, a CVSS v3 vector.
fn crate_advisory() -> serde_json::Value {
    serde_json::json!({
        "schema_version": "1.6.0",
        "id": "GHSA-mc44-mc55-mc66",
        "aliases": ["CVE-2025-99044"],
        "modified": "2025-09-08T12:00:00Z",
        "published": "2025-09-08T12:00:00Z",
        "summary": "Out-of-bounds write in mc_leaf",
        "details": "A crafted input writes past the end of a buffer.",
        "severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}],
        "affected": [{
            "package": {"ecosystem": "crates.io", "name": "mc_leaf", "purl": "pkg:cargo/mc_leaf"},
            "ranges": [{"type": "SEMVER", "events": [{"introduced": "0.1.1"}, {"fixed": "0.1.2"}]}],
            "database_specific": {"last_known_affected_version_range": "< 0.1.2"}
        }],
        "database_specific": {"cwe_ids": ["CWE-787"], "severity": "CRITICAL", "github_reviewed": true}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_resolves_past_a_quarantined_version_and_a_pin_names_the_advisory() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let krate = crate::fixtures::cargo_leaf(w);
    let (index, files) = crate::fixtures::cargo_origins(&krate).await;
    // 0.1.1: the same bytes under the next version, named by the advisory.
    let line = |v: &str| {
        serde_json::json!({"name": "mc_leaf", "vers": v, "deps": [], "cksum": sha256_hex(&krate),
                           "features": {}, "yanked": false})
    };
    index.put_typed(
        "/mc/_l/mc_leaf",
        format!("{}\n{}\n", line("0.1.0"), line("0.1.1")),
        "text/plain",
    );
    files.put_typed(
        "/crates/mc_leaf/0.1.1/download",
        krate.clone(),
        "application/x-tar",
    );
    let feeds = MirrorServer::start().await;
    feeds.put("/all.zip", osv_zip(&[crate_advisory()]));
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\nquarantine = [\"critical\"]\n\n{}",
        index.url(""),
        files.url("/crates"),
        advisories(&feeds)
    ))
    .await;
    feed_status(&proxy.base, "osv", |f| f["report"]["records"] == 1).await;
    let registry = format!("sparse+{}", proxy.url("/cargo/"));
    tokio::task::block_in_place(|| {
        let (project, home) = cargo_consumer(w, 1, &registry, "");
        run(Command::new("cargo")
            .arg("fetch")
            .current_dir(&project)
            .env("CARGO_HOME", &home));
        assert_leaf_downloaded(&home);
        let lock = std::fs::read_to_string(project.join("Cargo.lock")).unwrap();
        assert!(
            lock.contains("name = \"mc_leaf\"\nversion = \"0.1.0\""),
            "{lock}"
        );

        let (project, home) = cargo_consumer(w, 2, &registry, "");
        let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
        write(
            &project.join("Cargo.toml"),
            &manifest.replace("mc_leaf = \"0.1\"", "mc_leaf = \"=0.1.1\""),
        );
        let said = fails(
            Command::new("cargo")
                .arg("fetch")
                .current_dir(&project)
                .env("CARGO_HOME", &home),
        );
        show("cargo quarantined pin", &said, "GHSA-mc44-mc55-mc66");
    });
    assert_eq!(files.hits("/crates/mc_leaf/0.1.1/download"), 0);
    let (status, body) = get(&proxy.url("/cargo/api/v1/crates/mc_leaf/0.1.1/download")).await;
    assert_eq!(status, 403);
    assert!(body.contains("GHSA-mc44-mc55-mc66 (critical)"), "{body}");
    proxy.stop().await;
}

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// A malware record in the OpenSSF malicious-packages shape: an ECOSYSTEM
/// range of Maven's `org.apache.commons:commons-lang3` from 3.13.0, and
/// the version listed.
fn maven_malware() -> serde_json::Value {
    let mut record = malicious(
        "MAL-2025-47010",
        "Maven",
        "org.apache.commons:commons-lang3",
        &["3.13.0"],
    );
    record["affected"][0]["ranges"] =
        serde_json::json!([{"type": "ECOSYSTEM", "events": [{"introduced": "3.13.0"}]}]);
    record
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mvn_resolves_a_range_past_a_quarantined_version_and_a_pin_names_the_advisory() {
    let Some(_) = client("mvn", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let Some(repo) = maven::fixture(w) else {
        return;
    };
    let origin = MirrorServer::start().await;
    maven::serve(&origin, &repo);
    maven::publish_next_lang3(&origin, &repo, "3.13.0");
    let feeds = MirrorServer::start().await;
    feeds.put("/all.zip", osv_zip(&[maven_malware()]));
    let proxy = TestProxy::start(&format!(
        "{}\nquarantine = [\"malicious\"]\n\n{}",
        maven::remote(&[&origin], ""),
        advisories(&feeds)
    ))
    .await;
    feed_status(&proxy.base, "osv", |f| f["report"]["records"] == 1).await;
    let url = proxy.url("/maven/");
    tokio::task::block_in_place(|| {
        let (project, settings, local) = maven::workspace(w, 1, &url);
        maven::set_lang3_version(&project, "[3.0,4.0)");
        let out = maven::mvn(w, 1, &project, &settings, &local);
        maven::assert_built(&out, &project);
        assert!(local.join(maven::LANG3_JAR).exists());

        let (project, settings, local) = maven::workspace(w, 2, &url);
        maven::set_lang3_version(&project, "3.13.0");
        let out = maven::mvn(w, 2, &project, &settings, &local);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{said}");
        show("mvn quarantined pin", &said, "MAL-2025-47010");
    });
    let quarantined = "/m/org/apache/commons/commons-lang3/3.13.0/commons-lang3-3.13.0";
    assert_eq!(origin.hits(&format!("{quarantined}.jar")), 0);
    proxy.stop().await;
}
