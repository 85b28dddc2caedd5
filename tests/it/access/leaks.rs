//! Nothing private leaks: the operations pages show a caller only the
//! remotes it may read (names, mirrors, counts, fills, recent errors);
//! `/-/health` stays open; the audit line names user, remote, path, status
//! and peer, in text and JSON, and no log line holds a password or token;
//! forwarded headers from an untrusted peer change no link.

use super::{basic, AuthProxy};
use crate::support::{BinaryProxy, Fault, MirrorServer};

/// Traffic on the private remote, as `ci`: a hit, and a failure (into
/// recent_errors). Returns the private mirror's URL.
async fn private_traffic(proxy: &AuthProxy) -> String {
    let ci = basic("ci", "ci-pass");
    let (status, _, _) = proxy
        .get("/secret/hidden-package/x", &[("authorization", &ci)])
        .await;
    assert_eq!(status, 200);
    proxy.private.set_fault(Fault::Status(500));
    let (status, _, body) = proxy
        .get("/secret/hidden-package/broken", &[("authorization", &ci)])
        .await;
    assert_eq!(status, 502, "{body:?}");
    proxy.running.proxy.fills.wait_idle().await;
    proxy.private.url("")
}

#[tokio::test]
async fn the_operations_pages_show_only_what_the_caller_may_read() {
    let proxy = AuthProxy::start().await;
    let ci = basic("ci", "ci-pass");
    let private_mirror = private_traffic(&proxy).await;

    for page in ["/-/status", "/-/", "/-/metrics"] {
        let (status, _, body) = proxy.get(page, &[]).await;
        assert_eq!(status, 200, "{page}");
        let body = String::from_utf8_lossy(&body);
        for secret in ["secret", "hidden-package", private_mirror.as_str()] {
            assert!(
                !body.contains(secret),
                "{page} shows {secret:?} anonymously:\n{body}"
            );
        }
        assert!(body.contains("pub"), "{page}");
        // A user the remote does not list sees no more.
        let (_, _, body) = proxy
            .get(page, &[("authorization", &basic("dev", "dev-pass"))])
            .await;
        let body = String::from_utf8_lossy(&body);
        assert!(
            !body.contains("hidden-package") && !body.contains("\"secret\""),
            "{page}"
        );
        assert!(body.contains("team"), "dev may read team: {page}");
        // ci does.
        let (_, _, body) = proxy.get(page, &[("authorization", &ci)]).await;
        assert!(
            String::from_utf8_lossy(&body).contains("secret"),
            "{page} for ci"
        );
    }
    let status: serde_json::Value =
        serde_json::from_slice(&proxy.get("/-/status", &[]).await.2).unwrap();
    assert!(status["recent_errors"].as_array().unwrap().is_empty());
    let names: Vec<&str> = status["remotes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pub"]);
    let for_ci: serde_json::Value =
        serde_json::from_slice(&proxy.get("/-/status", &[("authorization", &ci)]).await.2).unwrap();
    assert!(!for_ci["recent_errors"].as_array().unwrap().is_empty());

    // Server-wide series count the private remote's traffic too: only for
    // a caller every remote admits.
    let fills = |body: &[u8]| {
        String::from_utf8_lossy(body)
            .lines()
            .any(|l| l.starts_with("mirrorcache_fills_in_progress "))
    };
    assert!(!fills(&proxy.get("/-/metrics", &[]).await.2));
    assert!(fills(
        &proxy.get("/-/metrics", &[("authorization", &ci)]).await.2
    ));
    // Wrong credentials on a page: 401, not a page.
    let (status, _, _) = proxy
        .get("/-/status", &[("authorization", &basic("ci", "nope"))])
        .await;
    assert_eq!(status, 401);
    assert_eq!(proxy.get("/-/health", &[]).await.0, 200);
}

