//! The OCI distribution API of an `oci` remote, against a registry faked by
//! a test mirror serving manifests and blobs at their `/v2/` paths: the
//! headers a pull needs, the OCI error JSON, read-only 405s, bad input,
//! and the two prefix-less addressing forms (`server.oci_root_remote`,
//! containerd's `?ns=`). The real registry and real clients are in
//! `tests/clients/oci.rs`.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::response::IntoResponse;
use tower::ServiceExt;

use crate::support::proxy::{config_text, start_text};
use crate::support::{sha256_hex, toml_urls, MirrorServer, TestProxy};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// A fake registry holding one image `app:1` (a manifest and one blob);
/// returns the manifest's and the blob's digests.
fn registry(mirror: &MirrorServer, name: &str) -> (String, String) {
    let blob = b"layer bytes".to_vec();
    let blob_digest = format!("sha256:{}", sha256_hex(&blob));
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"{MANIFEST}","layers":[{{"digest":"{blob_digest}","size":{}}}]}}"#,
        blob.len()
    );
    let digest = format!("sha256:{}", sha256_hex(manifest.as_bytes()));
    mirror.put(&format!("/v2/{name}/blobs/{blob_digest}"), blob);
    mirror.put_typed(
        &format!("/v2/{name}/manifests/1"),
        manifest.clone(),
        MANIFEST,
    );
    mirror.put_typed(
        &format!("/v2/{name}/manifests/{digest}"),
        manifest,
        MANIFEST,
    );
    mirror.put_typed(
        &format!("/v2/{name}/tags/list"),
        format!(r#"{{"name":"{name}","tags":["3","1","2"]}}"#),
        "application/json",
    );
    (digest, blob_digest)
}

/// Calls the router directly (`http::Uri` keeps a raw `..`).
async fn call(
    proxy: &std::sync::Arc<mirrorcache::proxy::Proxy>,
    method: Method,
    uri: &str,
    accept: Option<&str>,
) -> (StatusCode, axum::http::HeaderMap, bytes::Bytes) {
    let router = mirrorcache::http::router(proxy.clone());
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = router
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    (parts.status, parts.headers, body)
}

/// A `[[remote]]` of kind `oci` named `name` over `mirrors`.
fn oci_remote(name: &str, mirrors: &[&MirrorServer]) -> String {
    format!(
        "[[remote]]\nname = \"{name}\"\nkind = \"oci\"\nmirrors = {}\n",
        toml_urls(mirrors, "")
    )
}

/// The `errors[0].code` of an OCI error body.
fn code(body: &[u8]) -> String {
    let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    json["errors"][0]["code"].as_str().unwrap_or("").to_string()
}

fn header<'h>(headers: &'h axum::http::HeaderMap, name: &str) -> &'h str {
    headers.get(name).map_or("", |v| v.to_str().unwrap())
}

