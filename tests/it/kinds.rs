//! Package-manager kinds: URL rewriting of index documents (per Host, per
//! public_url), content-negotiated variants, the document size cap, and the
//! files host behind `~files/`.

use crate::support::proxy::config_text;
use crate::support::{MirrorServer, TestProxy};

async fn fetch(
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String, reqwest::header::HeaderMap) {
    let client = reqwest::Client::new();
    let mut request = client.get(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let cache = response
        .headers()
        .get("x-cache-status")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let headers = response.headers().clone();
    (status, cache, response.text().await.unwrap(), headers)
}

#[tokio::test]
async fn pypi_pages_are_rewritten_for_the_host_the_client_used() {
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let page = format!(
        "<a href=\"{f}/packages/ab/six-1.0-py3-none-any.whl#sha256=00ff\" data-dist-info-metadata=\"sha256=11\">six</a>\n\
         <a href=\"https://elsewhere.example/six.tar.gz\">other host</a>\n<a href=\"{f}.evil.example/x\">lookalike</a>",
        f = files.url("")
    );
    index.put_typed("/simple/six/", page, "text/html");
    files.put(
        "/packages/ab/six-1.0-py3-none-any.whl",
        b"wheel bytes".to_vec(),
    );
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n",
        index.url(""),
        files.url("")
    ))
    .await;
    let url = proxy.url("/pypi/simple/six/");

    let (status, cache, body, headers) = fetch(&url, &[("host", "cache.internal:8080")]).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert!(body.contains("href=\"http://cache.internal:8080/pypi/~files/packages/ab/six-1.0-py3-none-any.whl#sha256=00ff\" data-dist-info-metadata=\"sha256=11\""), "{body}");
    assert!(
        body.contains("https://elsewhere.example/six.tar.gz"),
        "{body}"
    );
    assert!(
        body.contains(&format!("{}.evil.example/x", files.url(""))),
        "{body}"
    );
    assert_eq!(headers["content-type"], "text/html");
    assert_eq!(headers["content-length"], body.len().to_string().as_str());
    proxy.settle().await;

    // The same cached page, for a client that used another name: its own base.
    let (_, cache, body, headers) = fetch(&url, &[("host", "10.1.2.3:9")]).await;
    assert_eq!(cache, "HIT");
    assert!(
        body.contains("href=\"http://10.1.2.3:9/pypi/~files/packages/"),
        "{body}"
    );
    // And a 304 only for the same base's validator.
    let etag = headers["etag"].to_str().unwrap().to_string();
    assert_eq!(
        fetch(&url, &[("host", "10.1.2.3:9"), ("if-none-match", &etag)])
            .await
            .0,
        304
    );
    assert_eq!(
        fetch(
            &url,
            &[("host", "cache.internal:8080"), ("if-none-match", &etag)]
        )
        .await
        .0,
        200
    );
    assert_eq!(index.hits("/simple/six/"), 1);

    // The rewritten link works: the files host, through the proxy, immutable.
    let (status, _, body, _) = fetch(
        &proxy.url("/pypi/~files/packages/ab/six-1.0-py3-none-any.whl"),
        &[],
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "wheel bytes"));
    proxy.settle().await;
    files.stop();
    let (status, cache, _, _) = fetch(
        &proxy.url("/pypi/~files/packages/ab/six-1.0-py3-none-any.whl"),
        &[],
    )
    .await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    proxy.stop().await;
}

#[tokio::test]
async fn public_url_wins_over_host_and_json_pages_are_a_separate_variant() {
    let index = MirrorServer::start().await;
    index.put_typed(
        "/simple/six/",
        format!("<a href=\"{}/packages/six.whl\">six</a>", index.url("")),
        "text/html",
    );
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &format!(
            "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = []\n",
            index.url("")
        ),
    )
    .replace(
        "[server]\n",
        "[server]\npublic_url = \"https://cache.example.org/\"\n",
    );
    let running = crate::support::proxy::start_text(&text).await;
    let url = format!("http://{}/pypi/simple/six/", running.local_addr);
    let (_, _, body, _) = fetch(&url, &[("host", "ignored:1")]).await;
    assert!(
        body.contains("href=\"https://cache.example.org/pypi/packages/six.whl\""),
        "{body}"
    );
    running.proxy.fills.wait_idle().await;
    // The JSON variant is cached apart: one more upstream request.
    fetch(&url, &[("accept", "application/vnd.pypi.simple.v1+json")]).await;
    running.proxy.fills.wait_idle().await;
    assert_eq!(
        fetch(&url, &[("accept", "application/vnd.pypi.simple.v1+json")])
            .await
            .1,
        "HIT"
    );
    assert_eq!(fetch(&url, &[]).await.1, "HIT");
    assert_eq!(index.hits("/simple/six/"), 2);
    running.shutdown().await;
}

#[tokio::test]
async fn npm_tarballs_and_cargo_dl_point_through_the_proxy() {
    let registry = MirrorServer::start().await;
    let packument = format!(
        "{{\"name\":\"@s/p\",\"versions\":{{\"1.0.0\":{{\"dist\":{{\"tarball\":\"{}/@s/p/-/p-1.0.0.tgz\"}}}}}}}}",
        registry.url("")
    );
    registry.put_typed("/@s%2Fp", packument, "application/json");
    registry.put_typed(
        "/config.json",
        format!(
            "{{\"dl\":\"{}/api/v1/crates\",\"api\":\"{}\"}}",
            registry.url(""),
            registry.url("")
        ),
        "application/json",
    );
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{u}\"]\n\n[[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"{u}\"]\nfiles = []\n",
        u = registry.url("")
    ))
    .await;
    let base = proxy.base.clone();
    let (_, _, body, _) = fetch(&proxy.url("/npm/@s%2fp"), &[]).await;
    assert!(
        body.contains(&format!("\"tarball\":\"{base}/npm/@s/p/-/p-1.0.0.tgz\"")),
        "{body}"
    );
    let (_, _, body, _) = fetch(&proxy.url("/cargo/config.json"), &[]).await;
    assert_eq!(
        body,
        format!("{{\"dl\":\"{base}/cargo/api/v1/crates\",\"api\":\"{base}/cargo\"}}")
    );
    proxy.stop().await;
}

#[tokio::test]
async fn documents_over_max_document_size_are_502() {
    let registry = MirrorServer::start().await;
    registry.put_typed(
        "/big",
        format!("{{\"x\":\"{}\"}}", "a".repeat(2000)),
        "application/json",
    );
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\nmax_document_size = \"1KB\"\n",
        registry.url("")
    ))
    .await;
    assert_eq!(fetch(&proxy.url("/npm/big"), &[]).await.0, 502);
    proxy.stop().await;
}
