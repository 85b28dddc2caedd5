//! Not an open proxy, bounded request heads and connections, the admin API's
//! token, and credentials that never leak.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::proxy::{config_text, get, get_text};
use crate::support::{wait_until, BinaryProxy, MirrorServer, TestProxy};

fn remote(mirror: &MirrorServer, extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\n{extra}\n",
        mirror.url("/m")
    )
}

/// Connects and sends raw bytes, leaving the connection open.
async fn send(addr: std::net::SocketAddr, request: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    stream
}

/// Sends raw bytes, returns what the server answered before closing.
async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = send(addr, request).await;
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut reply)).await;
    String::from_utf8_lossy(&reply).into_owned()
}

async fn start_with(
    server: &str,
    remotes: &str,
) -> (tempfile::TempDir, mirrorcache::http::server::Running) {
    let dir = tempfile::tempdir().unwrap();
    let text =
        config_text(dir.path(), remotes).replace("[server]\n", &format!("[server]\n{server}\n"));
    let running = crate::support::proxy::start_text(&text).await;
    (dir, running)
}

#[tokio::test]
async fn absolute_form_targets_and_connect_are_refused() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/x", b"x".to_vec());
    let proxy = TestProxy::start(&remote(&mirror, "")).await;
    let addr = proxy.running.local_addr;
    let target = mirror.url("/m/x");
    let reply = raw(
        addr,
        format!(
            "GET {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            mirror.addr
        )
        .as_bytes(),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    let reply = raw(
        addr,
        format!(
            "CONNECT {} HTTP/1.1\r\nHost: {}\r\n\r\n",
            mirror.addr, mirror.addr
        )
        .as_bytes(),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 4"), "{reply}");
    assert_eq!(mirror.total(), 0);
    proxy.stop().await;
}

#[tokio::test]
async fn slow_and_oversized_request_heads_are_cut_off() {
    let mirror = MirrorServer::start().await;
    let (_dir, running) = start_with("header_read_timeout = \"300ms\"", &remote(&mirror, "")).await;
    let addr = running.local_addr;

    // Slow loris: half a request head, then nothing. The server hangs up.
    let mut stream = send(addr, b"GET /r/x HTTP/1.1\r\nHost: x\r\n").await;
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut buf)).await;
    assert!(closed.is_ok(), "a stalled request head must be cut off");

    // A 100 KiB header: refused.
    let big = "a".repeat(100 * 1024);
    let reply = raw(
        addr,
        format!("GET /r/x HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 431"),
        "{reply}"
    );

    // And the server goes on.
    assert_eq!(
        reqwest::get(format!("http://{addr}/-/health"))
            .await
            .unwrap()
            .status(),
        200
    );
    running.shutdown().await;
}

#[tokio::test]
async fn connections_beyond_max_connections_wait_their_turn() {
    let mirror = MirrorServer::start().await;
    let (_dir, running) = start_with("max_connections = 2", &remote(&mirror, "")).await;
    let addr = running.local_addr;
    // Two kept-alive connections, each shown to be accepted (and so holding
    // its slot) by one answered request.
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..2 {
        let mut stream = send(addr, b"GET /-/health HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let mut reply = Vec::new();
        while !reply.ends_with(b"ok\n") {
            let mut buf = [0u8; 1024];
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .expect("a held connection is answered")
                .unwrap();
            assert!(n > 0, "the server closed a held connection");
            reply.extend_from_slice(&buf[..n]);
        }
        held.push(stream);
    }
    let client = reqwest::Client::new();
    let third = tokio::time::timeout(
        Duration::from_millis(500),
        client.get(format!("http://{addr}/-/health")).send(),
    )
    .await;
    assert!(
        third.is_err(),
        "a third connection must wait while two are open"
    );
    drop(held);
    let fourth = tokio::time::timeout(
        Duration::from_secs(5),
        client.get(format!("http://{addr}/-/health")).send(),
    )
    .await;
    assert_eq!(fourth.unwrap().unwrap().status(), 200);
    running.shutdown().await;
}

#[tokio::test]
async fn trickled_request_bodies_give_their_slots_back_within_body_read_timeout() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/x", b"cached".to_vec());
    let remotes = format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n\n{}",
        mirror.url("/m"),
        remote(&mirror, "")
    );
    let (_dir, running) =
        start_with("max_connections = 4\nbody_read_timeout = \"2s\"", &remotes).await;
    let addr = running.local_addr;
    // Every slot: an npm audit POST whose body comes a byte every 2 s.
    let head = b"POST /npm/-/npm/v1/security/audits/quick HTTP/1.1\r\nHost: x\r\n\
                 Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n";
    let mut trickled = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let mut stream = send(addr, head).await;
        trickled.spawn(async move {
            let mut reply = Vec::new();
            let mut buf = [0u8; 1024];
            for _ in 0..30 {
                if stream.write_all(b"{").await.is_err() {
                    break;
                }
                match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => reply.extend_from_slice(&buf[..n]),
                    Err(_) => {}
                }
            }
            String::from_utf8_lossy(&reply).into_owned()
        });
    }
    // A fresh connection is answered once the trickled ones are cut off.
    let hit = tokio::time::timeout(
        Duration::from_secs(10),
        reqwest::Client::new()
            .get(format!("http://{addr}/r/x"))
            .send(),
    )
    .await
    .expect("a fresh connection is served within the deadline")
    .unwrap();
    assert_eq!(hit.status(), 200);
    assert_eq!(hit.bytes().await.unwrap().as_ref(), b"cached");
    while let Some(reply) = trickled.join_next().await {
        let reply = reply.unwrap();
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    }
    // Nothing of the trickled bodies went upstream.
    assert_eq!(mirror.total(), 1);
    running.shutdown().await;
}

