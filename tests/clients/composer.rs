//! composer (Debian's 2.5) through a `composer` remote, against a fixture
//! Packagist on 127.0.0.1: a `packages.json` with Packagist's root-relative
//! `metadata-url`, a minified p2 file per package, and zip archives on two
//! dist hosts (the remote's `files`), the first with a tampered `acme/hello`
//! whose `dist.shasum` still declares the real sha1; `acme/world`'s shasum
//! is empty, as Packagist's is for GitHub zipballs, and it is pinned on first
//! use. `composer install` runs through the proxy, then with every origin
//! stopped; `composer audit` asks the advisories API (`packages.json`'s
//! `security-advisories.api-url`, re-pointed at the proxy) through it.

use std::path::Path;
use std::process::Command;

use sha1::Digest as _;

use crate::fixtures::module_zip;
use crate::support::{tampered, MirrorServer, TestProxy};
use crate::{client, report, run, write};

/// One package version's minified p2 file, its archive at `dist`'s `/dl/`.
fn p2(
    dist: &MirrorServer,
    name: &str,
    zip: &[u8],
    shasum: bool,
    require: serde_json::Value,
) -> String {
    let sha1 = if shasum {
        hex::encode(sha1::Sha1::digest(zip))
    } else {
        String::new()
    };
    serde_json::json!({"minified": "composer/2.0", "packages": {name: [
        {"name": name, "version": "1.0.0", "version_normalized": "1.0.0.0", "type": "library",
         "require": require, "autoload": {"psr-4": {"Acme\\": "src/"}},
         "dist": {"type": "zip", "url": dist.url(&format!("/dl/{name}/1.0.0.zip")),
                  "reference": "0123456789abcdef", "shasum": sha1}}
    ]}})
    .to_string()
    .replace('/', "\\/")
}

fn project(w: &Path, n: usize, repository: &str) -> std::path::PathBuf {
    let dir = w.join(format!("app{n}"));
    let manifest = serde_json::json!({
        "name": "mc/app",
        "require": {"acme/world": "^1.0"},
        "repositories": [{"type": "composer", "url": repository}, {"packagist.org": false}],
        "config": {"secure-http": false}
    });
    write(&dir.join("composer.json"), &manifest.to_string());
    dir
}

fn composer_install(w: &Path, n: usize, dir: &Path) -> String {
    let home = w.join(format!("composer-home{n}"));
    run(Command::new("composer")
        .args([
            "install",
            "--no-interaction",
            "--no-progress",
            "--prefer-dist",
        ])
        .current_dir(dir)
        .env("HOME", &home)
        .env("COMPOSER_HOME", &home)
        .env("COMPOSER_CACHE_DIR", home.join("cache"))
        .env("COMPOSER_ALLOW_SUPERUSER", "1"))
}

/// `composer audit`'s report (it exits non-zero when it finds advisories).
fn composer_audit(w: &Path, n: usize, dir: &Path) -> String {
    let home = w.join(format!("composer-home{n}"));
    let out = Command::new("composer")
        .args(["audit", "--no-interaction", "--format=plain"])
        .current_dir(dir)
        .env("HOME", &home)
        .env("COMPOSER_HOME", &home)
        .env("COMPOSER_CACHE_DIR", home.join("cache"))
        .env("COMPOSER_ALLOW_SUPERUSER", "1")
        .output()
        .expect("composer audit runs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composer_installs_past_a_tampered_dist_host_then_from_the_cache_alone() {
    let Some(version) = client("composer", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (repo, tampering, dist) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    let hello = module_zip(
        "hello",
        "1.0.0",
        &[("src/Hello.php", "<?php\nnamespace Acme;\nclass Hello {}\n")],
    );
    let world = module_zip(
        "world",
        "1.0.0",
        &[("src/World.php", "<?php\nnamespace Acme;\nclass World {}\n")],
    );
    repo.put(
        "/repo/packages.json",
        r#"{"packages":[],"metadata-url":"/p2/%package%.json","available-packages":["acme/hello","acme/world"],"security-advisories":{"metadata":false,"api-url":"/api/security-advisories/"}}"#,
    );
    // The advisories API (a POST of the package names), root-relative as
    // a private Packagist may write it.
    let advisories = serde_json::json!({"advisories": {"acme/hello": [{
        "advisoryId": "PKSA-mc-0001", "packageName": "acme/hello", "remoteId": "mc-1",
        "title": "mc test advisory", "link": "", "cve": "CVE-2099-0001",
        "affectedVersions": ">=1.0.0,<1.1.0", "source": "mc", "reportedAt": "2024-01-01 00:00:00",
        "composerRepository": "mc", "sources": [{"name": "mc", "remoteId": "mc-1"}]}]}});
    repo.put("/repo/api/security-advisories/", advisories.to_string());
    // dist.url names the first dist host; the proxy tries the second after it.
    let require = serde_json::json!({"acme/hello": "^1.0"});
    repo.put(
        "/repo/p2/acme/hello.json",
        p2(
            &tampering,
            "acme/hello",
            &hello,
            true,
            serde_json::json!({}),
        ),
    );
    repo.put(
        "/repo/p2/acme/world.json",
        p2(&tampering, "acme/world", &world, false, require),
    );
    tampering.put("/dl/acme/hello/1.0.0.zip", tampered(&hello));
    tampering.put("/dl/acme/world/1.0.0.zip", world.clone());
    dist.put("/dl/acme/hello/1.0.0.zip", hello.clone());
    dist.put("/dl/acme/world/1.0.0.zip", world.clone());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"php\"\nkind = \"composer\"\nmirrors = [\"{}\"]\nfiles = {}\nstrategy = \"single\"\n",
        repo.url("/repo"),
        crate::support::toml_urls(&[&tampering, &dist], "/dl")
    ))
    .await;
    let url = proxy.url("/php/");
    let upstream = || repo.total() + tampering.total() + dist.total();

    let dir = project(w, 1, &url);
    let said = tokio::task::block_in_place(|| composer_install(w, 1, &dir));
    assert!(
        dir.join("vendor/acme/world/src/World.php").exists(),
        "{said}"
    );
    assert!(
        dir.join("vendor/acme/hello/src/Hello.php").exists(),
        "{said}"
    );
    assert_eq!(dist.hits("/dl/acme/hello/1.0.0.zip"), 1);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    // `composer audit` asks the advisories API through the proxy (passed
    // through, never cached) and reports the fixture's advisory.
    let audit = tokio::task::block_in_place(|| composer_audit(w, 1, &dir));
    assert!(audit.contains("CVE-2099-0001"), "{audit}");
    assert_eq!(repo.hits("/repo/api/security-advisories/"), 1);
    let first = upstream();

    repo.stop();
    tampering.stop();
    dist.stop();
    let dir = project(w, 2, &url);
    let said = tokio::task::block_in_place(|| composer_install(w, 2, &dir));
    assert!(
        dir.join("vendor/acme/world/src/World.php").exists(),
        "{said}"
    );
    let second = upstream() - first;
    assert_eq!(second, 0);
    report("composer", &version, first, second);
    proxy.stop().await;
}
