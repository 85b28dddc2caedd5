//! Bad requests get a 4xx and the server goes on. These call the router
//! directly: `http::Uri` keeps the raw path, where an HTTP client would
//! normalise `..` away before sending.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use tower::ServiceExt;

use crate::support::{MirrorServer, TestProxy};

async fn status(proxy: &TestProxy, method: Method, uri: &str) -> StatusCode {
    let router = mirrorcache::http::router(proxy.running.proxy.clone());
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    router.oneshot(request).await.unwrap().status()
}

#[tokio::test]
async fn traversal_and_junk_paths_are_400_and_never_reach_a_mirror() {
    let mirror = MirrorServer::start().await;
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\n",
        mirror.url("/m")
    ))
    .await;
    let long = format!("/r/{}", "a".repeat(3000));
    for uri in [
        "/r/../secret",
        "/r/a/%2e%2e/secret",
        "/r/a/%2E%2E/secret",
        "/r/a/.%2e/secret",
        "/r/a/%252e%252e/secret",
        "/r/a/..%2fsecret",
        "/r/a%5c..%5csecret",
        "/r/a%00b",
        "/r/a%0d%0aX-Injected:%20yes",
        // What a servlet container upstream reads as `..` or `.`.
        "/r/a/..;/secret",
        "/r/a/..;x=1/secret",
        "/r/a/%2e%2e;/secret",
        "/r/a/.;/secret",
        "/r/",
        long.as_str(),
    ] {
        assert_eq!(
            status(&proxy, Method::GET, uri).await,
            StatusCode::BAD_REQUEST,
            "{uri}"
        );
    }
    assert_eq!(mirror.total(), 0);
    // And the server goes on.
    assert_eq!(
        status(&proxy, Method::GET, "/-/health").await,
        StatusCode::OK
    );
    proxy.stop().await;
}

#[tokio::test]
async fn unknown_remote_is_404_and_other_methods_are_405() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/x", b"x".to_vec());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\n",
        mirror.url("/m")
    ))
    .await;
    assert_eq!(
        status(&proxy, Method::GET, "/nope/x").await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status(&proxy, Method::POST, "/r/x").await,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        status(&proxy, Method::DELETE, "/r/x").await,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(status(&proxy, Method::GET, "/r/x").await, StatusCode::OK);
    assert_eq!(
        status(&proxy, Method::GET, "/-/health").await,
        StatusCode::OK
    );

    // A bad path over a real socket: a 400, then the same connection's server answers again.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(proxy.running.local_addr)
        .await
        .unwrap();
    stream
        .write_all(b"GET /r/../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    let health = reqwest::get(proxy.url("/-/health")).await.unwrap();
    assert_eq!(health.status(), 200);
    proxy.stop().await;
}

#[tokio::test]
async fn an_oci_remote_is_asked_for_pull_endpoints_only() {
    let mirror = MirrorServer::start().await;
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"o\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n",
        mirror.url("/m")
    ))
    .await;
    for uri in [
        "/o/v2/_catalog",
        "/o/v2/library/alpine/blobs/uploads/",
        "/o/anything/else",
        "/o/v2/library/alpine",
    ] {
        assert_eq!(
            status(&proxy, Method::GET, uri).await,
            StatusCode::NOT_FOUND,
            "{uri}"
        );
    }
    assert_eq!(mirror.total(), 0);
    // A pull endpoint does go upstream.
    status(&proxy, Method::GET, "/o/v2/library/alpine/tags/list").await;
    assert!(mirror.total() > 0);
    proxy.stop().await;
}
