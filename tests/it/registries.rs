//! Registries as real clients meet them: index documents whose links spell
//! the remote's hosts differently (explicit default ports, upper-case hosts),
//! the uncached API routes (npm audit and search, cargo's `api`, pypi's JSON
//! API), the read-only refusals, and go's checksum database.

use crate::support::proxy::get;
use crate::support::{Fault, MirrorServer, TestProxy};

async fn get_text(url: &str) -> (u16, String, String) {
    let (status, cache, body) = get(&reqwest::Client::new(), url).await;
    (
        status,
        cache,
        String::from_utf8_lossy(&body.unwrap()).into_owned(),
    )
}

/// A cargo `config.json` whose `dl` names a files mirror with an explicit
/// default port and an upper-case host, and whose `api` names the index
/// mirror in upper case: both are rewritten, and the crate is then fetched
/// (and cached) through the proxy.
#[tokio::test]
async fn config_json_links_are_rewritten_however_the_origin_is_spelled() {
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let files_port = files.addr.port();
    index.put_typed(
        "/config.json",
        format!(
            "{{\"dl\": \"HTTP://LocalHost:{files_port}/crates/{{crate}}/{{version}}/download\", \
              \"api\": \"HTTP://LOCALHOST:{}\", \"other\": \"https://static.example:443/crates/x\", \
              \"lookalike\": \"http://localhost:{files_port}/crates2/x\"}}",
            index.addr.port()
        ),
        "application/json",
    );
    files.put("/crates/mc/1.0.0/download", b"crate bytes".to_vec());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"http://localhost:{}\"]\n\
         files = [\"http://localhost:{files_port}/crates\", \"https://STATIC.example:443/crates\"]\n",
        index.addr.port(),
    ))
    .await;
    let (status, _, body) = get_text(&proxy.url("/cargo/config.json")).await;
    assert_eq!(status, 200);
    let config: serde_json::Value = serde_json::from_str(&body).unwrap();
    let base = &proxy.base;
    assert_eq!(
        config["dl"],
        format!("{base}/cargo/~files/{{crate}}/{{version}}/download")
    );
    assert_eq!(config["api"], format!("{base}/cargo"));
    // Any of the remote's hosts, `files` and `mirrors` alike.
    assert_eq!(config["other"], format!("{base}/cargo/~files/x"));
    // A path that only starts like the base is another path.
    assert_eq!(
        config["lookalike"],
        format!("http://localhost:{files_port}/crates2/x")
    );

    let dl = config["dl"]
        .as_str()
        .unwrap()
        .replace("{crate}", "mc")
        .replace("{version}", "1.0.0");
    let (status, cache, body) = get_text(&dl).await;
    assert_eq!(
        (status, cache.as_str(), body.as_str()),
        (200, "MISS", "crate bytes")
    );
    proxy.settle().await;
    files.stop();
    let (status, cache, _) = get_text(&dl).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(files.hits("/crates/mc/1.0.0/download"), 1);
    proxy.stop().await;
}

