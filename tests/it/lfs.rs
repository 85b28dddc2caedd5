//! The `lfs` kind against a fixture Git host on 127.0.0.1 (`LfsHost`): its
//! batch API behind Basic auth, whose download actions point at a second
//! host with a per-object signed header, as git-lfs's `tq/transfer.go` and
//! `tq/basic_download.go` read them. The batch is forwarded with the
//! client's credentials and answered with proxy URLs; each object is
//! fetched once, checked against its oid and served from the store; a
//! tampered object is fetched from the next mirror, or refused and not
//! cached; a client the Git host does not admit gets nothing cached for another; an
//! offline batch serves an identity seen before, asks a client without
//! credentials for them and refuses credentials never seen.

use reqwest::header::AUTHORIZATION;
use serde_json::{json, Value};

use crate::support::lfs_host::LFS_JSON;
use crate::support::proxy::{cache_status, config_text, start_text};
use crate::support::{sha256_hex, tampered, test_bytes, LfsHost};

const ENDPOINT: &str = "team/assets.git/info/lfs";
const ALICE: &str = "Basic YWxpY2U6YWxpY2Utc2VjcmV0"; // alice:alice-secret
const BOB: &str = "Basic Ym9iOmJvYi1zZWNyZXQ="; // bob:bob-secret

/// A host where alice (not bob) may read `ENDPOINT`, holding `objects`.
async fn host(objects: &[Vec<u8>]) -> (LfsHost, Vec<String>) {
    let host = LfsHost::start(None).await;
    host.add_user("alice", "alice-secret");
    host.add_user("bob", "bob-secret");
    host.allow(ENDPOINT, "alice");
    let oids = objects.iter().map(|o| host.put_object(o.clone())).collect();
    (host, oids)
}

fn remote(name: &str, host: &LfsHost, extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"{name}\"\nkind = \"lfs\"\nmirrors = [\"{}\"]\n{extra}\n",
        host.url()
    )
}

/// A download batch for `oids` (sizes as given) with `auth`: status, cache
/// status and the answer's JSON (or text).
async fn batch(base: &str, oids: &[(&str, usize)], auth: Option<&str>) -> (u16, String, Value) {
    let url = format!("{base}/{ENDPOINT}/objects/batch");
    let (status, cache, value, _) = send_batch(&url, "download", oids, auth).await;
    (status, cache, value)
}

/// A batch of `operation` for `oids` to `url` with `auth`: status, cache
/// status, the answer's JSON (or text) and its headers.
async fn send_batch(
    url: &str,
    operation: &str,
    oids: &[(&str, usize)],
    auth: Option<&str>,
) -> (u16, String, Value, reqwest::header::HeaderMap) {
    let objects: Vec<Value> = oids
        .iter()
        .map(|(oid, size)| json!({"oid": oid, "size": size}))
        .collect();
    let body = json!({"operation": operation, "transfers": ["basic"], "objects": objects});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", LFS_JSON)
        .header("content-type", LFS_JSON)
        .body(body.to_string());
    if let Some(auth) = auth {
        request = request.header(AUTHORIZATION, auth);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let cache = cache_status(&response);
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, cache, value, headers)
}

