//! Hardening of keys and secrets: one cache key per artifact however its path
//! is spelled; no secret in any output (status, metrics, logs, error bodies,
//! `check`); `Vary: Accept` on content-negotiated documents, the admin DELETE
//! of every variant; and SIGHUP applying or refusing each key, never ignoring
//! one silently.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::metadata::PgDatabase;
use crate::support::proxy::{config_text, get, get_text};
use crate::support::{sha256_hex, test_bytes, BinaryProxy, MirrorServer, S3Server, TestProxy};

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

/// `mirrorcache check` on `text`: exit code and stdout + stderr.
fn check(text: &str) -> (i32, String) {
    let out = crate::support::binary::check(text);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap(), text)
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

// ---- B. No secret in any output ----

/// `check` refuses a password written into a URL, naming the key and where
/// credentials go instead, and never echoes a secret in its errors.
#[test]
fn check_refuses_credentials_in_urls_and_never_echoes_a_secret() {
    const SECRET: &str = "pw-in-url-3c9e";
    let remote = |keys: &str| format!("[[remote]]\nname = \"r\"\n{keys}\n");
    let cases: Vec<(String, &[&str])> = vec![
        (
            remote(&format!("mirrors = [\"https://alice:{SECRET}@mirror.example/x\"]")),
            &[":3:", "`remote[0].mirrors[0]`", "credentials", "remote[0].username", "remote[0].password_env"],
        ),
        (
            remote(&format!(
                "mirrors = [\"https://mirror.example/x\"]\nfiles = [\n  \"https://f.example\",\n  \"https://{SECRET}@f2.example\",\n]"
            )),
            &[":6:", "`remote[0].files[1]`", "username", "password_env"],
        ),
        (
            remote(&format!("mirrors = [\"https://alice:{SECRET}@bad host/x\"]")),
            &[":3:", "`remote[0].mirrors[0]`", "not a URL"],
        ),
        (
            format!("[server]\npublic_url = \"https://u:{SECRET}@cache.example\"\n"),
            &[":2:", "`server.public_url`", "credentials"],
        ),
        (
            format!("[storage]\nurl = \"s3://bucket/p\"\nendpoint = \"http://k:{SECRET}@127.0.0.1:9000\"\n"),
            &[":3:", "`storage.endpoint`", "storage.secret_access_key"],
        ),
        (
            format!("[redis]\nurl = \"http://:{SECRET}@127.0.0.1:6379\"\n"),
            &[":2:", "`redis.url`"],
        ),
        (
            format!("[metadata]\nurl = \"mysql://root:{SECRET}@127.0.0.1/db\"\n"),
            &[":2:", "`metadata.url`"],
        ),
    ];
    let good_remote = remote("mirrors = [\"http://127.0.0.1:1/x\"]");
    for (text, needles) in &cases {
        let text = if text.contains("[[remote]]") {
            text.clone()
        } else {
            format!("{text}\n{good_remote}")
        };
        let (code, output) = check(&text);
        assert_eq!(code, 2, "{text}\n{output}");
        for needle in *needles {
            assert!(
                output.contains(needle),
                "{needle:?} missing from {output:?} for\n{text}"
            );
        }
        assert!(
            !output.contains(SECRET),
            "check echoed the secret: {output}"
        );
    }
}

