//! pnpm and yarn 1 through the `npm` remote, against the same fixture
//! registry as npm: a package with a plain and a scoped dependency. Their
//! lockfiles must point through the proxy (yarn writes each tarball's URL;
//! pnpm writes none for tarballs at the registry's usual place), never at the
//! origin; the second round, in a fresh project and store with the origin
//! stopped, installs from the cache alone.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::npm::{consumer_project, npm_proxy, publish};
use crate::support::MirrorServer;
use crate::{client, report, run};

/// Runs `round` twice around stopping the origin; returns the upstream
/// request counts of each round.
async fn two_rounds(w: &Path, round: impl Fn(usize, &str, &str)) -> (usize, usize) {
    let registry = MirrorServer::start().await;
    publish(
        w,
        &registry,
        &[
            ("mc-a", json!({"mc-b": "^1.0.0", "@mc/c": "^1.0.0"})),
            ("mc-b", json!({})),
            ("@mc/c", json!({})),
        ],
    );
    let proxy = npm_proxy(&registry).await;
    let (registry_url, origin) = (proxy.url("/npm/"), registry.url(""));
    tokio::task::block_in_place(|| round(1, &registry_url, &origin));
    let first = registry.total();
    assert_eq!(
        registry.hits("/mc-a/-/mc-a-1.0.0.tgz"),
        1,
        "{:?}",
        registry.requests()
    );
    registry.stop();
    tokio::task::block_in_place(|| round(2, &registry_url, &origin));
    let second = registry.total() - first;
    proxy.stop().await;
    (first, second)
}

/// mc-a is in the project, and its scoped dependency beside it wherever the
/// client keeps it (flat for yarn, under `.pnpm/` for pnpm).
fn assert_installed(project: &Path) {
    let a = std::fs::canonicalize(project.join("node_modules/mc-a")).expect("mc-a installed");
    assert!(a.join("index.js").exists());
    assert!(
        a.parent().unwrap().join("@mc/c/index.js").exists(),
        "@mc/c not installed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pnpm_add_through_the_proxy_then_from_the_cache_alone() {
    let Some(pnpm) = client("pnpm", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (first, second) = two_rounds(w, |n, registry, origin| {
        let project = consumer_project(w, n);
        run(Command::new("pnpm")
            .args(["add", "mc-a", "--registry", registry, "--store-dir"])
            .arg(w.join(format!("store{n}")))
            .arg("--state-dir")
            .arg(w.join(format!("pnpmstate{n}")))
            .current_dir(&project)
            .env("HOME", w.join(format!("home{n}")))
            .env("XDG_CACHE_HOME", w.join(format!("home{n}/.cache")))
            .env("CI", "true"));
        assert_installed(&project);
        let lock = std::fs::read_to_string(project.join("pnpm-lock.yaml")).unwrap();
        assert!(lock.contains("mc-b@1.0.0"), "{lock}");
        assert!(
            !lock.contains(origin),
            "the lockfile names the origin:\n{lock}"
        );
    })
    .await;
    assert_eq!(second, 0);
    report("pnpm", &pnpm, first, second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yarn_add_through_the_proxy_then_from_the_cache_alone() {
    let Some(yarn) = client("yarn", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (first, second) = two_rounds(w, |n, registry, origin| {
        let project = consumer_project(w, n);
        run(Command::new("yarn")
            .args([
                "add",
                "mc-a",
                "--non-interactive",
                "--no-progress",
                "--registry",
                registry,
            ])
            .arg("--cache-folder")
            .arg(w.join(format!("yarncache{n}")))
            .current_dir(&project)
            .env("HOME", w.join(format!("home{n}")))
            .env("YARN_IGNORE_PATH", "1"));
        assert_installed(&project);
        let lock = std::fs::read_to_string(project.join("yarn.lock")).unwrap();
        assert!(
            lock.contains(&format!("resolved \"{registry}mc-a/-/mc-a-1.0.0.tgz")),
            "{lock}"
        );
        assert!(
            !lock.contains(origin),
            "the lockfile names the origin:\n{lock}"
        );
    })
    .await;
    assert_eq!(second, 0);
    report("yarn", &yarn, first, second);
}