/// GETs an object as git-lfs does: the action's `href` with its `header`s.
async fn download(object: &Value) -> (u16, Vec<u8>) {
    let action = &object["actions"]["download"];
    let href = action["href"].as_str();
    let mut request = reqwest::Client::new().get(href.unwrap_or_else(|| panic!("{object}")));
    for (name, value) in action["header"].as_object().unwrap() {
        request = request.header(name.as_str(), value.as_str().unwrap());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn objects_are_fetched_once_checked_and_served_to_later_batches_without_upstream() {
    let objects = [
        test_bytes(1_000, 1),
        test_bytes(70_000, 2),
        test_bytes(3 << 20, 3),
    ];
    let (host, oids) = host(&objects).await;
    let dir = tempfile::tempdir().unwrap();
    let config = remote("lfs", &host, "") + &remote("strict", &host, "lfs_grant_ttl = \"0s\"");
    let output = crate::support::binary::check(&config);
    assert!(output.status.success(), "{output:?}");
    let running = start_text(&config_text(dir.path(), &config)).await;
    let base = format!("http://{}/lfs", running.local_addr);
    let wanted: Vec<(&str, usize)> = oids
        .iter()
        .map(String::as_str)
        .zip([1_000, 70_000, 3 << 20])
        .collect();

    // Cold: the batch goes upstream with alice's credentials; the answer
    // points at the proxy and shows nothing of the upstream's actions.
    let (status, cache, answer) = batch(&base, &wanted, Some(ALICE)).await;
    assert_eq!((status, cache.as_str()), (200, "PASS"), "{answer}");
    let text = answer.to_string();
    assert!(
        !text.contains("RemoteAuth") && !text.contains(&host.objects_addr.to_string()),
        "{text}"
    );
    for (object, bytes) in answer["objects"].as_array().unwrap().iter().zip(&objects) {
        let href = object["actions"]["download"]["href"].as_str().unwrap();
        assert!(
            href.starts_with(&format!("{base}/{ENDPOINT}/objects/")),
            "{href}"
        );
        let (status, body) = download(object).await;
        assert_eq!(status, 200);
        assert_eq!(sha256_hex(&body), sha256_hex(bytes));
    }
    running.proxy.fills.wait_idle().await;
    assert_eq!(host.batches(), 1);
    for oid in &oids {
        assert_eq!(host.downloads(oid), 1);
    }
    assert_eq!(host.unsigned(), 0);

    // Warm: answered from the cache, no batch and no download upstream.
    let (status, cache, answer) = batch(&base, &wanted, Some(ALICE)).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"), "{answer}");
    for object in answer["objects"].as_array().unwrap() {
        assert_eq!(download(object).await.0, 200);
    }
    assert_eq!((host.batches(), host.total_downloads()), (1, 3));

    // An object's URL without its grant, or with another object's, is 404.
    let first = answer["objects"][0].clone();
    let mut other = answer["objects"][1].clone();
    other["actions"]["download"]["header"] = first["actions"]["download"]["header"].clone();
    assert_eq!(download(&other).await.0, 404);
    let mut bare = first.clone();
    bare["actions"]["download"]["header"] = json!({});
    assert_eq!(download(&bare).await.0, 404);

    // Offline: an identity the host said yes to gets its cached objects
    // (asked upstream first: `lfs_grant_ttl = "0s"`); one never seen, 503.
    let strict = format!("http://{}/strict", running.local_addr);
    let (status, _, _) = batch(&strict, &wanted, Some(ALICE)).await;
    assert_eq!(status, 200);
    for object in batch(&strict, &wanted, Some(ALICE)).await.2["objects"]
        .as_array()
        .unwrap()
    {
        assert_eq!(download(object).await.0, 200);
    }
    assert_eq!(
        host.total_downloads(),
        6,
        "the strict remote caches its own copies"
    );
    running.proxy.fills.wait_idle().await;
    host.stop();
    let (status, cache, answer) = batch(&strict, &wanted, Some(ALICE)).await;
    assert_eq!((status, cache.as_str()), (200, "STALE"), "{answer}");
    let (status, body) = download(&answer["objects"][2]).await;
    assert_eq!((status, sha256_hex(&body)), (200, oids[2].clone()));
    let (status, _, answer) = batch(&strict, &wanted, Some(BOB)).await;
    assert_eq!(status, 503, "{answer}");
    assert!(answer.get("objects").is_none());
    // Without credentials: asked for them, as the host would.
    let url = format!("{strict}/{ENDPOINT}/objects/batch");
    let (status, _, answer, headers) = send_batch(&url, "download", &wanted, None).await;
    assert_eq!(status, 401, "{answer}");
    assert!(headers.contains_key("lfs-authenticate"));
    assert!(answer.get("objects").is_none());
}

#[tokio::test]
async fn a_client_the_host_does_not_admit_gets_nothing_cached_for_another() {
    let objects = [test_bytes(50_000, 4)];
    let (host, oids) = host(&objects).await;
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config_text(dir.path(), &remote("lfs", &host, ""))).await;
    let base = format!("http://{}/lfs", running.local_addr);
    let wanted = [(oids[0].as_str(), 50_000)];
    let (_, _, answer) = batch(&base, &wanted, Some(ALICE)).await;
    assert_eq!(download(&answer["objects"][0]).await.0, 200);
    running.proxy.fills.wait_idle().await;

    // Bob's and an anonymous batch go upstream (the object is cached) and
    // get the host's refusal, challenge and all; no grant, no bytes.
    let before = host.batches();
    let (status, cache, answer) = batch(&base, &wanted, Some(BOB)).await;
    assert_eq!((status, cache.as_str()), (404, "PASS"), "{answer}");
    assert!(answer.get("objects").is_none(), "{answer}");
    let url = format!("{base}/{ENDPOINT}/objects/batch");
    let (status, _, _, headers) = send_batch(&url, "download", &wanted, None).await;
    assert_eq!(status, 401);
    assert_eq!(headers["lfs-authenticate"], "Basic realm=\"Git LFS\"");
    assert_eq!(host.batches(), before + 2);

    // The object's URL itself, without a grant: 404 and 0 bytes.
    let url = format!("{base}/{ENDPOINT}/objects/{}", oids[0]);
    for auth in [None, Some(BOB), Some(ALICE)] {
        let mut request = reqwest::Client::new().get(&url);
        if let Some(auth) = auth {
            request = request.header(AUTHORIZATION, auth);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 404);
        assert!(!response
            .bytes()
            .await
            .unwrap()
            .windows(64)
            .any(|w| objects[0].starts_with(w)));
    }
    // Under another repository's endpoint the oid is not cached: the host is
    // asked, and says no.
    let other = base.replace("/lfs", "/lfs/team/other.git/info/lfs");
    let url = format!("{other}/objects/batch");
    let (status, _, _, _) = send_batch(&url, "download", &wanted, Some(ALICE)).await;
    assert_eq!(status, 404);
    assert_eq!(host.downloads(&oids[0]), 1);
}

#[tokio::test]
async fn a_tampered_object_is_refused_and_nothing_is_cached() {
    let good = test_bytes(200_000, 5);
    let (host, oids) = host(std::slice::from_ref(&good)).await;
    host.put_as(&oids[0], tampered(&good));
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config_text(dir.path(), &remote("lfs", &host, ""))).await;
    let base = format!("http://{}/lfs", running.local_addr);
    let wanted = [(oids[0].as_str(), 200_000)];
    let (_, _, answer) = batch(&base, &wanted, Some(ALICE)).await;
    let (status, body) = download(&answer["objects"][0]).await;
    assert_eq!(status, 502);
    assert!(
        String::from_utf8_lossy(&body).contains(&oids[0]),
        "names the oid's digest"
    );
    running.proxy.fills.wait_idle().await;

    // Nothing was cached: once the host has the right bytes, they are fetched.
    host.put_as(&oids[0], good.clone());
    let (status, cache, answer) = batch(&base, &wanted, Some(ALICE)).await;
    assert_eq!(
        (status, cache.as_str()),
        (200, "PASS"),
        "not cached: asked upstream"
    );
    let (status, body) = download(&answer["objects"][0]).await;
    assert_eq!((status, sha256_hex(&body)), (200, oids[0].clone()));
    assert_eq!(host.downloads(&oids[0]), 2);
}

