//! The answers: 401 with a challenge without valid credentials, 404 for a
//! user the remote does not list (as for a name no remote has), both the same for any path and carrying
//! nothing of the artifact, on every method; the credentials each client
//! sends; malformed headers; the failed-login limit per peer.

use super::{auth_config, basic, raw_get, send, start, AuthProxy, PRIVATE_BODY};
use crate::support::MirrorServer;

#[tokio::test]
async fn anonymous_remotes_stay_open_and_private_ones_challenge() {
    let proxy = AuthProxy::start().await;
    let (status, _, body) = proxy.get("/pub/a.txt", &[]).await;
    assert_eq!((status, &body[..]), (200, &b"public bytes"[..]));
    // Empty Basic credentials (skopeo's after a challenge) are none at all.
    let (status, _, _) = proxy
        .get("/pub/a.txt", &[("authorization", "Basic Og==")])
        .await;
    assert_eq!(status, 200);

    for path in ["/secret/hidden-package/x", "/secret/no/such/path"] {
        let (status, headers, body) = proxy.get(path, &[]).await;
        assert_eq!(status, 401, "{path}");
        assert_eq!(headers["www-authenticate"], "Basic realm=\"mirrorcache\"");
        assert!(headers.get("etag").is_none() && headers.get("last-modified").is_none());
        assert_eq!(&body[..], b"authentication required\n", "{path}");
        let (status, _, _) = proxy.get(path, &[("authorization", "Basic Og==")]).await;
        assert_eq!(status, 401, "empty credentials on {path}");
    }
    let (status, _, _) = proxy.get("/team/t.txt", &[]).await;
    assert_eq!(status, 401);
    assert_eq!(proxy.private.total() + proxy.team.total(), 0);
    assert_eq!(proxy.public.total(), 1, "the second public read was a hit");
}

#[tokio::test]
async fn a_listed_user_reads_and_another_is_forbidden_whatever_the_path() {
    let proxy = AuthProxy::start().await;
    let ci = basic("ci", "ci-pass");
    let dev = basic("dev", "dev-pass");
    let (status, headers, body) = proxy
        .get("/secret/hidden-package/x", &[("authorization", &ci)])
        .await;
    assert_eq!((status, &body[..]), (200, PRIVATE_BODY));
    assert_eq!(headers["x-cache-status"], "MISS");
    proxy.running.proxy.fills.wait_idle().await;
    let (status, headers, _) = proxy
        .get("/secret/hidden-package/x", &[("authorization", &ci)])
        .await;
    assert_eq!(
        (status, &headers["x-cache-status"]),
        (200, &"HIT".parse::<reqwest::header::HeaderValue>().unwrap())
    );
    assert_eq!(proxy.private.total(), 1);

    // The cached copy is served only to who may read the remote; to
    // another user the remote is as absent as a name no remote has.
    for path in ["/secret/hidden-package/x", "/secret/never/fetched"] {
        let (status, headers, body) = proxy.get(path, &[("authorization", &dev)]).await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(&body[..], b"no remote named \"secret\"\n");
        assert!(headers.get("etag").is_none() && headers.get("x-cache-status").is_none());
        let (status, _, _) = proxy.get(path, &[]).await;
        assert_eq!(status, 401);
    }
    // `authenticated`: any user.
    let (status, _, _) = proxy.get("/team/t.txt", &[("authorization", &dev)]).await;
    assert_eq!(status, 200);
    assert_eq!(
        proxy.private.total(),
        1,
        "nothing more reached the private mirror"
    );
}