/// npm's audit POSTs (gzipped, as npm sends them) and its search GETs go to
/// the mirrors as sent — body bytes, `Content-Encoding`, query string — with
/// the remote's credentials and failover past a failing mirror, and are never
/// cached: each one goes upstream.
#[tokio::test]
async fn npm_audit_and_search_pass_through_with_failover_and_are_never_cached() {
    let (broken, good) = (MirrorServer::start().await, MirrorServer::start().await);
    broken.set_fault(Fault::Status(503));
    good.require_basic_auth("reader", "s3cret");
    let advisories = r#"{"left-pad":[{"id":1,"severity":"high","title":"test advisory"}]}"#;
    good.put_typed(
        "/-/npm/v1/security/advisories/bulk",
        advisories,
        "application/json",
    );
    good.put_typed(
        "/-/v1/search",
        r#"{"objects":[],"total":0}"#,
        "application/json",
    );
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\", \"{}\"]\n\
         username = \"reader\"\npassword = \"s3cret\"\n",
        broken.url(""),
        good.url("")
    ))
    .await;
    let client = reqwest::Client::new();
    // Not real gzip: the proxy must not look inside, only pass the bytes on.
    let body: Vec<u8> = (0u8..=255).cycle().take(100_000).collect();
    for round in 1..=2 {
        let response = client
            .post(proxy.url("/npm/-/npm/v1/security/advisories/bulk"))
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .header("authorization", "Bearer the-clients-own")
            .header("npm-command", "audit")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-cache-status"], "PASS");
        assert_eq!(response.text().await.unwrap(), advisories);
        let received = good.last_request().unwrap();
        assert_eq!(received.method, "POST");
        assert_eq!(received.body.as_ref(), body.as_slice());
        assert_eq!(received.headers["content-encoding"], "gzip");
        assert_eq!(received.headers["npm-command"], "audit");
        assert!(received.headers["authorization"]
            .to_str()
            .unwrap()
            .starts_with("Basic "));
        assert_eq!(good.hits("/-/npm/v1/security/advisories/bulk"), round);
    }
    assert!(broken.total() >= 1, "the first mirror was tried");

    for round in 1..=2 {
        let (status, cache, body) =
            get_text(&proxy.url("/npm/-/v1/search?text=left-pad&size=20")).await;
        assert_eq!((status, cache.as_str()), (200, "PASS"), "{body}");
        assert_eq!(
            good.last_request().unwrap().target,
            "/-/v1/search?text=left-pad&size=20"
        );
        assert_eq!(good.hits("/-/v1/search"), round);
    }
    // Search takes no POST; and a 404 from the API is its answer.
    let response = client
        .post(proxy.url("/npm/-/v1/search"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    let response = client
        .put(proxy.url("/npm/-/npm/v1/security/audits"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "GET, HEAD, POST");
    let (status, cache, _) = get_text(&proxy.url("/npm/-/npm/v1/security/audits/quick")).await;
    assert_eq!((status, cache.as_str()), (404, "PASS"));
    proxy.stop().await;
}

/// One npm remote in front of one fixture mirror.
async fn npm_remote() -> (MirrorServer, TestProxy) {
    let mirror = MirrorServer::start().await;
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n",
        mirror.url("")
    ))
    .await;
    (mirror, proxy)
}

/// A request body over 16 MiB gets 413 and never reaches a mirror; with every
/// mirror down a pass-through gets 502.
#[tokio::test]
async fn pass_through_bodies_are_limited_and_dead_mirrors_give_502() {
    let (mirror, proxy) = npm_remote().await;
    let client = reqwest::Client::new();
    let url = proxy.url("/npm/-/npm/v1/security/audits");
    let too_big = vec![b'x'; 16 * 1024 * 1024 + 1];
    let response = client.post(&url).body(too_big).send().await.unwrap();
    assert_eq!(response.status(), 413);
    // The same without Content-Length (chunked): cut at the limit.
    let chunks = futures_util::stream::iter(
        (0..17).map(|_| Ok::<Vec<u8>, std::io::Error>(vec![b'y'; 1024 * 1024])),
    );
    let response = client
        .post(&url)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(mirror.total(), 0);
    let exactly = vec![b'z'; 16 * 1024 * 1024];
    let response = client.post(&url).body(exactly).send().await.unwrap();
    assert_eq!(response.status(), 404, "the limit itself is allowed");
    assert_eq!(mirror.total(), 1);
    mirror.stop();
    let response = client.post(&url).body("{}").send().await.unwrap();
    assert_eq!(response.status(), 502);
    proxy.stop().await;
}