#[tokio::test]
async fn manifests_and_blobs_carry_their_digest_type_and_length_on_get_and_head() {
    let mirror = MirrorServer::start().await;
    let (digest, blob_digest) = registry(&mirror, "team/app");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"oci\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n",
        mirror.url("")
    ))
    .await;
    let p = &proxy.running.proxy;

    let (status, headers, body) = call(p, Method::GET, "/v2/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        header(&headers, "docker-distribution-api-version"),
        "registry/2.0"
    );
    assert_eq!(&body[..], b"{}");

    for (round, cache) in [(1, "MISS"), (2, "HIT")] {
        for reference in ["1", digest.as_str()] {
            let uri = format!("/v2/oci/team/app/manifests/{reference}");
            let (status, headers, body) = call(p, Method::GET, &uri, Some(MANIFEST)).await;
            assert_eq!(status, StatusCode::OK, "round {round} {uri}");
            assert_eq!(header(&headers, "docker-content-digest"), digest);
            assert_eq!(format!("sha256:{}", sha256_hex(&body)), digest);
            assert_eq!(header(&headers, "content-type"), MANIFEST);
            assert_eq!(header(&headers, "content-length"), body.len().to_string());
            assert_eq!(header(&headers, "vary"), "Accept");
            if reference == "1" {
                assert_eq!(header(&headers, "x-cache-status"), cache, "round {round}");
            }
            let (status, head, body) = call(p, Method::HEAD, &uri, Some(MANIFEST)).await;
            assert_eq!(status, StatusCode::OK);
            assert!(body.is_empty());
            assert_eq!(header(&head, "docker-content-digest"), digest);
            assert_eq!(
                header(&head, "content-length"),
                header(&headers, "content-length")
            );
        }
        let uri = format!("/v2/oci/team/app/blobs/{blob_digest}");
        let (status, headers, body) = call(p, Method::GET, &uri, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(&body[..], b"layer bytes");
        assert_eq!(header(&headers, "docker-content-digest"), blob_digest);
        proxy.settle().await;
    }
    // One upstream GET each: the tag, the digest, the blob.
    assert_eq!(mirror.hits("/v2/team/app/manifests/1"), 1);
    assert_eq!(mirror.hits(&format!("/v2/team/app/blobs/{blob_digest}")), 1);

    // Tag lists are paged here.
    let (status, headers, body) =
        call(p, Method::GET, "/v2/oci/team/app/tags/list?n=2", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], br#"{"name":"team/app","tags":["1","2"]}"#);
    assert_eq!(
        header(&headers, "link"),
        "</v2/oci/team/app/tags/list?n=2&last=2>; rel=\"next\""
    );
    let (_, _, body) = call(
        p,
        Method::GET,
        "/v2/oci/team/app/tags/list?n=2&last=2",
        None,
    )
    .await;
    assert_eq!(&body[..], br#"{"name":"team/app","tags":["3"]}"#);
    assert_eq!(mirror.hits("/v2/team/app/tags/list"), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn a_manifest_that_is_not_its_digest_is_502_and_not_served_again() {
    let mirror = MirrorServer::start().await;
    let wrong = format!("sha256:{}", "0".repeat(64));
    mirror.put_typed(&format!("/v2/app/manifests/{wrong}"), "{}", MANIFEST);
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"oci\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n",
        mirror.url("")
    ))
    .await;
    let p = &proxy.running.proxy;
    let uri = format!("/v2/oci/app/manifests/{wrong}");
    for _ in 0..2 {
        let (status, _, body) = call(p, Method::GET, &uri, None).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(
            !body.windows(2).any(|w| w == b"{}"),
            "the bad bytes were served"
        );
        proxy.settle().await;
    }
    proxy.stop().await;
}

#[tokio::test]
async fn bad_input_and_writes_get_4xx_in_the_oci_error_json_and_the_server_goes_on() {
    let mirror = MirrorServer::start().await;
    let (_, blob_digest) = registry(&mirror, "app");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"oci\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n",
        mirror.url("")
    ))
    .await;
    let p = &proxy.running.proxy;
    let missing = format!("sha256:{}", "1".repeat(64));
    for (method, uri, status, expected) in [
        (
            Method::GET,
            "/v2/oci/app/blobs/sha256:abc".to_string(),
            400,
            "DIGEST_INVALID",
        ),
        (
            Method::GET,
            "/v2/oci/app/blobs/md5:abc".to_string(),
            400,
            "DIGEST_INVALID",
        ),
        (
            Method::GET,
            "/v2/oci/app/manifests/sha256:zz".to_string(),
            400,
            "DIGEST_INVALID",
        ),
        (
            Method::GET,
            "/v2/oci/a/../app/manifests/1".to_string(),
            400,
            "NAME_INVALID",
        ),
        (
            Method::GET,
            "/v2/oci/a/%2e%2e/app/manifests/1".to_string(),
            400,
            "NAME_INVALID",
        ),
        (
            Method::GET,
            "/v2/oci/App/manifests/1".to_string(),
            400,
            "NAME_INVALID",
        ),
        (
            Method::GET,
            "/v2/oci/app/manifests/.bad".to_string(),
            400,
            "TAG_INVALID",
        ),
        (
            Method::GET,
            "/v2/oci/app/tags/list?n=99999999999999999999".to_string(),
            400,
            "PAGINATION_NUMBER_INVALID",
        ),
        (
            Method::GET,
            "/v2/oci/app/tags/list?n=100000".to_string(),
            400,
            "PAGINATION_NUMBER_INVALID",
        ),
        (
            Method::GET,
            "/v2/oci/_catalog".to_string(),
            404,
            "UNSUPPORTED",
        ),
        (
            Method::GET,
            "/v2/nowhere/app/manifests/1".to_string(),
            404,
            "NAME_UNKNOWN",
        ),
        (
            Method::GET,
            "/v2/oci/app/manifests/2".to_string(),
            404,
            "MANIFEST_UNKNOWN",
        ),
        (
            Method::GET,
            format!("/v2/oci/app/blobs/{missing}"),
            404,
            "BLOB_UNKNOWN",
        ),
        (
            Method::POST,
            "/v2/oci/app/blobs/uploads/".to_string(),
            405,
            "UNSUPPORTED",
        ),
        (
            Method::PUT,
            "/v2/oci/app/manifests/1".to_string(),
            405,
            "UNSUPPORTED",
        ),
        (
            Method::PATCH,
            "/v2/oci/app/blobs/uploads/x".to_string(),
            405,
            "UNSUPPORTED",
        ),
        (
            Method::DELETE,
            format!("/v2/oci/app/blobs/{blob_digest}"),
            405,
            "UNSUPPORTED",
        ),
    ] {
        let (got, headers, body) = call(p, method.clone(), &uri, None).await;
        assert_eq!(got.as_u16(), status, "{method} {uri}");
        assert_eq!(code(&body), expected, "{method} {uri}");
        assert_eq!(
            header(&headers, "docker-distribution-api-version"),
            "registry/2.0"
        );
    }
    // Nothing refused as bad input reached the registry.
    let asked: Vec<String> = mirror.requests().into_iter().map(|(p, _)| p).collect();
    assert!(
        asked
            .iter()
            .all(|p| p == "/v2/app/manifests/2" || p.contains(&missing)),
        "{asked:?}"
    );
    let (status, _, _) = call(p, Method::GET, "/v2/oci/app/manifests/1", None).await;
    assert_eq!(status, StatusCode::OK);
    proxy.stop().await;
}

