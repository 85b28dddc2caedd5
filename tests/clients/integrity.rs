//! Declared digests with the real clients: the first of two files mirrors
//! sends same-size, different bytes (a tampered mirror or CDN node). pip,
//! npm and cargo still install, the cache holds the right bytes and the
//! metric counts the refusal. With the tampered mirror alone, the client
//! fails, nothing is cached, and the proxy's 502 names both digests.

use std::process::{Command, Output};

use serde_json::json;

use crate::support::{available, sha256_hex, tampered, toml_urls, MirrorServer, TestProxy};
use crate::{run, version};

async fn integrity_failures(proxy: &TestProxy) -> f64 {
    proxy.metric("mirrorcache_integrity_failures_total").await
}

/// What a user checks afterwards: the proxy serves the right bytes (from
/// its cache), or refuses with a 502 naming both digests.
async fn assert_served(proxy: &TestProxy, path: &str, good: &[u8]) {
    let response = reqwest::get(proxy.url(path)).await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let cache = response.headers()["x-cache-status"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(cache, "HIT", "{path}");
    assert_eq!(
        sha256_hex(&response.bytes().await.unwrap()),
        sha256_hex(good)
    );
}

/// The client failed on the 502 (`output` is what it printed), and the
/// proxy still refuses `path` naming `expected` and `received` digests.
async fn assert_refused(
    output: &str,
    proxy: &TestProxy,
    path: &str,
    expected: &str,
    received: &str,
) {
    assert!(output.contains("502"), "{output}");
    let response = reqwest::get(proxy.url(path)).await.unwrap();
    assert_eq!(response.status(), 502, "{path}");
    let body = response.text().await.unwrap();
    assert!(body.contains(&format!("expected {expected}")), "{body}");
    assert!(body.contains(&format!("received {received}")), "{body}");
}

fn sha256_of(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

fn sha512_of(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha512:{}", hex::encode(sha2::Sha512::digest(bytes)))
}

/// Runs `cmd`, expecting it to fail; returns its combined output.
fn fails(cmd: &mut Command) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    assert!(!status.success(), "{cmd:?} should have failed:\n{text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_installs_past_a_tampered_files_mirror() {
    if version("pip", "--version").is_none() {
        available("pip", false);
        return;
    }
    let Some(fixture) = crate::pip::PypiFixture::start().await else {
        return;
    };
    let w = fixture.work.path();
    let wheel = "/packages/mc_alpha-1.0-py3-none-any.whl";
    let good = reqwest::get(fixture.files.url(wheel))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    // A second files mirror with the right bytes of everything; the first
    // (which the pages link to) now sends the wheel tampered.
    let good_files = MirrorServer::start().await;
    for entry in std::fs::read_dir(w.join("dist")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        good_files.put(
            &format!("/packages/{name}"),
            std::fs::read(entry.path()).unwrap(),
        );
    }
    fixture.files.put(wheel, tampered(&good));
    let remote = |files: &[&MirrorServer]| {
        format!(
            "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nstrategy = \"single\"\nmirrors = [\"{}\"]\nfiles = {}\n",
            fixture.index.url(""),
            toml_urls(files, "")
        )
    };
    let pip = |proxy: &TestProxy, n: usize| {
        let mut cmd = Command::new("pip");
        cmd.args([
            "install",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--retries",
            "0",
            "--target",
        ])
        .arg(w.join(format!("target{n}")))
        .args(["--index-url", &proxy.url("/pypi/simple/"), "mc-alpha"])
        .env("HOME", w.join(format!("home{n}")))
        .env("PIP_CONFIG_FILE", "/dev/null");
        cmd
    };

    let proxy = TestProxy::start(&remote(&[&fixture.files, &good_files])).await;
    tokio::task::block_in_place(|| run(&mut pip(&proxy, 1)));
    assert!(w.join("target1/mc_alpha.py").exists());
    proxy.settle().await;
    assert_served(&proxy, &format!("/pypi/~files{wheel}"), &good).await;
    assert_eq!(integrity_failures(&proxy).await, 1.0);
    proxy.stop().await;

    let proxy = TestProxy::start(&remote(&[&fixture.files])).await;
    let output = tokio::task::block_in_place(|| fails(&mut pip(&proxy, 2)));
    proxy.settle().await;
    let before = fixture.files.hits(wheel);
    let path = format!("/pypi/~files{wheel}");
    assert_refused(
        &output,
        &proxy,
        &path,
        &sha256_of(&good),
        &sha256_of(&tampered(&good)),
    )
    .await;
    // Nothing was cached: the refusal asked the mirror again.
    assert_eq!(fixture.files.hits(wheel), before + 1);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_installs_past_a_tampered_tarball_mirror() {
    if version("npm", "--version").is_none() {
        available("npm", false);
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (first, second) = (MirrorServer::start().await, MirrorServer::start().await);
    crate::npm::publish(w, &first, &[("mc-a", json!({}))]);
    let tarball = "/mc-a/-/mc-a-1.0.0.tgz";
    let good = reqwest::get(first.url(tarball))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    second.put(tarball, good.clone());
    first.put(tarball, tampered(&good));
    let remote = |mirrors: &[&MirrorServer]| {
        let urls: Vec<String> = mirrors
            .iter()
            .map(|m| format!("\"{}\"", m.url("")))
            .collect();
        format!(
            "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nstrategy = \"single\"\nmirrors = [{}]\n",
            urls.join(", ")
        )
    };
    let npm = |proxy: &TestProxy, n: usize| {
        let project = crate::npm::consumer_project(w, n);
        let mut cmd = Command::new("npm");
        cmd.args(["install", "--no-audit", "--no-fund", "--fetch-retries", "0"])
            .args(["--registry", &proxy.url("/npm/"), "--cache"])
            .arg(w.join(format!("cache{n}")))
            .arg("mc-a")
            .current_dir(&project)
            .env("HOME", w.join(format!("home{n}")));
        (cmd, project)
    };

    let proxy = TestProxy::start(&remote(&[&first, &second])).await;
    let (mut cmd, project) = npm(&proxy, 1);
    tokio::task::block_in_place(|| run(&mut cmd));
    crate::fixtures::assert_npm_installed(&project, &["mc-a"]);
    proxy.settle().await;
    assert_served(&proxy, &format!("/npm{tarball}"), &good).await;
    assert_eq!(integrity_failures(&proxy).await, 1.0);
    proxy.stop().await;

    let proxy = TestProxy::start(&remote(&[&first])).await;
    let (mut cmd, _) = npm(&proxy, 2);
    let output = tokio::task::block_in_place(|| fails(&mut cmd));
    let path = format!("/npm{tarball}");
    assert_refused(
        &output,
        &proxy,
        &path,
        &sha512_of(&good),
        &sha512_of(&tampered(&good)),
    )
    .await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_fetches_past_a_tampered_download_mirror() {
    version("cargo", "--version").expect("cargo runs the tests, so it is here");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let krate = crate::fixtures::cargo_leaf(w);
    let (index, files) = crate::fixtures::cargo_origins(&krate).await;
    let download = "/crates/mc_leaf/0.1.0/download";
    let good_files = MirrorServer::start().await;
    good_files.put(download, krate.clone());
    files.put(download, tampered(&krate));
    let remote = |files: &[&MirrorServer]| {
        format!(
            "[[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nstrategy = \"single\"\nmirrors = [\"{}\"]\nfiles = {}\n",
            index.url(""),
            toml_urls(files, "/crates")
        )
    };
    let cargo = |proxy: &TestProxy, n: usize| {
        let registry = format!("sparse+{}", proxy.url("/cargo/"));
        let (project, home) =
            crate::fixtures::cargo_consumer(w, n, &registry, "\n[net]\nretry = 0\n");
        let mut cmd = Command::new("cargo");
        cmd.arg("fetch")
            .current_dir(&project)
            .env("CARGO_HOME", &home);
        (cmd, home)
    };

    let proxy = TestProxy::start(&remote(&[&files, &good_files])).await;
    let (mut cmd, home) = cargo(&proxy, 1);
    tokio::task::block_in_place(|| run(&mut cmd));
    crate::fixtures::assert_leaf_downloaded(&home);
    proxy.settle().await;
    assert_served(&proxy, "/cargo/~files/mc_leaf/0.1.0/download", &krate).await;
    assert_eq!(integrity_failures(&proxy).await, 1.0);
    proxy.stop().await;

    let proxy = TestProxy::start(&remote(&[&files])).await;
    let (mut cmd, _) = cargo(&proxy, 2);
    let output = tokio::task::block_in_place(|| fails(&mut cmd));
    let path = "/cargo/~files/mc_leaf/0.1.0/download";
    assert_refused(
        &output,
        &proxy,
        path,
        &sha256_of(&krate),
        &sha256_of(&tampered(&krate)),
    )
    .await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apt_get_downloads_past_a_tampered_pool_mirror() {
    use crate::apt::{apt_get, apt_tools, AptRepo, DEB};
    if apt_tools().is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let repo = AptRepo::build(w);
    let (first, second) = (MirrorServer::start().await, MirrorServer::start().await);
    repo.serve(&first);
    repo.serve(&second);
    first.put(DEB, tampered(&repo.deb));
    let remote = |mirrors: &[&MirrorServer]| {
        format!(
            "[[remote]]\nname = \"debian\"\nkind = \"apt\"\nstrategy = \"single\"\nmirrors = {}\n",
            toml_urls(mirrors, "/debian")
        )
    };
    let pool = "/debian/pool/main/mc-hello_1.0_all.deb";

    let proxy = TestProxy::start(&remote(&[&first, &second])).await;
    let root = w.join("apt1");
    tokio::task::block_in_place(|| {
        apt_get(&root, &proxy, &["update"]).unwrap();
        apt_get(&root, &proxy, &["download", "mc-hello"]).unwrap();
    });
    let got = std::fs::read(root.join("download/mc-hello_1.0_all.deb")).unwrap();
    assert_eq!(sha256_hex(&got), sha256_hex(&repo.deb));
    proxy.settle().await;
    assert_served(&proxy, pool, &repo.deb).await;
    assert_eq!(integrity_failures(&proxy).await, 1.0);
    proxy.stop().await;

    let proxy = TestProxy::start(&remote(&[&first])).await;
    let root = w.join("apt2");
    let output = tokio::task::block_in_place(|| {
        apt_get(&root, &proxy, &["update"]).unwrap();
        apt_get(&root, &proxy, &["download", "mc-hello"]).unwrap_err()
    });
    let bad = tampered(&repo.deb);
    assert_refused(
        &output,
        &proxy,
        pool,
        &sha256_of(&repo.deb),
        &sha256_of(&bad),
    )
    .await;
    proxy.stop().await;
}