/// A private remote a reload renames (or removes) keeps its series in the
/// metrics registry and its errors in the recent ones: they are shown to no
/// one, not to everyone as the names of no remote.
#[tokio::test]
async fn a_private_remote_renamed_by_a_reload_stays_hidden() {
    let proxy = AuthProxy::start().await;
    let private_mirror = private_traffic(&proxy).await;

    let renamed = proxy
        .config_text
        .replace("name = \"secret\"", "name = \"vault\"");
    assert_ne!(renamed, proxy.config_text);
    proxy
        .running
        .reload(&mirrorcache::config::Config::parse(&renamed, "test.toml").unwrap());
    for page in ["/-/status", "/-/", "/-/metrics"] {
        for who in [None, Some(basic("dev", "dev-pass"))] {
            let headers: Vec<(&str, &str)> = who
                .as_deref()
                .map(|h| vec![("authorization", h)])
                .unwrap_or_default();
            let (status, _, body) = proxy.get(page, &headers).await;
            assert_eq!(status, 200, "{page}");
            let body = String::from_utf8_lossy(&body);
            for secret in [
                "hidden-package",
                "remote=\"secret\"",
                "\"secret",
                private_mirror.as_str(),
            ] {
                assert!(
                    !body.contains(secret),
                    "{page} shows {secret:?} to {who:?} after the reload:\n{body}"
                );
            }
            assert!(body.contains("pub"), "{page}");
        }
    }
}

/// A private remote's pass-through answer (npm's search here) says
/// `Cache-Control: private`, so no shared cache downstream keeps an
/// answer given to a caller the remote admitted, for others.
#[tokio::test]
async fn a_private_remotes_pass_through_answer_is_kept_by_no_shared_cache() {
    let mirror = MirrorServer::start().await;
    mirror.put_typed(
        "/-/v1/search",
        r#"{"objects":[],"total":0}"#,
        "application/json",
    );
    let proxy = AuthProxy::start_with(
        "",
        &format!(
            "[[remote]]\nname = \"inpm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n",
            mirror.url("")
        ),
    )
    .await;
    let (status, headers, _) = proxy
        .get(
            "/inpm/-/v1/search?text=x",
            &[("authorization", &basic("ci", "ci-pass"))],
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-cache-status"], "PASS");
    let cache_control: Vec<_> = headers.get_all("cache-control").iter().collect();
    assert_eq!(cache_control, ["private"]);
}

#[tokio::test]
async fn forwarded_headers_from_an_untrusted_peer_change_no_link() {
    let (index, files) = (
        crate::support::MirrorServer::start().await,
        crate::support::MirrorServer::start().await,
    );
    let remote = super::pypi_page(&index, &files);
    let proxy = AuthProxy::start_with("", &remote).await;
    let (_, _, body) = proxy
        .get(
            "/py/simple/six/",
            &[
                ("host", "cache.internal:8080"),
                ("x-forwarded-host", "evil.example"),
                ("x-forwarded-proto", "https"),
            ],
        )
        .await;
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("href=\"http://cache.internal:8080/py/~files/six-1.0.whl\""),
        "{body}"
    );

    // From a trusted proxy they count.
    let trusted = AuthProxy::start_with("trusted_proxies = [\"127.0.0.1\"]", &remote).await;
    let (_, _, body) = trusted
        .get(
            "/py/simple/six/",
            &[
                ("host", "cache.internal:8080"),
                ("x-forwarded-host", "mirror.example.org"),
                ("x-forwarded-proto", "https"),
            ],
        )
        .await;
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("href=\"https://mirror.example.org/py/~files/six-1.0.whl\""),
        "{body}"
    );
}