#[tokio::test]
async fn the_admin_api_needs_its_token() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/a", b"a".to_vec());
    mirror.put("/m/b", b"b".to_vec());
    let client = reqwest::Client::new();

    // No token configured: the API does not exist.
    let proxy = TestProxy::start(&remote(&mirror, "")).await;
    let r = client
        .delete(proxy.url("/-/cache/r/a"))
        .bearer_auth("")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    proxy.stop().await;

    let (_dir, running) = start_with(
        "admin_token = \"s3cret-admin\"",
        &remote(&mirror, "immutable = [\"**\"]"),
    )
    .await;
    let url = |p: &str| format!("http://{}{p}", running.local_addr);
    for p in ["/r/a", "/r/b"] {
        get(&client, &url(p)).await.2.unwrap();
    }
    running.proxy.fills.wait_idle().await;
    assert_eq!(
        client
            .delete(url("/-/cache/r/a"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        client
            .delete(url("/-/cache/r/a"))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        client
            .post(url("/-/cache/r/purge"))
            .bearer_auth("s3cret-admin-")
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(get(&client, &url("/r/a")).await.1, "HIT");

    let r = client
        .delete(url("/-/cache/r/a"))
        .bearer_auth("s3cret-admin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("\"removed\":true"));
    assert_eq!(get(&client, &url("/r/a")).await.1, "MISS");
    assert_eq!(get(&client, &url("/r/b")).await.1, "HIT");

    running.proxy.fills.wait_idle().await;
    let r = client
        .post(url("/-/cache/r/purge"))
        .bearer_auth("s3cret-admin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(get(&client, &url("/r/a")).await.1, "MISS");
    assert_eq!(get(&client, &url("/r/b")).await.1, "MISS");
    assert_eq!(
        client
            .post(url("/-/cache/nope/purge"))
            .bearer_auth("s3cret-admin")
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    running.shutdown().await;
}

/// Upstream credentials reach the remote's mirror and appear nowhere else:
/// not in logs (at debug level), `/-/status`, `/-/metrics` or error bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_credentials_are_sent_and_never_shown() {
    const SECRET: &str = "hunter2-very-secret";
    let mirror = MirrorServer::start().await;
    mirror.put("/m/private", b"private bytes".to_vec());
    mirror.require_basic_auth("alice", SECRET);
    let dir = tempfile::tempdir().unwrap();
    let remotes = format!(
        "{}\n[[remote]]\nname = \"anon\"\nmirrors = [\"{}\"]\n\n[[remote]]\nname = \"env\"\nmirrors = [\"{}\"]\nusername = \"alice\"\npassword_env = \"MIRRORCACHE_TEST_NO_SUCH_VAR\"\n",
        remote(&mirror, &format!("username = \"alice\"\npassword = \"{SECRET}\"")),
        mirror.url("/m"),
        mirror.url("/nowhere")
    );
    // A password from a missing environment variable is a config error naming the key.
    let err = mirrorcache::config::Config::parse(&config_text(dir.path(), &remotes), "c.toml")
        .unwrap_err();
    assert!(err.to_string().contains("remote[2].password_env"), "{err}");
    let remotes = remotes
        .split("\n[[remote]]\nname = \"env\"")
        .next()
        .unwrap()
        .to_string();
    let proxy = BinaryProxy::start(dir.path(), &config_text(dir.path(), &remotes)).await;
    let client = reqwest::Client::new();

    let (status, _, bytes) = get(&client, &proxy.url("/r/private")).await;
    assert_eq!((status, &bytes.unwrap()[..]), (200, &b"private bytes"[..]));
    let (status, _, body) = get(&client, &proxy.url("/anon/private")).await;
    assert_eq!(status, 502);
    let body = String::from_utf8_lossy(&body.unwrap()).into_owned();
    let status = get_text(&client, &proxy.url("/-/status")).await;
    let metrics = get_text(&client, &proxy.url("/-/metrics")).await;
    // The request lines reach the log file a moment after the responses.
    wait_until("the request lines in the log", async || {
        let log = proxy.log();
        log.contains("/r/private") && log.contains("/anon/private")
    })
    .await;
    let log = proxy.log();
    for (what, text) in [
        ("error body", &body),
        ("status", &status),
        ("metrics", &metrics),
        ("log", &log),
    ] {
        assert!(!text.contains(SECRET), "the secret leaked into the {what}");
        assert!(
            !text.contains("aHVudGVy"),
            "the encoded secret leaked into the {what}"
        );
    }
}
