//! The supply-chain guard with the real clients: `npm install` and `pip
//! install` resolve the version old enough for `min_release_age`, a direct
//! GET of the young one gets 403, and npm, pip and cargo print the proxy's
//! reason for a denied or too-young package. Publish times are fixture
//! timestamps relative to now. The lines printed as `GUARD-OUTPUT` are what
//! docs/supply-chain.md quotes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::support::{available, sha256_hex, MirrorServer, TestProxy};
use crate::{run, version, write};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn ago(ago: Duration) -> String {
    humantime::format_rfc3339_millis(SystemTime::now() - ago).to_string()
}

/// Runs `cmd`, which must fail; returns its stdout and stderr together.
pub(crate) fn fails(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{cmd:?} succeeded:\n{said}");
    said
}

/// Prints the line of `said` that holds `needle` (failing if none does).
pub(crate) fn show(label: &str, said: &str, needle: &str) {
    let line = said.lines().find(|l| l.contains(needle));
    let line = line.unwrap_or_else(|| panic!("{needle:?} not in the output of {label}:\n{said}"));
    println!("GUARD-OUTPUT {label}: {line}");
}

/// Publishes `versions` of npm package `name` on `registry` (packed for
/// real), each published `ago` before now when given; the abbreviated
/// packument is the full one without `time`. The last version is `latest`.
pub(crate) fn npm_publish(
    registry: &MirrorServer,
    w: &Path,
    name: &str,
    versions: &[(&str, Option<Duration>)],
) {
    let mut packument = json!({"name": name, "dist-tags": {}, "versions": {}, "time": {}});
    for (v, age) in versions {
        let (tarball, packed) = crate::fixtures::npm_pack_version(w, name, v, &json!({}));
        let path = format!("/{name}/-/{name}-{v}.tgz");
        registry.put_typed(&path, tarball, "application/octet-stream");
        packument["versions"][v] = json!({"name": name, "version": v, "dist": {
            "tarball": registry.url(&path), "shasum": packed["shasum"], "integrity": packed["integrity"]}});
        if let Some(age) = age {
            packument["time"][v] = json!(ago(*age));
        }
        packument["dist-tags"]["latest"] = json!(v);
    }
    let mut abbreviated = packument.clone();
    abbreviated.as_object_mut().unwrap().remove("time");
    registry.put_typed(
        &format!("/{name}"),
        packument.to_string(),
        "application/json",
    );
    registry.put_negotiated(
        &format!("/{name}"),
        "application/vnd.npm.install-v1+json",
        abbreviated.to_string(),
    );
}

/// `npm install package` from `registry_url` in consumer project `n`,
/// with a cache and HOME of its own; the command and the project.
pub(crate) fn npm_install(
    w: &Path,
    registry_url: &str,
    n: usize,
    package: &str,
) -> (Command, PathBuf) {
    let project = crate::npm::consumer_project(w, n);
    let mut cmd = Command::new("npm");
    cmd.args([
        "install",
        "--no-audit",
        "--no-fund",
        "--registry",
        registry_url,
        "--cache",
    ])
    .arg(w.join(format!("cache{n}")))
    .arg(package)
    .current_dir(&project)
    .env("HOME", w.join(format!("home{n}")));
    (cmd, project)
}

/// Publishes `versions` of pypi project `name`: wheels (built for real) on
/// `files`, both PEP 691 variants of its simple page on `index`, each file
/// uploaded `ago` before now when given.
pub(crate) fn pypi_publish(
    index: &MirrorServer,
    files: &MirrorServer,
    w: &Path,
    name: &str,
    versions: &[(&str, Option<Duration>)],
) {
    let (mut links, mut entries) = (String::new(), Vec::new());
    for (v, age) in versions {
        let (file, bytes) = crate::fixtures::pip_wheel_version(w, name, v, "[]");
        let url = files.url(&format!("/packages/{file}"));
        let sha = sha256_hex(&bytes);
        links.push_str(&format!("<a href=\"{url}#sha256={sha}\">{file}</a><br/>\n"));
        let mut entry =
            json!({"filename": file, "url": url, "hashes": {"sha256": sha}, "size": bytes.len()});
        if let Some(age) = age {
            entry["upload-time"] = json!(ago(*age));
        }
        entries.push(entry);
        files.put_typed(
            &format!("/packages/{file}"),
            bytes,
            "application/octet-stream",
        );
    }
    let page = format!("/simple/{name}/");
    let html = format!("<!DOCTYPE html><html><body>{links}</body></html>");
    index.put_typed(&page, html, "text/html");
    let json = json!({"meta": {"api-version": "1.1"}, "name": name, "files": entries,
                      "versions": versions.iter().map(|(v, _)| v).collect::<Vec<_>>()});
    index.put_negotiated(
        &page,
        "application/vnd.pypi.simple.v1+json",
        json.to_string(),
    );
}

/// `pip install package --target` from `index_url` into target `n`, with a
/// HOME of its own and no pip config.
pub(crate) fn pip_install(w: &Path, index_url: &str, n: usize, package: &str) -> Command {
    let mut cmd = Command::new("pip");
    cmd.args(["install", "--target"])
        .arg(w.join(format!("target{n}")))
        .args([
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--index-url",
            index_url,
            package,
        ])
        .env("HOME", w.join(format!("home{n}")))
        .env("PIP_CONFIG_FILE", "/dev/null");
    cmd
}

/// Whether pip is here and wheels can be built (else a loud skip, or a
/// failure under `MIRRORCACHE_REQUIRE_SERVICES=1`).
pub(crate) fn pip_builds_wheels() -> bool {
    if version("pip", "--version").is_none() {
        return available("pip", false);
    }
    crate::fixtures::can_build_wheels()
}

