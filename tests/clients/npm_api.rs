//! npm's API calls through an `npm` remote: `npm audit` (a gzipped POST to
//! the bulk advisory endpoint) against a fixture that reports one advisory,
//! which the client must show, and `npm search` (a GET with a query string).
//! These are passed through, never cached: with the origins stopped, the
//! second round's install still works from the cache, while audit and search
//! fail with the proxy's 502 — and nothing reaches upstream.

use std::process::Command;

use serde_json::json;

use crate::npm::{consumer_project, npm_proxy, publish};
use crate::support::MirrorServer;
use crate::{assert_refused_as_read_only, client, report, run, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_audit_and_search_through_the_proxy() {
    let Some(npm) = client("npm", "--version") else {
        return;
    };
    let (work, registry) = (tempfile::tempdir().unwrap(), MirrorServer::start().await);
    let w = work.path();
    publish(w, &registry, &[("mc-vuln", json!({}))]);
    registry.put_typed(
        "/-/npm/v1/security/advisories/bulk",
        json!({"mc-vuln": [{
            "id": 4242, "url": "https://advisories.example/4242",
            "title": "Mirrorcache test advisory", "severity": "high",
            "vulnerable_versions": "<2.0.0", "cwe": ["CWE-400"],
            "cvss": {"score": 7.5, "vectorString": null}
        }]})
        .to_string(),
        "application/json",
    );
    registry.put_typed(
        "/-/v1/search",
        json!({"objects": [{
            "package": {"name": "mc-vuln", "version": "1.0.0",
                        "description": "found by the fixture search",
                        "date": "2026-01-01T00:00:00.000Z", "links": {},
                        "publisher": {"username": "mc", "email": "mc@example.invalid"},
                        "maintainers": [{"username": "mc", "email": "mc@example.invalid"}]},
            "score": {"final": 1.0, "detail": {"quality": 1.0, "popularity": 1.0, "maintenance": 1.0}},
            "searchScore": 1.0
        }], "total": 1, "time": "2026-01-01T00:00:00.000Z"})
        .to_string(),
        "application/json",
    );
    let proxy = npm_proxy(&registry).await;
    let registry_url = proxy.url("/npm/");

    // Returns (audit output, search output), each with whether it succeeded.
    let round = |n: usize| {
        let project = consumer_project(w, n);
        let npm = |args: &[&str]| {
            let mut cmd = Command::new("npm");
            cmd.args(args)
                .args([
                    "--no-fund",
                    "--fetch-retries=0",
                    "--registry",
                    &registry_url,
                    "--cache",
                ])
                .arg(w.join(format!("cache{n}")))
                .current_dir(&project)
                .env("HOME", w.join(format!("home{n}")));
            cmd
        };
        run(&mut npm(&["install", "--no-audit", "mc-vuln"]));
        let audit = npm(&["audit"]).output().unwrap();
        let search = npm(&["search", "mc-vuln"]).output().unwrap();
        let text = |o: &std::process::Output| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };
        (
            (audit.status.success(), text(&audit)),
            (search.status.success(), text(&search)),
        )
    };
    let ((audit_ok, audit), (search_ok, search)) = tokio::task::block_in_place(|| round(1));
    // npm audit exits 1 when it found something, and shows what.
    assert!(!audit_ok, "{audit}");
    assert!(audit.contains("Mirrorcache test advisory"), "{audit}");
    assert!(audit.contains("1 high severity vulnerability"), "{audit}");
    assert!(search_ok, "{search}");
    assert!(search.contains("found by the fixture search"), "{search}");
    assert_eq!(registry.hits("/-/npm/v1/security/advisories/bulk"), 1);
    // npm publish through the proxy: refused, and npm says why.
    let package = w.join("mc-new");
    let token_key = format!("{}:_authToken", registry_url.trim_start_matches("http:"));
    write(
        &package.join(".npmrc"),
        &format!("{token_key}=test-token\n"),
    );
    write(
        &package.join("package.json"),
        &json!({"name": "mc-new", "version": "1.0.0"}).to_string(),
    );
    assert_refused_as_read_only(
        "npm",
        Command::new("npm")
            .args(["publish", "--registry", &registry_url, "--fetch-retries=0"])
            .current_dir(&package)
            .env("HOME", w.join("publishhome")),
    );
    assert_eq!(registry.hits("/-/v1/search"), 1);
    let first = registry.total();
    registry.stop();
    let ((audit_ok, audit), (search_ok, search)) = tokio::task::block_in_place(|| round(2));
    // Never cached: with the origin gone there is no audit and no search.
    assert!(
        !audit_ok && !audit.contains("Mirrorcache test advisory"),
        "{audit}"
    );
    assert!(!search_ok, "{search}");
    assert!(search.contains("502"), "{search}");
    let second = registry.total() - first;
    assert_eq!(second, 0);
    report("npm audit + npm search", &npm, first, second);
    proxy.stop().await;
}
