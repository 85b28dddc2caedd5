//! The supply-chain guard: `min_release_age` takes young versions out of
//! npm packuments (full and abbreviated), pypi pages (PEP 691 JSON and HTML)
//! and cargo index files, and refuses their artifacts with 403 and a
//! reason; `deny` and `allow` do the same by name and version range. Publish
//! times are fixture timestamps relative to now, never sleeps.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::support::proxy::status_line;
use crate::support::{MirrorServer, TestProxy};

const DAY: Duration = Duration::from_secs(24 * 3600);

/// An RFC 3339 time `ago` before now, as registries write it.
fn ago(ago: Duration) -> String {
    humantime::format_rfc3339_millis(SystemTime::now() - ago).to_string()
}

async fn get(url: &str, accept: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(url)
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Asserts that a raw `GET path` is a 403 whose status line says `says`
/// (the refusal as pip, Composer, Helm and NuGet show it).
pub(crate) async fn assert_refused_in_status_line(base: &str, path: &str, says: &str) {
    let line = status_line(base, path).await;
    assert!(line.starts_with("HTTP/1.1 403 "), "{path}: {line}");
    assert!(line.contains(says), "{path}: {line}");
}

/// An npm registry with `mc-cool` 1.0.0 (60 days old) and 1.1.0 (1 day
/// old), full and abbreviated packuments, and `mc-bad` 1.0.0.
fn npm_registry(registry: &MirrorServer) {
    let version = |name: &str, v: &str| json!({"name": name, "version": v, "dist": {"tarball": registry.url(&format!("/{name}/-/{name}-{v}.tgz"))}});
    let full = json!({
        "name": "mc-cool",
        "dist-tags": {"latest": "1.1.0"},
        "versions": {"1.0.0": version("mc-cool", "1.0.0"), "1.1.0": version("mc-cool", "1.1.0")},
        "time": {"created": ago(90 * DAY), "modified": ago(DAY), "1.0.0": ago(60 * DAY), "1.1.0": ago(DAY)},
    });
    let mut abbreviated = full.clone();
    abbreviated.as_object_mut().unwrap().remove("time");
    registry.put_typed("/mc-cool", full.to_string(), "application/json");
    registry.put_negotiated(
        "/mc-cool",
        "application/vnd.npm.install-v1+json",
        abbreviated.to_string(),
    );
    for v in ["1.0.0", "1.1.0"] {
        registry.put(
            &format!("/mc-cool/-/mc-cool-{v}.tgz"),
            format!("tarball {v}"),
        );
    }
    let bad = json!({"name": "mc-bad", "dist-tags": {"latest": "1.0.0"},
                     "versions": {"1.0.0": version("mc-bad", "1.0.0")},
                     "time": {"1.0.0": ago(60 * DAY)}});
    registry.put_typed("/mc-bad", bad.to_string(), "application/json");
    registry.put("/mc-bad/-/mc-bad-1.0.0.tgz", "bad tarball");
}

#[tokio::test]
async fn npm_young_versions_leave_both_packuments_and_their_tarballs_get_403() {
    let registry = MirrorServer::start().await;
    npm_registry(&registry);
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\nmin_release_age = \"7d\"\ndeny = [\"mc-bad\"]\n",
        registry.url("")
    ))
    .await;

    for accept in ["application/json", "application/vnd.npm.install-v1+json"] {
        let (status, body) = get(&proxy.url("/npm/mc-cool"), accept).await;
        assert_eq!(status, 200, "{body}");
        let doc: Value = serde_json::from_str(&body).unwrap();
        let versions: Vec<&String> = doc["versions"].as_object().unwrap().keys().collect();
        assert_eq!(versions, ["1.0.0"], "{accept}");
        assert_eq!(doc["dist-tags"]["latest"], "1.0.0", "{accept}");
        assert!(doc.get("time").is_none_or(|t| t.get("1.1.0").is_none()));
        // Tarball links still go through the proxy.
        assert!(body.contains(&proxy.url("/npm/mc-cool/-/mc-cool-1.0.0.tgz")));
    }

    let (status, body) = get(&proxy.url("/npm/mc-cool/-/mc-cool-1.1.0.tgz"), "*/*").await;
    assert_eq!(status, 403);
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        error["error"],
        "mc-cool@1.1.0 was published 1day ago; this proxy serves a release once it is 7days old (min_release_age)"
    );
    assert_eq!(registry.hits("/mc-cool/-/mc-cool-1.1.0.tgz"), 0);
    let (status, body) = get(&proxy.url("/npm/mc-cool/-/mc-cool-1.0.0.tgz"), "*/*").await;
    assert_eq!((status, body.as_str()), (200, "tarball 1.0.0"));

    // Denied by name: the packument itself is refused, with the reason.
    let (status, body) = get(&proxy.url("/npm/mc-bad"), "application/json").await;
    assert_eq!(status, 403);
    assert!(
        body.contains(
            "mc-bad@1.0.0 is refused by this proxy: it matches the deny rule \\\"mc-bad\\\""
        ),
        "{body}"
    );
    // npm prints the reason phrase and the body's `error`: the reason once.
    let line = status_line(&proxy.base, "/npm/mc-bad/-/mc-bad-1.0.0.tgz").await;
    assert_eq!(line, "HTTP/1.1 403 Forbidden");
    assert_eq!(registry.hits("/mc-bad/-/mc-bad-1.0.0.tgz"), 0);
    proxy.stop().await;
}