async fn status(url: &str) -> u16 {
    reqwest::get(url).await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_resolves_the_old_enough_version_and_prints_the_reason_of_a_refusal() {
    let Some(_npm) = version("npm", "--version") else {
        available("npm", false);
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let registry = MirrorServer::start().await;
    // mc-cool: 1.0.0 is 60 days old, 1.1.0 one day; mc-fresh has only a
    // one-day-old release; mc-bad is denied.
    for (name, versions) in [
        (
            "mc-cool",
            vec![("1.0.0", Some(60 * DAY)), ("1.1.0", Some(DAY))],
        ),
        ("mc-fresh", vec![("1.0.0", Some(DAY))]),
        ("mc-bad", vec![("1.0.0", Some(60 * DAY))]),
    ] {
        npm_publish(&registry, w, name, &versions);
    }
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\nmin_release_age = \"7d\"\ndeny = [\"mc-bad\"]\n",
        registry.url("")
    ))
    .await;
    let registry_url = proxy.url("/npm/");
    let npm = |n: usize, package: &str| npm_install(w, &registry_url, n, package);
    tokio::task::block_in_place(|| {
        let (mut cmd, project) = npm(1, "mc-cool");
        run(&mut cmd);
        let installed = std::fs::read_to_string(project.join("node_modules/mc-cool/package.json"));
        let installed: serde_json::Value = serde_json::from_str(&installed.unwrap()).unwrap();
        assert_eq!(installed["version"], "1.0.0");

        let said = fails(&mut npm(2, "mc-fresh").0);
        show("npm too-young", &said, "was published 1day ago");
        let said = fails(&mut npm(3, "mc-bad").0);
        show("npm denied", &said, "matches the deny rule");
    });
    assert_eq!(
        status(&proxy.url("/npm/mc-cool/-/mc-cool-1.1.0.tgz")).await,
        403
    );
    assert_eq!(registry.hits("/mc-cool/-/mc-cool-1.1.0.tgz"), 0);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_resolves_the_old_enough_version_and_prints_the_reason_of_a_refusal() {
    if !pip_builds_wheels() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    for (name, versions) in [
        (
            "mc-alpha",
            vec![("1.0", Some(60 * DAY)), ("1.1", Some(DAY))],
        ),
        ("mc-fresh", vec![("1.0", Some(DAY))]),
        ("mc-bad", vec![("1.0", Some(60 * DAY))]),
    ] {
        pypi_publish(&index, &files, w, name, &versions);
    }
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\nmin_release_age = \"7d\"\ndeny = [\"mc-bad\"]\n",
        index.url(""),
        files.url("")
    ))
    .await;
    let index_url = proxy.url("/pypi/simple/");
    let pip = |n: usize, package: &str| pip_install(w, &index_url, n, package);
    tokio::task::block_in_place(|| {
        run(&mut pip(1, "mc-alpha"));
        assert!(w.join("target1/mc_alpha-1.0.dist-info").exists());
        assert!(!w.join("target1/mc_alpha-1.1.dist-info").exists());

        let said = fails(&mut pip(2, "mc-fresh"));
        show("pip too-young", &said, "403 Client Error");
        assert!(said.contains("was published 1day ago"), "{said}");
        let said = fails(&mut pip(3, "mc-bad"));
        show("pip denied", &said, "403 Client Error");
        assert!(said.contains("matches the deny rule"), "{said}");
    });
    let young = "/pypi/~files/packages/mc_alpha-1.1-py3-none-any.whl";
    assert_eq!(status(&proxy.url(young)).await, 403);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_prints_the_reason_of_a_refusal() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let krate = crate::fixtures::cargo_leaf(w);
    let (index, files) = crate::fixtures::cargo_origins(&krate).await;
    let line = json!({"name": "mc_leaf", "vers": "0.1.0", "deps": [], "cksum": sha256_hex(&krate),
                      "features": {}, "yanked": false, "pubtime": ago(DAY).replace(".000Z", "Z")});
    index.put_typed("/mc/_l/mc_leaf", format!("{line}\n"), "text/plain");
    let remote = |name: &str, guard: &str| {
        format!(
            "[[remote]]\nname = \"{name}\"\nkind = \"cargo\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n{guard}\n",
            index.url(""),
            files.url("/crates")
        )
    };
    let proxy = TestProxy::start(&format!(
        "{}\n{}",
        remote("young", "min_release_age = \"7d\""),
        remote("denied", "deny = [\"mc_leaf@0.1\"]")
    ))
    .await;
    tokio::task::block_in_place(|| {
        for (n, remote) in [(1, "young"), (2, "denied")] {
            let project = w.join(format!("project{n}"));
            write(
                &project.join("Cargo.toml"),
                "[package]\nname = \"consumer\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[dependencies]\nmc_leaf = \"0.1\"\n",
            );
            write(&project.join("src/lib.rs"), "");
            let home = w.join(format!("cargohome{n}"));
            let registry = format!("sparse+{}", proxy.url(&format!("/{remote}/")));
            write(
                &home.join("config.toml"),
                &format!("[source.crates-io]\nreplace-with = \"mc\"\n\n[source.mc]\nregistry = \"{registry}\"\n"),
            );
            let said = fails(
                Command::new("cargo")
                    .arg("fetch")
                    .current_dir(&project)
                    .env("CARGO_HOME", &home),
            );
            let (label, needle) = match remote {
                "young" => ("cargo too-young", "was published 1day ago"),
                _ => ("cargo denied", "matches the deny rule"),
            };
            show(label, &said, "got 403");
            show(label, &said, needle);
        }
    });
    assert_eq!(files.total(), 0);
    proxy.stop().await;
}
