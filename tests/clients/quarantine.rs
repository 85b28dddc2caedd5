//! Advisory quarantine with the real clients: an OSV export (records
//! written here) served by a fixture mirror as the `[[advisories]]` feed.
//! `npm install` and `pip install` resolve to the newest version no
//! advisory names; an exact pin of a quarantined version fails; a package
//! whose every version is quarantined fails with the advisory id in the
//! client's output (npm prints the packument's 403 body, pip the status
//! line of the failed download: pip's `network/download.py`
//! `raise_for_status`, npm's `npm-registry-fetch` `errors.js`).

use crate::guard::{
    fails, npm_install, npm_publish, pip_builds_wheels, pip_install, pypi_publish, show,
};
use crate::support::osv::{feed_status, malicious, osv_zip};
use crate::support::{available, MirrorServer, TestProxy};
use crate::{run, version};

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

        let said = fails(&mut npm(2, "mc-worm@1.0.1").0);
        show("npm quarantined pin", &said, "mc-worm@1.0.1");
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

        let said = fails(&mut pip(2, "mc-snake==1.1"));
        show("pip quarantined pin", &said, "mc-snake==1.1");
        let said = fails(&mut pip(3, "mc-viper"));
        show("pip quarantined", &said, "403 Client Error");
        assert!(said.contains("MAL-2025-47004"), "{said}");
    });
    assert_eq!(files.hits("/packages/mc_snake-1.1-py3-none-any.whl"), 0);
    proxy.stop().await;
}