#[tokio::test]
async fn the_root_remote_and_containerds_ns_pick_the_remote_without_a_prefix() {
    let (hub, other) = (MirrorServer::start().await, MirrorServer::start().await);
    let (hub_digest, _) = registry(&hub, "app");
    registry(&other, "app");
    // Two different images under one name, so the answer shows the remote.
    let other_manifest = format!(r#"{{"schemaVersion":2,"mediaType":"{MANIFEST}","layers":[]}}"#);
    other.put_typed("/v2/app/manifests/1", other_manifest.clone(), MANIFEST);
    let other_tag_digest = format!("sha256:{}", sha256_hex(other_manifest.as_bytes()));
    assert_ne!(hub_digest, other_tag_digest);
    let dir = tempfile::tempdir().unwrap();
    let remotes = format!(
        "[[remote]]\nname = \"hub\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n\n\
         [[remote]]\nname = \"other\"\nkind = \"oci\"\nregistry = \"registry.example:5000\"\nmirrors = [\"{}\"]\n",
        hub.url(""),
        other.url("")
    );
    let text = config_text(dir.path(), &remotes).replacen(
        "[server]\n",
        "[server]\noci_root_remote = \"hub\"\n",
        1,
    );
    let running = start_text(&text).await;
    let p = &running.proxy;
    let digest_of =
        |headers: &axum::http::HeaderMap| header(headers, "docker-content-digest").to_string();
    let (status, headers, _) = call(p, Method::GET, "/v2/app/manifests/1", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(digest_of(&headers), hub_digest);
    let (_, headers, _) = call(
        p,
        Method::GET,
        "/v2/app/manifests/1?ns=registry.example:5000",
        None,
    )
    .await;
    assert_eq!(digest_of(&headers), other_tag_digest);
    let (_, headers, _) = call(p, Method::GET, "/v2/other/app/manifests/1", None).await;
    assert_eq!(digest_of(&headers), other_tag_digest);
    // The root remote (no `registry` of its own) stands for Docker Hub, in
    // any of Hub's spellings.
    for hub_spelling in ["docker.io", "index.docker.io", "registry-1.docker.io"] {
        let path = format!("/v2/app/manifests/1?ns={hub_spelling}");
        let (_, headers, _) = call(p, Method::GET, &path, None).await;
        assert_eq!(digest_of(&headers), hub_digest, "{hub_spelling}");
    }
    // Another registry no remote serves is not answered from Docker Hub's:
    // containerd goes on to its next host.
    let (status, _, body) = call(p, Method::GET, "/v2/app/manifests/1?ns=ghcr.io", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8_lossy(&body).contains("NAME_UNKNOWN"));
    running.shutdown().await;
}

#[test]
fn oci_keys_are_checked() {
    let base = "[[remote]]\nname = \"r\"\nmirrors = [\"http://127.0.0.1:1\"]\n";
    for (text, key) in [
        (
            format!("{base}registry = \"docker.io\"\n"),
            "remote[0].registry",
        ),
        (
            format!("[server]\noci_root_remote = \"r\"\n{base}"),
            "server.oci_root_remote",
        ),
        (
            format!("{base}kind = \"oci\"\nregistry = \"https://docker.io/x\"\n"),
            "remote[0].registry",
        ),
        (
            format!("{base}kind = \"oci\"\nbearer_token = \"t\"\n"),
            "remote[0].bearer_token",
        ),
        (base.replace("\"r\"", "\"v2\""), "remote[0].name"),
    ] {
        let error = mirrorcache::config::Config::parse(&text, "t.toml").unwrap_err();
        assert_eq!(error.key, key, "{text}");
    }
    let ok = format!(
        "[server]\noci_root_remote = \"r\"\n{base}kind = \"oci\"\nregistry = \"Docker.io\"\n"
    );
    let config = mirrorcache::config::Config::parse(&ok, "t.toml").unwrap();
    assert_eq!(config.remotes[0].registry.as_deref(), Some("docker.io"));
}

#[tokio::test]
async fn a_blob_that_is_not_its_digest_is_refused_and_the_next_mirror_sends_it() {
    let (bad, good) = (MirrorServer::start().await, MirrorServer::start().await);
    let layer = b"the real layer".to_vec();
    let claimed = format!("sha256:{}", sha256_hex(&layer));
    let path = format!("/v2/app/blobs/{claimed}");
    bad.put(&path, b"some other bytes".to_vec());
    good.put(&path, layer.clone());
    let proxy = TestProxy::start(&format!(
        "{}{}",
        oci_remote("both", &[&bad, &good]),
        oci_remote("bad", &[&bad])
    ))
    .await;
    let p = &proxy.running.proxy;
    let (status, headers, body) = call(
        p,
        Method::GET,
        &format!("/v2/both/app/blobs/{claimed}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], &layer[..]);
    assert_eq!(header(&headers, "docker-content-digest"), claimed);
    assert_eq!((bad.hits(&path), good.hits(&path)), (1, 1));
    proxy.settle().await;
    let (_, headers, _) = call(
        p,
        Method::GET,
        &format!("/v2/both/app/blobs/{claimed}"),
        None,
    )
    .await;
    assert_eq!(header(&headers, "x-cache-status"), "HIT");

    // With no good mirror: a 502 naming both digests, and nothing cached.
    for _ in 0..2 {
        let (status, _, body) = call(
            p,
            Method::GET,
            &format!("/v2/bad/app/blobs/{claimed}"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(code(&body), "DIGEST_INVALID");
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.contains(&claimed) && text.contains(&sha256_hex(b"some other bytes")),
            "{text}"
        );
        proxy.settle().await;
    }
    assert_eq!(bad.hits(&path), 3, "never cached");
    proxy.stop().await;
}

/// A layer of a few MiB streams to its readers while it is written (each
/// batch while the next arrives) and is checked before it is kept: a
/// client that joins when 2 MiB have come (the mirror holds the rest until
/// then) gets every byte, one upstream request in all; a tampered one
/// reaches its reader as a broken transfer, leaves no file, and the next
/// request gets the next mirror's bytes.
#[tokio::test]
async fn a_large_layer_streams_to_every_reader_while_it_is_written_and_checked() {
    use crate::support::mirror::Fault;
    use std::time::Duration;
    let (bad, good) = (MirrorServer::start().await, MirrorServer::start().await);
    let layer: Vec<u8> = (0..3 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let claimed = format!("sha256:{}", sha256_hex(&layer));
    let path = format!("/v2/app/blobs/{claimed}");
    let mut other = layer.clone();
    other[2 * 1024 * 1024] ^= 1;
    bad.put(&path, other);
    good.put(&path, layer.clone());
    // 64 KiB pieces 2 ms apart: about 100 ms for the whole layer.
    bad.set_fault(Fault::SlowBody(Duration::from_millis(2)));
    good.set_fault(Fault::StallAfter(2 * 1024 * 1024));
    let proxy = TestProxy::start(&format!(
        "{}{}",
        oci_remote("good", &[&good]),
        oci_remote("both", &[&bad, &good])
    ))
    .await;
    let p = &proxy.running.proxy;
    let body = |remote: &'static str| {
        let uri = format!("/v2/{remote}/app/blobs/{claimed}");
        async move {
            let router = mirrorcache::http::router(p.clone());
            let request = Request::get(uri).body(Body::empty()).unwrap();
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX).await;
            (status, body.map(|b| sha256_hex(&b)).ok())
        }
    };
    let halfway = async {
        while good.stalled() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let release = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            good.release();
        };
        tokio::join!(body("good"), release).0
    };
    let (first, halfway) = tokio::join!(body("good"), halfway);
    let whole = Some(sha256_hex(&layer));
    assert_eq!(first, (StatusCode::OK, whole.clone()));
    assert_eq!(halfway, (StatusCode::OK, whole.clone()));
    assert_eq!(good.hits(&path), 1, "one upstream request for both");
    proxy.settle().await;

    // The tampered mirror first: its bytes stream, the last one waits for
    // the check, and the transfer breaks; nothing of them is kept.
    let (status, tampered) = body("both").await;
    assert_eq!((status, tampered), (StatusCode::OK, None));
    proxy.settle().await;
    assert_eq!(proxy.temp_files(), 0, "no file left of the tampered copy");
    assert_eq!(body("both").await, (StatusCode::OK, whole));
    assert_eq!((bad.hits(&path), good.hits(&path)), (1, 2));
    proxy.stop().await;
}

/// A registry that wants a bearer token from its own realm and redirects
/// blob GETs to a storage host on another port: the proxy gets a token, uses
/// it for the registry only, follows the redirect without it, checks the
/// digest, and never forwards the client's `Authorization`.
#[tokio::test]
async fn tokens_are_fetched_on_a_challenge_and_blob_redirects_go_anywhere_without_them() {
    use std::sync::{Arc, Mutex};
    let storage = MirrorServer::start().await;
    let blob = b"layer behind a CDN".to_vec();
    let digest = format!("sha256:{}", sha256_hex(&blob));
    storage.put("/cdn/layer", blob.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Authorization headers the registry saw on blob requests, and token requests.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let tokens: Arc<Mutex<Vec<String>>> = Arc::default();
    let (seen_in, tokens_in) = (seen.clone(), tokens.clone());
    let cdn = storage.url("/cdn/layer");
    let app = axum::Router::new()
        .route(
            "/token",
            axum::routing::get(move |uri: axum::http::Uri| {
                let tokens = tokens_in.clone();
                async move {
                    tokens.lock().unwrap().push(uri.query().unwrap_or("").to_string());
                    r#"{"token":"t0k","expires_in":300}"#
                }
            }),
        )
        .route(
            "/v2/{*rest}",
            axum::routing::get(move |headers: axum::http::HeaderMap| {
                let (seen, cdn) = (seen_in.clone(), cdn.clone());
                async move {
                    let auth = headers
                        .get("authorization")
                        .map_or("", |v| v.to_str().unwrap())
                        .to_string();
                    seen.lock().unwrap().push(auth.clone());
                    if auth != "Bearer t0k" {
                        let challenge = format!(
                            "Bearer realm=\"http://{addr}/token\",service=\"reg\",scope=\"repository:app:pull\""
                        );
                        return (StatusCode::UNAUTHORIZED, [("www-authenticate", challenge)])
                            .into_response();
                    }
                    axum::response::Redirect::temporary(&cdn).into_response()
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"oci\"\nkind = \"oci\"\nmirrors = [\"http://{addr}\"]\n"
    ))
    .await;
    let client = reqwest::Client::new();
    let url = proxy.url(&format!("/v2/oci/app/blobs/{digest}"));
    let response = client
        .get(&url)
        .bearer_auth("client-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(&response.bytes().await.unwrap()[..], &blob[..]);
    assert_eq!(*seen.lock().unwrap(), ["", "Bearer t0k"]);
    assert_eq!(
        *tokens.lock().unwrap(),
        ["service=reg&scope=repository%3Aapp%3Apull"]
    );
    let at_storage = storage.last_request().unwrap();
    assert!(
        !at_storage.headers.contains_key("authorization"),
        "credentials followed the redirect"
    );
    // A second blob of the same repository reuses the token.
    let other = format!("sha256:{}", "2".repeat(64));
    let _ = client
        .get(proxy.url(&format!("/v2/oci/app/blobs/{other}")))
        .send()
        .await;
    assert_eq!(seen.lock().unwrap().last().unwrap(), "Bearer t0k");
    assert_eq!(tokens.lock().unwrap().len(), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn a_manifest_pulled_by_tag_is_pulled_by_digest_from_the_cache_also_offline() {
    let mirror = MirrorServer::start().await;
    let (digest, _) = registry(&mirror, "team/app");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"oci\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n",
        mirror.url("")
    ))
    .await;
    let p = &proxy.running.proxy;
    let by_tag = "/v2/oci/team/app/manifests/1";
    let by_digest = format!("/v2/oci/team/app/manifests/{digest}");
    let (status, headers, tag_body) = call(p, Method::GET, by_tag, Some(MANIFEST)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "x-cache-status"), "MISS");
    // Whatever the digest request accepts: the bytes are the digest's.
    let docker = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json";
    let (status, headers, body) = call(p, Method::GET, &by_digest, Some(docker)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "x-cache-status"), "HIT");
    assert_eq!(header(&headers, "docker-content-digest"), digest);
    assert_eq!(header(&headers, "content-type"), MANIFEST);
    assert_eq!(body, tag_body);
    assert_eq!(mirror.hits("/v2/team/app/manifests/1"), 1);
    assert_eq!(mirror.hits(&format!("/v2/team/app/manifests/{digest}")), 0);

    // With the registry gone, both still answer, GET and HEAD.
    mirror.stop();
    for uri in [by_tag, by_digest.as_str()] {
        let (status, headers, body) = call(p, Method::GET, uri, Some(MANIFEST)).await;
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert_eq!(format!("sha256:{}", sha256_hex(&body)), digest, "{uri}");
        let (status, headers_head, _) = call(p, Method::HEAD, uri, Some(MANIFEST)).await;
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert_eq!(header(&headers_head, "docker-content-digest"), digest);
        assert_eq!(header(&headers, "docker-content-digest"), digest);
    }
    proxy.stop().await;
}

#[tokio::test]
async fn one_blob_fill_serves_the_layer_under_every_repository_name() {
    let mirror = MirrorServer::start().await;
    let (_, blob_digest) = registry(&mirror, "team/app");
    registry(&mirror, "other/base");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"oci\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n",
        mirror.url("")
    ))
    .await;
    let p = &proxy.running.proxy;
    let uri = |name: &str| format!("/v2/oci/{name}/blobs/{blob_digest}");
    // At once, and then one after the other.
    let (team, other) = (uri("team/app"), uri("other/base"));
    let (a, b) = tokio::join!(
        call(p, Method::GET, &team, None),
        call(p, Method::GET, &other, None)
    );
    proxy.settle().await;
    let (c, d) = (
        call(p, Method::GET, &uri("team/app"), None).await,
        call(p, Method::GET, &uri("other/base"), None).await,
    );
    for (status, headers, body) in [a, b, c, d] {
        assert_eq!(status, StatusCode::OK);
        assert_eq!(&body[..], b"layer bytes");
        assert_eq!(header(&headers, "docker-content-digest"), blob_digest);
    }
    let fetched = mirror.hits(&format!("/v2/team/app/blobs/{blob_digest}"))
        + mirror.hits(&format!("/v2/other/base/blobs/{blob_digest}"));
    assert_eq!(fetched, 1, "{:?}", mirror.requests());

    // A name that does not have it upstream is no 404 remembered for the
    // name that does.
    let missing = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let (status, _, _) = call(
        p,
        Method::GET,
        &format!("/v2/oci/nobody/blobs/{missing}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    proxy.settle().await;
    mirror.put(&format!("/v2/team/app/blobs/{missing}"), b"late".to_vec());
    let (status, _, _) = call(
        p,
        Method::GET,
        &format!("/v2/oci/team/app/blobs/{missing}"),
        None,
    )
    .await;
    // The bytes are not that digest: refused, but asked for upstream.
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{:?}", mirror.requests());
    assert_eq!(mirror.hits(&format!("/v2/team/app/blobs/{missing}")), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn referrers_are_passed_through_cached_and_filtered_by_artifact_type() {
    let mirror = MirrorServer::start().await;
    let (digest, _) = registry(&mirror, "team/app");
    let index = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"artifactType":"application/vnd.dev.cosign.artifact.sig.v1+json","digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111"},{"artifactType":"application/spdx+json","digest":"sha256:2222222222222222222222222222222222222222222222222222222222222222"}]}"#;
    let upstream = format!("/v2/team/app/referrers/{digest}");
    mirror.put_typed(&upstream, index, "application/vnd.oci.image.index.v1+json");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"oci\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n",
        mirror.url("")
    ))
    .await;
    let p = &proxy.running.proxy;
    let uri = format!("/v2/oci/team/app/referrers/{digest}");
    for cache in ["MISS", "HIT"] {
        let (status, headers, body) = call(p, Method::GET, &uri, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(header(&headers, "x-cache-status"), cache);
        assert_eq!(&body[..], index.as_bytes());
        assert_eq!(
            header(&headers, "content-type"),
            "application/vnd.oci.image.index.v1+json"
        );
        proxy.settle().await;
    }
    let (status, headers, body) = call(
        p,
        Method::GET,
        &format!("{uri}?artifactType=application/spdx%2Bjson"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "oci-filters-applied"), "artifactType");
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["manifests"].as_array().unwrap().len(), 1);
    assert_eq!(
        json["manifests"][0]["artifactType"],
        "application/spdx+json"
    );
    assert_eq!(mirror.hits(&upstream), 1);
    let (status, _, body) = call(
        p,
        Method::GET,
        "/v2/oci/team/app/referrers/sha256:9999999999999999999999999999999999999999999999999999999999999999",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(code(&body), "MANIFEST_UNKNOWN");
    proxy.stop().await;
}

#[tokio::test]
async fn concurrent_revalidations_of_one_tag_send_one_head() {
    let mirror = MirrorServer::start().await;
    let (digest, _) = registry(&mirror, "team/app");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"oci\"\nkind = \"oci\"\nmirrors = [\"{}\"]\nrevalidate_after = \"0s\"\n",
        mirror.url("")
    ))
    .await;
    let p = &proxy.running.proxy;
    let uri = "/v2/oci/team/app/manifests/1";
    let (status, _, _) = call(p, Method::GET, uri, Some(MANIFEST)).await;
    assert_eq!(status, StatusCode::OK);
    proxy.settle().await;
    // Every request is past revalidate_after; the HEAD takes a while.
    mirror.set_fault(crate::support::Fault::SlowFirstByte(
        std::time::Duration::from_millis(300),
    ));
    let answers =
        futures_util::future::join_all((0..10).map(|_| call(p, Method::GET, uri, Some(MANIFEST))))
            .await;
    for (status, headers, _) in &answers {
        assert_eq!(*status, StatusCode::OK);
        assert_eq!(header(headers, "x-cache-status"), "REVALIDATED");
        assert_eq!(header(headers, "docker-content-digest"), digest);
    }
    // One GET (the fill), one HEAD for the ten.
    assert_eq!(mirror.hits("/v2/team/app/manifests/1"), 2);
    proxy.stop().await;
}