/// A client that announces a body over 16 MiB and waits to be told to send
/// it (`Expect: 100-continue`, as curl does) gets the 413 before sending a
/// byte of it; the connection's other requests are not needed for that.
#[tokio::test]
async fn a_too_large_body_waiting_for_100_continue_gets_413_before_it_is_sent() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (mirror, proxy) = npm_remote().await;
    let mut stream = tokio::net::TcpStream::connect(proxy.running.local_addr)
        .await
        .unwrap();
    let head = format!(
        "POST /npm/-/npm/v1/security/audits HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        16 * 1024 * 1024 + 1
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 512];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("answered without the body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(mirror.total(), 0);
    proxy.stop().await;
}

/// Publishing through the proxy is refused with a message npm and cargo show
/// (npm prints `error`, cargo `errors[].detail`); other methods stay 405.
#[tokio::test]
async fn publish_is_refused_as_a_read_only_cache() {
    let mirror = MirrorServer::start().await;
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{m}\"]\n\n\
         [[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"{m}\"]\nfiles = []\n",
        m = mirror.url("")
    ))
    .await;
    let client = reqwest::Client::new();
    for (method, path) in [
        (reqwest::Method::PUT, "/npm/left-pad"),
        (reqwest::Method::DELETE, "/npm/left-pad/-rev/1"),
        (reqwest::Method::PUT, "/cargo/api/v1/crates/new"),
        (
            reqwest::Method::DELETE,
            "/cargo/api/v1/crates/serde/1.0.0/yank",
        ),
        (reqwest::Method::POST, "/npm/left-pad"),
    ] {
        let response = client
            .request(method.clone(), proxy.url(path))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method} {path}");
        let body: serde_json::Value =
            serde_json::from_str(&response.text().await.unwrap()).unwrap();
        let message = body["error"].as_str().unwrap();
        assert!(message.contains("read-only cache"), "{message}");
        assert_eq!(body["errors"][0]["detail"], message);
    }
    let response = client
        .request(reqwest::Method::OPTIONS, proxy.url("/npm/left-pad"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(mirror.total(), 0);
    proxy.stop().await;
}

/// cargo's web API (`cargo search`): read-only GETs with their query, never
/// cached; crate downloads under `api/` stay cached artifacts.
#[tokio::test]
async fn cargo_api_routes_pass_through_and_downloads_are_cached() {
    let mirror = MirrorServer::start().await;
    mirror.put_typed(
        "/api/v1/crates",
        r#"{"crates":[{"name":"mc","max_version":"1.0.0","description":"x"}],"meta":{"total":1}}"#,
        "application/json",
    );
    mirror.put("/api/v1/crates/mc/1.0.0/download", b"crate".to_vec());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"{}\"]\nfiles = []\n",
        mirror.url("")
    ))
    .await;
    for round in 1..=2 {
        let (status, cache, body) =
            get_text(&proxy.url("/cargo/api/v1/crates?q=mc&per_page=10")).await;
        assert_eq!((status, cache.as_str()), (200, "PASS"), "{body}");
        assert!(body.contains("\"mc\""));
        assert_eq!(
            mirror.last_request().unwrap().target,
            "/api/v1/crates?q=mc&per_page=10"
        );
        assert_eq!(mirror.hits("/api/v1/crates"), round);
    }
    let (status, cache, _) = get_text(&proxy.url("/cargo/api/v1/crates/mc/1.0.0/download")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    proxy.settle().await;
    let (_, cache, _) = get_text(&proxy.url("/cargo/api/v1/crates/mc/1.0.0/download")).await;
    assert_eq!(cache, "HIT");
    proxy.stop().await;
}