/// A simple page's link to `wheel` on the files host `files`.
pub(crate) fn wheel_link(files: &MirrorServer, wheel: &str) -> String {
    format!(
        "<a href=\"{}/packages/{wheel}#sha256=00\">{wheel}</a><br/>\n",
        files.url("")
    )
}

#[tokio::test]
async fn pypi_young_files_leave_json_and_html_pages_and_get_403() {
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let wheel = |v: &str| format!("mc_alpha-{v}-py3-none-any.whl");
    let link = |v: &str| wheel_link(&files, &wheel(v));
    let html = format!("<html><body>{}{}</body></html>", link("1.0"), link("1.1"));
    let json = json!({
        "meta": {"api-version": "1.1"}, "name": "mc-alpha", "versions": ["1.0", "1.1"],
        "files": [
            {"filename": wheel("1.0"), "url": files.url(&format!("/packages/{}", wheel("1.0"))), "hashes": {}, "upload-time": ago(60 * DAY)},
            {"filename": wheel("1.1"), "url": files.url(&format!("/packages/{}", wheel("1.1"))), "hashes": {}, "upload-time": ago(DAY)},
        ],
    });
    index.put_typed("/simple/mc-alpha/", html, "text/html");
    index.put_negotiated(
        "/simple/mc-alpha/",
        "application/vnd.pypi.simple.v1+json",
        json.to_string(),
    );
    for v in ["1.0", "1.1"] {
        files.put(&format!("/packages/{}", wheel(v)), format!("wheel {v}"));
    }
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\nmin_release_age = \"7d\"\n",
        index.url(""),
        files.url("")
    ))
    .await;

    // HTML first: its times come from the JSON page, fetched through the cache.
    let (status, body) = get(&proxy.url("/pypi/simple/mc-alpha/"), "text/html").await;
    assert_eq!(status, 200);
    assert!(
        body.contains(&wheel("1.0")) && !body.contains(&wheel("1.1")),
        "{body}"
    );
    let (status, body) = get(
        &proxy.url("/pypi/simple/mc-alpha/"),
        "application/vnd.pypi.simple.v1+json",
    )
    .await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["files"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(doc["versions"], json!(["1.0"]));
    assert_eq!(index.hits("/simple/mc-alpha/"), 2, "one fetch per variant");

    let young = format!("/pypi/~files/packages/{}", wheel("1.1"));
    let line = status_line(&proxy.base, &young).await;
    assert!(
        line.starts_with("HTTP/1.1 403 mc-alpha@1.1 was published 1day ago"),
        "{line}"
    );
    let old = format!("/pypi/~files/packages/{}", wheel("1.0"));
    assert_eq!(
        get(&proxy.url(&old), "*/*").await,
        (200, "wheel 1.0".into())
    );
    assert_eq!(files.hits(&format!("/packages/{}", wheel("1.1"))), 0);
    proxy.stop().await;
}

