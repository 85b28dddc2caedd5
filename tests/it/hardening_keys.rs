//! Hardening of keys and secrets: one cache key per artifact however its path
//! is spelled; no secret in any output (status, metrics, logs, error bodies,
//! `check`); `Vary: Accept` on content-negotiated documents, the admin DELETE
//! of every variant; and SIGHUP applying or refusing each key, never ignoring
//! one silently.

use std::time::{Duration, Instant};

use crate::support::proxy::{config_text, get};
use crate::support::{sha256_hex, test_bytes, BinaryProxy, MirrorServer, TestProxy};

/// `[server]` keys added to a `config_text`.
fn with_server_keys(text: &str, keys: &str) -> String {
    text.replace("[server]\n", &format!("[server]\n{keys}\n"))
}

/// Polls `done` every 50 ms for up to 10 s.
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---- A. One cache key per artifact ----

/// RFC 3986 §6.2.2 spellings of one artifact are one cache entry and one
/// upstream fetch; reserved encodings reach the mirror encoded (upper-cased).
#[tokio::test]
async fn every_spelling_of_a_path_is_one_key_and_one_upstream_fetch() {
    let mirror = MirrorServer::start().await;
    let bytes = test_bytes(200_000, 11);
    mirror.put("/m/kn/a.bin", bytes.clone());
    mirror.put_typed("/m/@s%2Fp", "{\"name\":\"@s/p\"}", "application/json");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"g\"\nmirrors = [\"{m}\"]\n\n[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{m}\"]\n",
        m = mirror.url("/m")
    ))
    .await;
    let client = reqwest::Client::new();

    let mut seen = Vec::new();
    for path in [
        "/g/kn/a.bin",
        "/g/kn/%61.bin",
        "/g/kn/%61%2Ebin",
        "/g/%6Bn/a.bin",
        "/%67/kn/%61.bin",
    ] {
        let (status, cache, body) = get(&client, &proxy.url(path)).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&bytes), "{path}");
        seen.push(cache);
        proxy.settle().await;
    }
    assert_eq!(seen, ["MISS", "HIT", "HIT", "HIT", "HIT"]);
    assert_eq!(mirror.requests(), [("/m/kn/a.bin".to_string(), 1)]);

    // npm's scoped name: `%2f` and `%2F` are one packument, fetched encoded.
    let mut seen = Vec::new();
    for path in ["/npm/@s%2fp", "/npm/@s%2Fp", "/npm/@%73%2fp"] {
        let (status, cache, _) = get(&client, &proxy.url(path)).await;
        assert_eq!(status, 200, "{path}");
        seen.push(cache);
        proxy.settle().await;
    }
    assert_eq!(seen, ["MISS", "HIT", "HIT"]);
    assert_eq!(mirror.hits("/m/@s%2Fp"), 1);
    assert_eq!(mirror.total(), 2);
    proxy.stop().await;
}

// ---- C. Documents: Vary, admin DELETE, reload ----

/// Every response of a content-negotiated path says `Vary: Accept`: misses,
/// hits, 304s, 404s; artifacts do not.
#[tokio::test]
async fn negotiated_documents_vary_on_accept_and_artifacts_do_not() {
    let mirror = MirrorServer::start().await;
    mirror.put_typed("/simple/proj/", "<a href=\"x.whl\">x</a>", "text/html");
    mirror.put("/f/packages/x.whl", b"wheel".to_vec());
    mirror.put_typed("/left-pad", "{\"name\":\"left-pad\"}", "application/json");
    mirror.put("/left-pad/-/left-pad-1.0.0.tgz", b"tgz".to_vec());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"py\"\nkind = \"pypi\"\nmirrors = [\"{m}\"]\nfiles = [\"{m}/f\"]\n\n[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{m}\"]\n",
        m = mirror.url("")
    ))
    .await;
    let client = reqwest::Client::new();
    let fetch = async |path: &str, headers: &[(&str, &str)]| {
        let mut request = client.get(proxy.url(path));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        let vary = response
            .headers()
            .get("vary")
            .map(|v| v.to_str().unwrap().to_string());
        let etag = response
            .headers()
            .get("etag")
            .map(|v| v.to_str().unwrap().to_string());
        let seen = (
            response.status().as_u16(),
            response
                .headers()
                .get("x-cache-status")
                .map_or(String::new(), |v| v.to_str().unwrap().to_string()),
            vary,
        );
        proxy.settle().await;
        (seen, etag)
    };
    let accept = Some("Accept".to_string());
    let json = [("accept", "application/vnd.pypi.simple.v1+json")];

    let (seen, _) = fetch("/py/simple/proj/", &[]).await;
    assert_eq!(seen, (200, "MISS".into(), accept.clone()));
    let (seen, etag) = fetch("/py/simple/proj/", &[]).await;
    assert_eq!(seen, (200, "HIT".into(), accept.clone()));
    let (seen, _) = fetch("/py/simple/proj/", &[("if-none-match", &etag.unwrap())]).await;
    assert_eq!(seen, (304, "HIT".into(), accept.clone()));
    assert_eq!(
        fetch("/py/simple/proj/", &json).await.0,
        (200, "MISS".into(), accept.clone())
    );
    assert_eq!(
        fetch("/py/simple/proj/", &json).await.0,
        (200, "HIT".into(), accept.clone())
    );
    assert_eq!(fetch("/py/simple/gone/", &[]).await.0 .2, accept);
    assert_eq!(
        fetch("/npm/left-pad", &[]).await.0,
        (200, "MISS".into(), accept.clone())
    );
    assert_eq!(
        fetch("/npm/left-pad", &[]).await.0,
        (200, "HIT".into(), accept.clone())
    );

    assert_eq!(
        fetch("/py/~files/packages/x.whl", &[]).await.0,
        (200, "MISS".into(), None)
    );
    assert_eq!(
        fetch("/py/~files/packages/x.whl", &[]).await.0,
        (200, "HIT".into(), None)
    );
    assert_eq!(
        fetch("/npm/left-pad/-/left-pad-1.0.0.tgz", &[]).await.0,
        (200, "MISS".into(), None)
    );
    assert_eq!(mirror.hits("/simple/proj/"), 2);
    proxy.stop().await;
}