async fn audit_in(format: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mirror = crate::support::MirrorServer::start().await;
    mirror.put("/hidden-package/x", b"bytes".to_vec());
    std::fs::write(
        dir.path().join("users.htpasswd"),
        super::htpasswd(&[("ci", "ci-pass-never-logged")]),
    )
    .unwrap();
    let remotes = format!(
        "[[remote]]\nname = \"secret\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n",
        mirror.url("")
    );
    let text = super::auth_config(dir.path(), "", &remotes)
        .replace("[auth]", &format!("[log]\nformat = \"{format}\"\n\n[auth]"));
    let proxy = BinaryProxy::start(dir.path(), &text).await;
    let client = reqwest::Client::new();
    let ok = client
        .get(proxy.url("/secret/hidden-package/x"))
        .header("authorization", basic("ci", "ci-pass-never-logged"))
        // From an untrusted peer: not the logged client.
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let denied = client
        .get(proxy.url("/secret/hidden-package/y"))
        .header("authorization", basic("ci", "wrong-pass-never-logged"))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 401);
    crate::support::wait_until("the audit lines", async || {
        proxy.log().matches("hidden-package/y").count() >= 1
    })
    .await;
    let log = proxy.log();
    for secret in [
        "ci-pass-never-logged",
        "wrong-pass-never-logged",
        "Y2k6",
        "203.0.113.9",
    ] {
        assert!(!log.contains(secret), "the log holds {secret:?}:\n{log}");
    }
    log
}

#[tokio::test]
async fn the_audit_line_names_user_remote_path_status_and_peer() {
    let log = audit_in("text").await;
    let line = log
        .lines()
        .find(|l| l.contains("path=\"/secret/hidden-package/x\""))
        .unwrap_or_else(|| panic!("no request line:\n{log}"));
    for field in [
        "status=200",
        "audit=true",
        "user=\"ci\"",
        "remote=\"secret\"",
        "peer=127.0.0.1",
    ] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
    let denied = log
        .lines()
        .find(|l| l.contains("path=\"/secret/hidden-package/y\""))
        .unwrap();
    assert!(
        denied.contains("status=401") && denied.contains("user=\"-\""),
        "{denied}"
    );

    let log = audit_in("json").await;
    let line = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["fields"]["path"] == "/secret/hidden-package/x")
        .unwrap_or_else(|| panic!("no JSON request line:\n{log}"));
    let fields = &line["fields"];
    assert_eq!(fields["user"], "ci");
    assert_eq!(fields["remote"], "secret");
    assert_eq!(fields["status"], 200);
    assert_eq!(fields["peer"], "127.0.0.1");
}

/// The store's total counts a private remote's bytes, and a mirror that a
/// public and a private remote share has one in-flight count and one
/// health: neither is shown to a caller the private remote does not admit.
#[tokio::test]
async fn store_bytes_and_a_shared_mirrors_state_are_shown_only_to_readers_of_every_remote() {
    let shared_mirror = MirrorServer::start().await;
    shared_mirror.put("/shared.bin", vec![7u8; 3_500_000]);
    let more = format!(
        "[[remote]]\nname = \"open-shared\"\nmirrors = [\"{m}\"]\n\n\
         [[remote]]\nname = \"closed-shared\"\nmirrors = [\"{m}\"]\naccess = [\"ci\"]\n",
        m = shared_mirror.url("")
    );
    let proxy = AuthProxy::start_with("", &more).await;
    let ci = basic("ci", "ci-pass");
    let (status, _, _) = proxy
        .get("/closed-shared/shared.bin", &[("authorization", &ci)])
        .await;
    assert_eq!(status, 200);
    proxy.running.proxy.fills.wait_idle().await;
    let status_of =
        |body: bytes::Bytes| -> serde_json::Value { serde_json::from_slice(&body).unwrap() };
    let anonymous = status_of(proxy.get("/-/status", &[]).await.2);
    assert!(anonymous["store_bytes"].is_null(), "{anonymous}");
    let open = anonymous["remotes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "open-shared")
        .unwrap();
    assert_eq!(open["mirrors"][0]["health"], "hidden");
    assert!(open["mirrors"][0]["first_byte_ms"].is_null());
    // The public remote's own mirror is shown as it is.
    let public = anonymous["remotes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pub")
        .unwrap();
    assert_eq!(public["mirrors"][0]["health"], "healthy");
    // ci reads every remote (`team` admits any user).
    let for_ci = status_of(proxy.get("/-/status", &[("authorization", &ci)]).await.2);
    assert!(
        for_ci["store_bytes"].as_u64().unwrap() >= 3_500_000,
        "{for_ci}"
    );
    proxy.running.shutdown().await;
}