/// Every secret a config may hold — upstream password, admin token, the
/// Postgres and Redis passwords in their URLs, the S3 secret key — appears in
/// none of `/-/status`, `/-/metrics`, error bodies, the debug log (including a
/// refused reload) or `check`'s output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_shows_in_status_metrics_logs_error_bodies_or_check() {
    const UPSTREAM: &str = "upstream-secret-7f3a";
    const ADMIN: &str = "admin-secret-91c2";
    const POSTGRES: &str = "postgres-secret-55d0";
    const REDIS: &str = "redis-secret-0b8e";
    const REDIS_NEXT: &str = "redis-secret-next-e21f";
    const S3_KEY: &str = "s3-secret-c4d1";
    let secrets = [UPSTREAM, ADMIN, POSTGRES, REDIS, REDIS_NEXT, S3_KEY];

    let mirror = MirrorServer::start().await;
    mirror.put("/m/private", b"private bytes".to_vec());
    mirror.require_basic_auth("alice", UPSTREAM);
    let dir = tempfile::tempdir().unwrap();
    let remotes = format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{m}\"]\nusername = \"alice\"\npassword = \"{UPSTREAM}\"\n\n[[remote]]\nname = \"anon\"\nmirrors = [\"{m}\"]\n",
        m = mirror.url("/m")
    );
    let mut text = with_server_keys(
        &config_text(dir.path(), &remotes),
        &format!("admin_token = \"{ADMIN}\""),
    );
    // The real services when they are here (a password is accepted and
    // ignored by the local trust / no-auth setups); else unreachable ones,
    // which the proxy reports in its log.
    let pg = PgDatabase::create().await;
    if let Some(pg) = &pg {
        let url = pg
            .url
            .replace("postgres@", &format!("postgres:{POSTGRES}@"));
        text = text.replace(&format!("sqlite://{}/meta.db", dir.path().display()), &url);
    }
    let redis_port = if std::net::TcpStream::connect("127.0.0.1:6379").is_ok() {
        6379
    } else {
        1
    };
    let redis = |password: &str| {
        format!("\n[redis]\nurl = \"redis://:{password}@127.0.0.1:{redis_port}\"\n")
    };
    text.push_str(&redis(REDIS));
    let s3 = S3Server::start("mirrorcache-secrets").await;
    if let Some(s3) = &s3 {
        let keys = s3.storage_keys("mirrorcache-secrets").replace(
            "secret_access_key = \"test\"",
            &format!("secret_access_key = \"{S3_KEY}\""),
        );
        text = text.replace("[storage]\n", &format!("[storage]\n{keys}"));
    }

    let (code, check_output) = check(&text);
    assert_eq!(code, 0, "{check_output}");

    let proxy = BinaryProxy::start(dir.path(), &text).await;
    let client = reqwest::Client::new();
    let (status, _, bytes) = get(&client, &proxy.url("/r/private")).await;
    assert_eq!((status, &bytes.unwrap()[..]), (200, &b"private bytes"[..]));
    let mut outputs = vec![("check", check_output)];
    for (what, request) in [
        ("status", client.get(proxy.url("/-/status"))),
        ("metrics", client.get(proxy.url("/-/metrics"))),
        ("502 body", client.get(proxy.url("/anon/private"))),
        ("404 body", client.get(proxy.url("/nope/x"))),
        ("400 body", client.get(proxy.url("/r/a%00b"))),
        (
            "401 body",
            client
                .delete(proxy.url("/-/cache/r/private"))
                .bearer_auth("wrong"),
        ),
        (
            "admin body",
            client
                .delete(proxy.url("/-/cache/r/private"))
                .bearer_auth(ADMIN),
        ),
    ] {
        let response = request.send().await.unwrap();
        let head = format!("{:?}", response.headers());
        outputs.push((what, format!("{head}\n{}", response.text().await.unwrap())));
    }

    // A reload that changes the Redis password is refused, naming the key only.
    let port = proxy.base.rsplit(':').next().unwrap().to_string();
    let next = text
        .replace(&redis(REDIS), &redis(REDIS_NEXT))
        .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    std::fs::write(&proxy.config_path, next).unwrap();
    proxy.signal("HUP");
    eventually("the refused reload in the log", async || {
        proxy.log().contains("reload refused")
    })
    .await;
    assert!(proxy.log().contains("`redis.url`"), "{}", proxy.log());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = proxy.log();
    assert!(
        log.contains("/r/private") && log.contains("DEBUG"),
        "the log is at debug level:\n{log}"
    );
    outputs.push(("log", log));

    // A Postgres that cannot be reached at start: the error has no password.
    let unreachable = config_text(dir.path(), &remotes).replace(
        &format!("sqlite://{}/meta.db", dir.path().display()),
        &format!("postgres://postgres:{POSTGRES}@127.0.0.1:1/nothing"),
    );
    let path = dir.path().join("unreachable.toml");
    std::fs::write(&path, unreachable).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("RUST_LOG", "debug")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.contains("postgres://postgres:***@127.0.0.1:1/nothing"),
        "{stderr}"
    );
    outputs.push(("start-up error", stderr));

    for (what, output) in &outputs {
        for secret in secrets {
            assert!(
                !output.contains(secret),
                "{secret} leaked into the {what}:\n{output}"
            );
        }
        // Nor base64-encoded (the upstream basic credentials).
        assert!(
            !output.contains("dXBzdHJlYW0tc2VjcmV0"),
            "encoded secret in the {what}"
        );
    }
    drop(proxy);
    drop(pg);
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
    let page = async || get_text(&client, &proxy.url("/py/simple/proj/")).await;
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