/// Two Git hosts as mirrors: the first's object store sends other bytes,
/// so the fill asks the second for a download action of its own (a batch
/// with the remote's credentials) and serves its bytes to the same request.
#[tokio::test]
async fn a_tampered_object_is_fetched_from_the_next_mirror() {
    let good = test_bytes(300_000, 7);
    let (first, oids) = host(std::slice::from_ref(&good)).await;
    let (second, _) = host(std::slice::from_ref(&good)).await;
    first.put_as(&oids[0], tampered(&good));
    let config = format!(
        "[[remote]]\nname = \"lfs\"\nkind = \"lfs\"\nmirrors = [\"{}\", \"{}\"]\nstrategy = \"single\"\nusername = \"alice\"\npassword = \"alice-secret\"\n",
        first.url(),
        second.url()
    );
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config_text(dir.path(), &config)).await;
    let base = format!("http://{}/lfs", running.local_addr);
    let (status, _, answer) = batch(&base, &[(oids[0].as_str(), 300_000)], Some(ALICE)).await;
    assert_eq!(status, 200, "{answer}");
    let (status, body) = download(&answer["objects"][0]).await;
    assert_eq!((status, sha256_hex(&body)), (200, oids[0].clone()));
    running.proxy.fills.wait_idle().await;
    assert_eq!((first.batches(), first.downloads(&oids[0])), (1, 1));
    assert_eq!((second.batches(), second.downloads(&oids[0])), (1, 1));
    let metrics = reqwest::get(format!("http://{}/-/metrics", running.local_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(crate::support::proxy::metric(&metrics, "mirrorcache_integrity_failures_total") >= 1.0);
}

#[tokio::test]
async fn uploads_are_refused_unless_the_operator_passes_them() {
    let (host, oids) = host(&[test_bytes(10, 6)]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = remote("lfs", &host, "") + &remote("rw", &host, "lfs_uploads = \"pass\"");
    let running = start_text(&config_text(dir.path(), &config)).await;
    let url = |remote: &str| {
        format!(
            "http://{}/{remote}/{ENDPOINT}/objects/batch",
            running.local_addr
        )
    };
    let wanted = [(oids[0].as_str(), 10)];
    let (status, _, refused, _) = send_batch(&url("lfs"), "upload", &wanted, Some(ALICE)).await;
    assert_eq!(status, 405);
    assert!(refused.to_string().contains("uploads are refused"));
    assert_eq!(host.batches(), 0);
    let (status, _, passed, _) = send_batch(&url("rw"), "upload", &wanted, Some(ALICE)).await;
    assert_eq!(status, 200);
    assert!(
        passed["objects"][0]["actions"]["upload"].is_object(),
        "{passed}"
    );
    assert_eq!(host.batches(), 1);
}

#[test]
fn check_names_the_lfs_keys_it_refuses() {
    let bad = "[[remote]]\nname = \"l\"\nkind = \"lfs\"\nmirrors = [\"http://127.0.0.1:1\"]\nlfs_uploads = \"sometimes\"\n";
    let said = String::from_utf8_lossy(&crate::support::binary::check(bad).stderr).to_string();
    assert!(
        said.contains("lfs_uploads") && said.contains(":5:"),
        "{said}"
    );
    let npm = "[[remote]]\nname = \"n\"\nkind = \"npm\"\nmirrors = [\"http://127.0.0.1:1\"]\nlfs_grant_ttl = \"1m\"\n";
    let said = String::from_utf8_lossy(&crate::support::binary::check(npm).stderr).to_string();
    assert!(
        said.contains("lfs_grant_ttl") && said.contains("only an lfs remote"),
        "{said}"
    );
}