#[tokio::test]
async fn cargo_index_lines_by_pubtime_and_deny_ranges() {
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let line = |v: &str, pubtime: Option<String>| {
        let mut l = json!({"name": "mc_leaf", "vers": v, "deps": [], "cksum": "00", "features": {}, "yanked": false});
        if let Some(at) = pubtime {
            l["pubtime"] = json!(at);
        }
        format!("{l}\n")
    };
    let lines = [
        line("0.1.0", None),
        line("0.2.0", Some(ago(30 * DAY))),
        line("0.3.0", Some(ago(DAY))),
        line("0.4.0", Some(ago(99 * DAY))),
    ];
    index.put_typed("/mc/_l/mc_leaf", lines.concat(), "text/plain");
    for v in ["0.2.0", "0.3.0", "0.4.0"] {
        files.put(
            &format!("/crates/mc_leaf/{v}/download"),
            format!("crate {v}"),
        );
    }
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\nmin_release_age = \"7d\"\ndeny = [\"mc_leaf@>=0.4\"]\n",
        index.url(""),
        files.url("/crates")
    ))
    .await;
    let (status, body) = get(&proxy.url("/cargo/mc/_l/mc_leaf"), "*/*").await;
    assert_eq!(status, 200);
    assert_eq!(body, [line("0.1.0", None), lines[1].clone()].concat());

    let (status, body) = get(&proxy.url("/cargo/~files/mc_leaf/0.3.0/download"), "*/*").await;
    assert_eq!(status, 403);
    assert!(
        body.contains("mc_leaf@0.3.0 was published 1day ago"),
        "{body}"
    );
    let (status, body) = get(&proxy.url("/cargo/~files/mc_leaf/0.4.0/download"), "*/*").await;
    assert_eq!(status, 403);
    assert!(body.contains("deny rule \\\"mc_leaf@>=0.4\\\""), "{body}");
    assert_eq!(
        get(&proxy.url("/cargo/~files/mc_leaf/0.2.0/download"), "*/*").await,
        (200, "crate 0.2.0".into())
    );
    proxy.stop().await;
}

#[tokio::test]
async fn allow_lets_only_its_packages_through_and_without_a_guard_nothing_changes() {
    let registry = MirrorServer::start().await;
    npm_registry(&registry);
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{0}\"]\nallow = [\"mc-cool@^1.1\"]\n\n\
         [[remote]]\nname = \"open\"\nkind = \"npm\"\nmirrors = [\"{0}\"]\n",
        registry.url("")
    ))
    .await;
    let (status, body) = get(&proxy.url("/npm/mc-cool"), "application/json").await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["versions"].as_object().unwrap().len(), 1);
    assert_eq!(doc["dist-tags"]["latest"], "1.1.0");
    let (status, body) = get(&proxy.url("/npm/mc-bad"), "application/json").await;
    assert_eq!(status, 403);
    assert!(body.contains("not on the allow list"), "{body}");
    // Another remote on the same registry, without a guard: the bytes as stored.
    let (status, body) = get(&proxy.url("/open/mc-bad"), "application/json").await;
    assert_eq!(status, 200);
    assert!(body.contains("\"mc-bad\""));
    proxy.stop().await;
}

#[tokio::test]
async fn a_reload_applies_the_guard_to_cached_documents_without_a_refetch() {
    let registry = MirrorServer::start().await;
    npm_registry(&registry);
    let remote = |guard: &str| {
        format!(
            "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n{guard}\n",
            registry.url("")
        )
    };
    let proxy = TestProxy::start(&remote("")).await;
    let versions = |body: &str| {
        let doc: Value = serde_json::from_str(body).unwrap();
        doc["versions"].as_object().unwrap().len()
    };
    let (status, body) = get(&proxy.url("/npm/mc-cool"), "application/json").await;
    assert_eq!((status, versions(&body)), (200, 2));
    proxy.settle().await;

    let text = crate::support::proxy::config_text(&proxy.dir, &remote("min_release_age = \"7d\""));
    let config = mirrorcache::config::Config::parse(&text, "reload.toml").unwrap();
    proxy.running.proxy.reload(&config).unwrap();
    let (status, body) = get(&proxy.url("/npm/mc-cool"), "application/json").await;
    assert_eq!((status, versions(&body)), (200, 1));
    assert_eq!(
        registry.hits("/mc-cool"),
        1,
        "filtered from the stored copy"
    );
    proxy.stop().await;
}