#[tokio::test]
async fn wrong_and_unknown_credentials_are_401_and_the_scheme_is_any_case() {
    let proxy = AuthProxy::start().await;
    for header in [
        basic("ci", "wrong"),
        basic("nobody", "ci-pass"),
        "Bearer not-a-token".to_string(),
        "mct_0123456789ab_nope".to_string(),
        "Digest username=\"ci\"".to_string(),
    ] {
        let (status, headers, _) = proxy
            .get("/secret/hidden-package/x", &[("authorization", &header)])
            .await;
        assert_eq!(status, 401, "{header}");
        assert!(headers.contains_key("www-authenticate"));
    }
    let lower = basic("ci", "ci-pass").replacen("Basic", "basic", 1);
    let (status, _, _) = proxy
        .get("/secret/hidden-package/x", &[("authorization", &lower)])
        .await;
    assert_eq!(status, 200);
    let upper = basic("ci", "ci-pass").replacen("Basic", "BASIC", 1);
    let (status, _, _) = proxy
        .get("/secret/hidden-package/x", &[("authorization", &upper)])
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn every_method_is_checked_like_get_and_nothing_goes_upstream() {
    let proxy = AuthProxy::start().await;
    for method in ["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH"] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let (status, _, _) =
            send(method.clone(), &proxy.url("/secret/hidden-package/x"), &[]).await;
        assert_eq!(status, 401, "{method}");
        let (status, _, _) = send(
            method.clone(),
            &proxy.url("/secret/hidden-package/x"),
            &[("authorization", &basic("dev", "dev-pass"))],
        )
        .await;
        assert_eq!(status, 404, "{method}");
    }
    // A preflight is no exception.
    let (status, _, _) = send(
        reqwest::Method::OPTIONS,
        &proxy.url("/secret/hidden-package/x"),
        &[
            ("origin", "http://elsewhere.example"),
            ("access-control-request-method", "GET"),
        ],
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(proxy.private.total(), 0);
}

#[tokio::test]
async fn malformed_authorization_headers_are_400_or_401_never_500() {
    let proxy = AuthProxy::start().await;
    let addr = proxy.running.local_addr;
    let ci = basic("ci", "ci-pass");
    let cases: Vec<(String, &str)> = vec![
        (
            format!("Authorization: {ci}\r\nAuthorization: {ci}\r\n"),
            "two headers",
        ),
        (
            "Authorization: Basic !!!notbase64\r\n".to_string(),
            "bad base64",
        ),
        (
            "Authorization: Basic bm9jb2xvbg==\r\n".to_string(),
            "no colon (nocolon)",
        ),
        (
            "Authorization: Basic /w==\r\n".to_string(),
            "non-UTF-8 inside",
        ),
        ("Authorization: Bearer \r\n".to_string(), "empty bearer"),
    ];
    for (extra, what) in &cases {
        for path in ["/secret/hidden-package/x", "/pub/a.txt"] {
            let (status, _) = raw_get(addr, path, extra).await;
            assert!(
                status == 400 || status == 401 || (path == "/pub/a.txt" && status == 200),
                "{what} on {path}: {status}"
            );
        }
    }
    // Non-UTF-8 bytes in the header itself.
    let mut request = b"GET /secret/hidden-package/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Basic \xff\xfe\r\n\r\n".to_vec();
    let (status, _) = super::raw(addr, &request).await;
    assert!(status == 400 || status == 401, "non-UTF-8 header: {status}");
    request.clear();
    // Two headers are refused even on an anonymous remote.
    let (status, _) = raw_get(addr, "/pub/a.txt", &cases[0].0).await;
    assert_eq!(status, 400);
    assert_eq!(proxy.private.total(), 0);
}

#[tokio::test]
async fn failed_logins_are_limited_per_peer_and_other_peers_go_on() {
    let proxy = AuthProxy::start().await;
    let bad = basic("ci", "guess");
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..200 {
        let response = client
            .get(proxy.url("/secret/hidden-package/x"))
            .header("authorization", &bad)
            // From an untrusted peer this changes nothing.
            .header("x-forwarded-for", "10.9.9.9")
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses[0], 401);
    assert_eq!(
        *statuses.last().unwrap(),
        429,
        "limited within 200 failures"
    );
    assert!(statuses.iter().all(|s| *s == 401 || *s == 429));
    // Even the right password, from that peer, waits out the window.
    let (status, headers, _) = proxy
        .get(
            "/secret/hidden-package/x",
            &[("authorization", &basic("ci", "ci-pass"))],
        )
        .await;
    assert_eq!(status, 429);
    assert!(headers.contains_key("retry-after"));
    // Anonymous requests to an anonymous remote are no logins.
    assert_eq!(proxy.get("/pub/a.txt", &[]).await.0, 200);

    // Another peer (127.0.0.2, the same loopback) is not limited.
    let other = reqwest::Client::builder()
        .local_address(Some("127.0.0.2".parse().unwrap()))
        .build()
        .unwrap();
    let response = other
        .get(proxy.url("/secret/hidden-package/x"))
        .header("authorization", basic("ci", "ci-pass"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_client_is_the_peer() {
    let proxy = AuthProxy::start_with("trusted_proxies = [\"127.0.0.0/8\"]", "").await;
    let bad = basic("ci", "guess");
    let mut last = 0;
    for _ in 0..200 {
        let (status, _, _) = proxy
            .get(
                "/secret/hidden-package/x",
                &[("authorization", &bad), ("x-forwarded-for", "203.0.113.7")],
            )
            .await;
        last = status;
    }
    assert_eq!(last, 429);
    let ci = basic("ci", "ci-pass");
    let (status, _, _) = proxy
        .get(
            "/secret/hidden-package/x",
            &[("authorization", &ci), ("x-forwarded-for", "203.0.113.8")],
        )
        .await;
    assert_eq!(status, 200, "another forwarded client goes on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_wrong_logins_are_counted_as_they_start_and_hits_go_on() {
    let (public, private) = (MirrorServer::start().await, MirrorServer::start().await);
    public.put("/a.txt", b"public bytes".to_vec());
    private.put("/x", b"private".to_vec());
    let dir = tempfile::tempdir().unwrap();
    // The cost most htpasswd files use: each check takes tens of milliseconds.
    let hash = bcrypt::hash("ci-pass", 10).unwrap();
    std::fs::write(dir.path().join("users.htpasswd"), format!("ci:{hash}\n")).unwrap();
    let remotes = format!(
        "[[remote]]\nname = \"pub\"\nmirrors = [\"{}\"]\n\n\
         [[remote]]\nname = \"secret\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n",
        public.url(""),
        private.url("")
    );
    let running = start(&auth_config(dir.path(), "", &remotes)).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    // Cached first, so what follows are hits.
    let hit = format!("{base}/pub/a.txt");
    assert_eq!(client.get(&hit).send().await.unwrap().status(), 200);

    let bad = basic("ci", "guess");
    let mut logins = tokio::task::JoinSet::new();
    for _ in 0..300 {
        let (client, url, bad) = (client.clone(), format!("{base}/secret/x"), bad.clone());
        logins.spawn(async move {
            let response = client
                .get(url)
                .header("authorization", bad)
                .send()
                .await
                .unwrap();
            response.status().as_u16()
        });
    }
    // Hits on another connection meanwhile.
    let other = reqwest::Client::new();
    let mut latencies = Vec::new();
    while latencies.len() < 100 {
        let started = std::time::Instant::now();
        let response = other.get(&hit).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.bytes().await.unwrap();
        latencies.push(started.elapsed());
    }
    let mut statuses = Vec::new();
    while let Some(status) = logins.join_next().await {
        statuses.push(status.unwrap());
    }
    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 429),
        "{statuses:?}"
    );
    // Each attempt counted as it started: no more than the limit were
    // checked (and refused with 401) before the rest got 429.
    let checked = statuses.iter().filter(|s| **s == 401).count();
    assert!(
        checked <= mirrorcache::access::limit::MAX_FAILURES as usize,
        "{checked} wrong passwords were checked"
    );
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100 - 1];
    assert!(
        p99 < std::time::Duration::from_millis(250),
        "hit p99 {p99:?}"
    );
    assert_eq!(private.total(), 0);
    running.shutdown().await;
}

#[tokio::test]
async fn unknown_and_private_names_get_the_same_answer_from_the_same_caller() {
    let proxy = AuthProxy::start().await;
    let dev = basic("dev", "dev-pass");
    let answer = |(status, headers, body): (u16, reqwest::header::HeaderMap, bytes::Bytes),
                  name: &str| {
        let body = String::from_utf8_lossy(&body).replace(name, "NAME");
        (status, headers.get("www-authenticate").cloned(), body)
    };
    for (caller, headers) in [
        ("anonymous", vec![]),
        ("dev", vec![("authorization", dev.as_str())]),
    ] {
        let private = answer(
            proxy.get("/secret/hidden-package/x", &headers).await,
            "secret",
        );
        let unknown = answer(
            proxy.get("/nosuchremote/hidden-package/x", &headers).await,
            "nosuchremote",
        );
        assert_eq!(private, unknown, "{caller}");
        let expected = if caller == "anonymous" { 401 } else { 404 };
        assert_eq!(private.0, expected, "{caller}");
    }
    assert_eq!(proxy.private.total(), 0);
    proxy.running.shutdown().await;
}
