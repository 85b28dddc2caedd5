//! npm install of a package with a plain and a scoped dependency, through an
//! `npm` remote whose packuments point their tarballs at the registry.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::{available, MirrorServer, TestProxy};
use crate::{report, run, version, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_install_through_the_proxy_then_from_the_cache_alone() {
    let Some(npm) = version("npm", "--version") else {
        available("npm", false);
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let registry = MirrorServer::start().await;
    let packages = [
        ("mc-a", json!({"mc-b": "^1.0.0", "@mc/c": "^1.0.0"})),
        ("mc-b", json!({})),
        ("@mc/c", json!({})),
    ];
    publish(w, &registry, &packages);
    let proxy = npm_proxy(&registry).await;
    let registry_url = proxy.url("/npm/");

    let round = |n: usize| {
        let project = consumer_project(w, n);
        run(Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--registry",
                &registry_url,
                "--cache",
            ])
            .arg(w.join(format!("cache{n}")))
            .arg("mc-a")
            .current_dir(&project)
            .env("HOME", w.join(format!("home{n}"))));
        crate::fixtures::assert_npm_installed(&project, &["mc-a", "mc-b", "@mc/c"]);
    };
    tokio::task::block_in_place(|| round(1));
    let first = registry.total();
    assert_eq!(
        registry.hits("/mc-a/-/mc-a-1.0.0.tgz"),
        1,
        "{:?}",
        registry.requests()
    );
    registry.stop();
    tokio::task::block_in_place(|| round(2));
    let second = registry.total() - first;
    assert_eq!(second, 0);
    report("npm", &npm, first, second);
    proxy.stop().await;
}

/// Packs each of `packages` (name, dependencies) at version 1.0.0 with
/// `npm pack` and serves its packument (at `/{name}` and `/@scope%2Fname`)
/// and tarball from `registry`, as the npm registry does.
pub fn publish(w: &Path, registry: &MirrorServer, packages: &[(&str, serde_json::Value)]) {
    for (name, deps) in packages {
        let (tarball, packed) = crate::fixtures::npm_pack(w, name, deps);
        let bare = name.rsplit('/').next().unwrap();
        let tarball_path = format!("/{name}/-/{bare}-1.0.0.tgz");
        registry.put_typed(&tarball_path, tarball, "application/octet-stream");
        let packument = json!({
            "name": name,
            "dist-tags": {"latest": "1.0.0"},
            "versions": {"1.0.0": {
                "name": name, "version": "1.0.0", "dependencies": deps,
                "dist": {
                    "tarball": registry.url(&tarball_path),
                    "shasum": packed["shasum"],
                    "integrity": packed["integrity"],
                }
            }}
        })
        .to_string();
        // npm asks for `@scope%2fname`; the proxy normalises the escape to
        // `%2F` (RFC 3986 §6.2.2.1), which registries treat alike.
        registry.put_typed(
            &format!("/{}", name.replace('/', "%2F")),
            packument.clone(),
            "application/json",
        );
        registry.put_typed(&format!("/{name}"), packument, "application/json");
    }
}

/// A proxy with one `npm` remote named `npm` in front of `registry`.
pub async fn npm_proxy(registry: &MirrorServer) -> TestProxy {
    TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n",
        registry.url("")
    ))
    .await
}

/// An empty project `project{n}` in `w` to install into.
pub fn consumer_project(w: &Path, n: usize) -> PathBuf {
    let project = w.join(format!("project{n}"));
    write(
        &project.join("package.json"),
        &json!({"name": "consumer", "version": "0.0.0", "private": true}).to_string(),
    );
    project
}