/// pypi's JSON API is a document: its `urls` are rewritten to the proxy, and
/// it is revalidated once older than `revalidate_after`, like the simple pages.
#[tokio::test]
async fn pypi_json_api_is_a_rewritten_document_with_revalidation() {
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    index.put_typed(
        "/pypi/six/json",
        format!(
            r#"{{"info":{{"name":"six"}},"urls":[{{"url":"{}/packages/ab/six-1.0.tar.gz"}}]}}"#,
            files.url("")
        ),
        "application/json",
    );
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n\
         revalidate_after = \"0s\"\n",
        index.url(""),
        files.url("")
    ))
    .await;
    let url = proxy.url("/pypi/pypi/six/json");
    let (status, cache, body) = get_text(&url).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert!(
        body.contains(&format!(
            "\"url\":\"{}/pypi/~files/packages/ab/six-1.0.tar.gz\"",
            proxy.base
        )),
        "{body}"
    );
    proxy.settle().await;
    let (status, cache, _) = get_text(&url).await;
    assert_eq!((status, cache.as_str()), (200, "REVALIDATED"));
    assert_eq!(index.hits("/pypi/six/json"), 2);
    index.stop();
    let (status, cache, _) = get_text(&url).await;
    assert_eq!((status, cache.as_str()), (200, "STALE"));
    proxy.stop().await;
}

/// Go's checksum database through a go remote: `supported` is answered here,
/// lookups and tiles are fetched from the `sumdb` mirrors once and cached for
/// good, `latest` is revalidated; with `sumdb = []` the paths go to the index
/// mirrors as they are.
#[tokio::test]
async fn go_checksum_database_routes_and_caching() {
    let (origin, sumdb) = (MirrorServer::start().await, MirrorServer::start().await);
    let lookup = "/lookup/example.com/m@v1.0.0";
    sumdb.put_typed(lookup, "1\nexample.com/m v1.0.0 h1:x=\n", "text/plain");
    sumdb.put("/tile/8/0/000", b"tile".to_vec());
    sumdb.put_typed("/latest", "go.sum database tree\n1\n", "text/plain");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"go\"\nkind = \"go\"\nmirrors = [\"{}\"]\nsumdb = [\"{}\"]\n\
         revalidate_after = \"0s\"\n",
        origin.url(""),
        sumdb.url("")
    ))
    .await;
    let db = proxy.url("/go/sumdb/sum.golang.org");
    let (status, _, _) = get_text(&format!("{db}/supported")).await;
    assert_eq!(status, 200);
    assert_eq!(sumdb.total() + origin.total(), 0, "supported is ours");
    for path in [lookup, "/tile/8/0/000", "/latest"] {
        let (status, cache, _) = get_text(&format!("{db}{path}")).await;
        assert_eq!((status, cache.as_str()), (200, "MISS"), "{path}");
    }
    proxy.settle().await;
    for (path, expected) in [
        (lookup, "HIT"),
        ("/tile/8/0/000", "HIT"),
        ("/latest", "REVALIDATED"),
    ] {
        let (status, cache, _) = get_text(&format!("{db}{path}")).await;
        assert_eq!((status, cache.as_str()), (200, expected), "{path}");
    }
    assert_eq!((sumdb.hits(lookup), sumdb.hits("/latest")), (1, 2));
    assert_eq!(origin.total(), 0);
    sumdb.stop();
    let (_, cache, _) = get_text(&format!("{db}{lookup}")).await;
    assert_eq!(cache, "HIT");
    let (status, cache, _) = get_text(&format!("{db}/latest")).await;
    assert_eq!((status, cache.as_str()), (200, "STALE"));
    proxy.stop().await;

    // No `sumdb` mirrors: the index mirror is asked, `supported` included.
    origin.put("/sumdb/sum.golang.org/supported", Vec::new());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"go\"\nkind = \"go\"\nmirrors = [\"{}\"]\nsumdb = []\n",
        origin.url("")
    ))
    .await;
    let (status, _, _) = get_text(&proxy.url("/go/sumdb/sum.golang.org/supported")).await;
    assert_eq!(status, 200);
    assert_eq!(origin.hits("/sumdb/sum.golang.org/supported"), 1);
    proxy.stop().await;

    // Only a go remote has one.
    let text = "[[remote]]\nname = \"n\"\nkind = \"npm\"\nmirrors = [\"http://127.0.0.1:1\"]\nsumdb = [\"http://127.0.0.1:2\"]\n";
    let error = mirrorcache::config::Config::parse(text, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(error.contains("remote[0].sumdb"), "{error}");
}