/// `DELETE /-/cache/{remote}/{document}` removes every cached variant (and
/// takes the path in any spelling): both are misses afterwards.
#[tokio::test]
async fn deleting_a_document_removes_every_variant() {
    let mirror = MirrorServer::start().await;
    mirror.put_typed("/simple/proj/", "<a href=\"x.whl\">x</a>", "text/html");
    let dir = tempfile::tempdir().unwrap();
    let text = with_server_keys(
        &config_text(
            dir.path(),
            &format!(
                "[[remote]]\nname = \"py\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = []\n",
                mirror.url("")
            ),
        ),
        "admin_token = \"t\"",
    );
    let running = crate::support::proxy::start_text(&text).await;
    let url = |p: &str| format!("http://{}{p}", running.local_addr);
    let client = reqwest::Client::new();
    let fetch = async |accept: &str| {
        let response = client
            .get(url("/py/simple/proj/"))
            .header("accept", accept)
            .send()
            .await
            .unwrap();
        let cache = response.headers()["x-cache-status"]
            .to_str()
            .unwrap()
            .to_string();
        running.proxy.fills.wait_idle().await;
        cache
    };
    let (html, json) = ("text/html", "application/vnd.pypi.simple.v1+json");
    assert_eq!([fetch(html).await, fetch(json).await], ["MISS", "MISS"]);
    assert_eq!([fetch(html).await, fetch(json).await], ["HIT", "HIT"]);

    let response = client
        .delete(url("/-/cache/py/simple/%70roj/"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(
        (answer["removed"].as_bool(), answer["entries"].as_u64()),
        (Some(true), Some(2)),
        "{answer}"
    );
    assert_eq!([fetch(html).await, fetch(json).await], ["MISS", "MISS"]);
    assert_eq!(mirror.hits("/simple/proj/"), 4);
    running.shutdown().await;
}

/// SIGHUP applies `admin_token` and `public_url` at once; a config changing
/// a key that only a restart applies (here `storage.max_size`) is refused
/// whole, naming the key, and the running config stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_server_keys_and_refuses_restart_only_keys() {
    let mirror = MirrorServer::start().await;
    mirror.put_typed(
        "/simple/proj/",
        format!("<a href=\"{}/packages/x.whl\">x</a>", mirror.url("")),
        "text/html",
    );
    mirror.put("/x", b"x".to_vec());
    let dir = tempfile::tempdir().unwrap();
    let remotes = format!(
        "[[remote]]\nname = \"py\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = []\n",
        mirror.url("")
    );
    let config = |server: &str, extra: &str| {
        with_server_keys(
            &config_text(dir.path(), &format!("{remotes}\n{extra}")),
            server,
        )
    };
    let proxy = BinaryProxy::start(
        dir.path(),
        &config(
            "admin_token = \"old-token\"\npublic_url = \"http://old.example\"",
            "",
        ),
    )
    .await;
    let port = proxy.base.rsplit(':').next().unwrap().to_string();
    let rewrite = |text: String| {
        std::fs::write(
            &proxy.config_path,
            text.replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
        )
        .unwrap();
        proxy.signal("HUP");
    };
    let client = reqwest::Client::new();
    let page = async || {
        client
            .get(proxy.url("/py/simple/proj/"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let delete_with = async |token: &str| {
        let response = client
            .delete(proxy.url("/-/cache/py/nothing"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        response.status().as_u16()
    };
    assert!(page()
        .await
        .contains("http://old.example/py/packages/x.whl"));
    assert_eq!(delete_with("old-token").await, 200);

    rewrite(config(
        "admin_token = \"new-token\"\npublic_url = \"http://new.example\"",
        "",
    ));
    eventually("the new admin token", async || {
        delete_with("new-token").await == 200
    })
    .await;
    assert_eq!(delete_with("old-token").await, 401);
    let body = page().await;
    assert!(
        body.contains("http://new.example/py/packages/x.whl"),
        "{body}"
    );

    // A restart-only key changes along with a new remote and token: all refused.
    rewrite(
        config(
            "admin_token = \"third-token\"\npublic_url = \"http://third.example\"",
            &format!(
                "[[remote]]\nname = \"b\"\nmirrors = [\"{}\"]\n",
                mirror.url("")
            ),
        )
        .replace("[storage]\n", "[storage]\nmax_size = \"1GiB\"\n"),
    );
    eventually("the refusal in the log", async || {
        proxy.log().contains("reload refused")
    })
    .await;
    let log = proxy.log();
    assert!(log.contains("`storage.max_size`"), "{log}");
    assert_eq!(get(&client, &proxy.url("/b/x")).await.0, 404);
    assert_eq!(delete_with("third-token").await, 401);
    assert_eq!(delete_with("new-token").await, 200);
    assert!(page().await.contains("http://new.example/py/"));

    // Back to the running settings plus the new remote: applied.
    rewrite(config(
        "admin_token = \"new-token\"\npublic_url = \"http://new.example\"",
        &format!(
            "[[remote]]\nname = \"b\"\nmirrors = [\"{}\"]\n",
            mirror.url("")
        ),
    ));
    eventually("the new remote", async || {
        get(&client, &proxy.url("/b/x")).await.0 == 200
    })
    .await;
}
