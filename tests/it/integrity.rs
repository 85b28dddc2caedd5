//! Declared digests enforced on fills (issue 13, part 1): a mirror whose bytes
//! differ from what the index declared never gets them into the cache; the
//! fill moves on to the next mirror; with none left the client gets a 502
//! that names both digests.

use base64::Engine as _;
use sha2::Digest as _;

use crate::support::proxy::get;
use crate::support::{
    sha256_hex, tampered, test_bytes, toml_urls, wait_until, Fault, MirrorServer, TestProxy,
};

fn remote(kind: &str, mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"r\"\nkind = \"{kind}\"\nmirrors = {}\nfiles = []\nstrategy = \"single\"\n{extra}\n",
        toml_urls(mirrors, "/m")
    )
}

async fn integrity_failures(proxy: &TestProxy) -> f64 {
    proxy.metric("mirrorcache_integrity_failures_total").await
}

const WHEEL: &str = "/m/packages/six-1.0-py3-none-any.whl";

const SDIST: &str = "/m/packages/six-1.0.tar.gz";

/// A simple page declaring the wheel's sha256 with a relative link (and
/// the sdist's, with the same bytes).
fn simple_page(good: &[u8]) -> String {
    format!(
        "<html><body><a href=\"../../packages/six-1.0-py3-none-any.whl#sha256={0}\">six</a>\n\
         <a href=\"../../packages/six-1.0.tar.gz#sha256={0}\">six</a></body></html>",
        sha256_hex(good)
    )
}

#[tokio::test]
async fn a_tampered_first_mirror_is_passed_over_before_the_first_byte() {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    let good = test_bytes(40_000, 1);
    for m in [&a, &b] {
        m.put("/m/simple/six/", simple_page(&good));
    }
    a.put(WHEEL, tampered(&good));
    b.put(WHEEL, good.clone());
    a.put(SDIST, tampered(&good));
    b.put(SDIST, good.clone());
    let dir = tempfile::tempdir().unwrap();
    let proxy = TestProxy::start_in(dir.path(), &remote("pypi", &[&a, &b], "")).await;
    let client = reqwest::Client::new();
    let (status, _, _) = get(&client, &proxy.url("/r/simple/six/")).await;
    assert_eq!(status, 200);

    let wheel = proxy.url("/r/packages/six-1.0-py3-none-any.whl");
    let (status, cache, body) = get(&client, &wheel).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&good));
    assert_eq!((a.hits(WHEEL), b.hits(WHEEL)), (1, 1));
    assert_eq!(integrity_failures(&proxy).await, 1.0);
    proxy.settle().await;
    let (status, cache, body) = get(&client, &wheel).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&good));

    // The declarations are kept with the metadata: after a restart the
    // sdist the page declared is still checked.
    proxy.stop().await;
    let proxy = TestProxy::start_in(dir.path(), &remote("pypi", &[&a, &b], "")).await;
    let (status, _, body) = get(&client, &proxy.url("/r/packages/six-1.0.tar.gz")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&good));
    assert_eq!((a.hits(SDIST), b.hits(SDIST)), (1, 1));
}

#[tokio::test]
async fn the_only_mirror_tampered_gets_a_502_naming_both_digests_and_nothing_cached() {
    let a = MirrorServer::start().await;
    let good = test_bytes(40_000, 2);
    let bad = tampered(&good);
    a.put("/m/simple/six/", simple_page(&good));
    a.put(WHEEL, bad.clone());
    let proxy = TestProxy::start(&remote("pypi", &[&a], "")).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/r/simple/six/")).await.0, 200);
    let wheel = proxy.url("/r/packages/six-1.0-py3-none-any.whl");
    for round in 1..=2 {
        let (status, _, body) = get(&client, &wheel).await;
        let body = String::from_utf8(body.unwrap().to_vec()).unwrap();
        assert_eq!(status, 502, "{body}");
        assert!(
            body.contains(&format!("expected sha256:{}", sha256_hex(&good))),
            "{body}"
        );
        assert!(
            body.contains(&format!("received sha256:{}", sha256_hex(&bad))),
            "{body}"
        );
        proxy.settle().await;
        // Nothing was kept: every request asks the mirror again.
        assert_eq!(a.hits(WHEEL), round);
        assert_eq!(proxy.temp_files(), 0);
    }
    // Not even a negative entry: the right bytes are served once they exist.
    a.put(WHEEL, good.clone());
    let (status, _, body) = get(&client, &wheel).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&good));
}

/// Two mirrors with the simple page, the first with a tampered wheel, and a
/// proxy that has fetched the page (so the wheel's digest is declared).
async fn wheel_tampered_on_the_first_of_two(
    good: &[u8],
) -> (MirrorServer, MirrorServer, TestProxy, reqwest::Client) {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    for m in [&a, &b] {
        m.put("/m/simple/six/", simple_page(good));
    }
    a.put(WHEEL, tampered(good));
    b.put(WHEEL, good.to_vec());
    let proxy = TestProxy::start(&remote("pypi", &[&a, &b], "")).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/r/simple/six/")).await.0, 200);
    (a, b, proxy, client)
}

#[tokio::test]
async fn a_large_tampered_body_breaks_one_transfer_and_the_next_request_gets_the_right_bytes() {
    // Larger than the in-memory tier's objects: streamed as it arrives, so
    // the refusal can only break the transfer already under way.
    let good = test_bytes(3 * 1024 * 1024, 3);
    let (a, b, proxy, client) = wheel_tampered_on_the_first_of_two(&good).await;
    let wheel = proxy.url("/r/packages/six-1.0-py3-none-any.whl");
    let (status, _, body) = get(&client, &wheel).await;
    assert_eq!(status, 200);
    assert!(
        body.is_err(),
        "the first transfer must break, not end as a complete wrong body"
    );
    proxy.settle().await;
    let (status, cache, body) = get(&client, &wheel).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&good));
    assert_eq!((a.hits(WHEEL), b.hits(WHEEL)), (1, 1));
}

#[tokio::test]
async fn npm_integrity_sha512_and_legacy_shasum_are_both_enforced() {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    let (new, old) = (test_bytes(5000, 4), test_bytes(5000, 5));
    let sri = format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(&new))
    );
    let shasum = hex::encode(sha1_of(&old));
    for m in [&a, &b] {
        let base = m.url("/m");
        let packument = serde_json::json!({"name": "p", "versions": {
            "2.0.0": {"dist": {"tarball": format!("{base}/p/-/p-2.0.0.tgz"), "integrity": sri}},
            "1.0.0": {"dist": {"tarball": format!("{base}/p/-/p-1.0.0.tgz"), "shasum": shasum}},
        }});
        m.put("/m/p", packument.to_string());
    }
    a.put("/m/p/-/p-2.0.0.tgz", tampered(&new));
    a.put("/m/p/-/p-1.0.0.tgz", tampered(&old));
    b.put("/m/p/-/p-2.0.0.tgz", new.clone());
    b.put("/m/p/-/p-1.0.0.tgz", old.clone());
    let proxy = TestProxy::start(&remote("npm", &[&a, &b], "")).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/r/p")).await.0, 200);
    for (path, bytes) in [("/r/p/-/p-2.0.0.tgz", &new), ("/r/p/-/p-1.0.0.tgz", &old)] {
        let (status, _, body) = get(&client, &proxy.url(path)).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(bytes), "{path}");
    }
    assert_eq!(integrity_failures(&proxy).await, 2.0);
}

fn sha1_of(bytes: &[u8]) -> Vec<u8> {
    use sha1::Digest as _;
    sha1::Sha1::digest(bytes).to_vec()
}

#[tokio::test]
async fn cargo_cksum_is_enforced_on_crate_downloads() {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    let krate = test_bytes(8000, 6);
    let line = serde_json::json!({"name": "leaf", "vers": "0.1.0", "deps": [], "cksum": sha256_hex(&krate), "features": {}, "yanked": false});
    for m in [&a, &b] {
        m.put("/m/le/af/leaf", format!("{line}\n"));
    }
    a.put("/m/api/v1/crates/leaf/0.1.0/download", tampered(&krate));
    b.put("/m/api/v1/crates/leaf/0.1.0/download", krate.clone());
    let proxy = TestProxy::start(&remote("cargo", &[&a, &b], "")).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/r/le/af/leaf")).await.0, 200);
    let (status, _, body) = get(&client, &proxy.url("/r/api/v1/crates/leaf/0.1.0/download")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&krate));
    assert_eq!(integrity_failures(&proxy).await, 1.0);
}

#[tokio::test]
async fn apt_release_declares_the_indexes_and_packages_declares_the_debs() {
    let a = MirrorServer::start().await;
    let deb = test_bytes(6000, 7);
    let packages = format!(
        "Package: hello\nVersion: 1\nFilename: pool/main/h/hello/hello_1_amd64.deb\nSize: {}\nSHA256: {}\n",
        deb.len(),
        sha256_hex(&deb)
    );
    let release = format!(
        "Origin: t\nSuite: stable\nSHA256:\n {} {} main/binary-amd64/Packages\n",
        sha256_hex(packages.as_bytes()),
        packages.len()
    );
    a.put("/m/dists/stable/Release", release);
    a.put(
        "/m/dists/stable/main/binary-amd64/Packages",
        tampered(packages.as_bytes()),
    );
    let by_hash = format!(
        "/m/dists/stable/main/binary-amd64/by-hash/SHA256/{}",
        sha256_hex(packages.as_bytes())
    );
    a.put(&by_hash, packages.clone());
    a.put("/m/pool/main/h/hello/hello_1_amd64.deb", tampered(&deb));
    let proxy = TestProxy::start(&remote("apt", &[&a], "")).await;
    let client = reqwest::Client::new();
    assert_eq!(
        get(&client, &proxy.url("/r/dists/stable/Release")).await.0,
        200
    );
    // The index file Release lists, tampered: refused.
    let (status, _, _) = get(
        &client,
        &proxy.url("/r/dists/stable/main/binary-amd64/Packages"),
    )
    .await;
    assert_eq!(status, 502);
    // The same index by hash: its address is its digest; it declares the deb.
    let (status, _, body) = get(&client, &proxy.url(&format!("/r{}", &by_hash[2..]))).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), packages.as_bytes());
    let (status, _, _) = get(
        &client,
        &proxy.url("/r/pool/main/h/hello/hello_1_amd64.deb"),
    )
    .await;
    assert_eq!(status, 502);
    a.put("/m/pool/main/h/hello/hello_1_amd64.deb", deb.clone());
    let (status, _, body) = get(
        &client,
        &proxy.url("/r/pool/main/h/hello/hello_1_amd64.deb"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&deb));
    // A by-hash address whose bytes are not that hash: refused.
    let wrong = format!(
        "/m/dists/stable/main/binary-amd64/by-hash/SHA256/{}",
        sha256_hex(b"x")
    );
    a.put(&wrong, "not x");
    let (status, _, _) = get(&client, &proxy.url(&format!("/r{}", &wrong[2..]))).await;
    assert_eq!(status, 502);
}

#[tokio::test]
async fn a_cached_artifact_that_contradicts_a_later_declaration_is_dropped_and_refetched() {
    let a = MirrorServer::start().await;
    let good = test_bytes(20_000, 8);
    a.put(WHEEL, tampered(&good));
    let proxy = TestProxy::start(&remote("pypi", &[&a], "")).await;
    let client = reqwest::Client::new();
    let wheel = proxy.url("/r/packages/six-1.0-py3-none-any.whl");
    // Nothing declared yet: cached as it came.
    assert_eq!(get(&client, &wheel).await.0, 200);
    proxy.settle().await;
    assert_eq!(get(&client, &wheel).await.1, "HIT");
    // The mirror is repaired, and the page now declares the right digest.
    a.put(WHEEL, good.clone());
    a.put("/m/simple/six/", simple_page(&good));
    assert_eq!(get(&client, &proxy.url("/r/simple/six/")).await.0, 200);
    proxy.settle().await;
    let (status, cache, body) = get(&client, &wheel).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&good));
    assert_eq!(a.hits(WHEEL), 2);
    assert_eq!(integrity_failures(&proxy).await, 1.0);
}

#[tokio::test]
async fn require_declared_hash_refuses_what_no_index_declared() {
    let a = MirrorServer::start().await;
    let good = test_bytes(1000, 9);
    a.put(WHEEL, good.clone());
    a.put("/m/simple/six/", simple_page(&good));
    let proxy = TestProxy::start(&remote("pypi", &[&a], "require_declared_hash = true")).await;
    let client = reqwest::Client::new();
    let wheel = proxy.url("/r/packages/six-1.0-py3-none-any.whl");
    let response = client.get(&wheel).send().await.unwrap();
    assert_eq!(response.status(), 403);
    let body = response.text().await.unwrap();
    assert!(body.contains("no index declared a digest"), "{body}");
    assert_eq!(a.hits(WHEEL), 0);
    assert_eq!(get(&client, &proxy.url("/r/simple/six/")).await.0, 200);
    let (status, _, body) = get(&client, &wheel).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&good));
}

#[tokio::test]
async fn a_declared_body_the_store_cannot_hold_is_refused_not_streamed_unchecked() {
    let a = MirrorServer::start().await;
    let good = test_bytes(300_000, 10);
    a.put("/m/simple/six/", simple_page(&good));
    a.put(WHEEL, tampered(&good));
    let dir = tempfile::tempdir().unwrap();
    let text = crate::support::proxy::config_text(dir.path(), &remote("pypi", &[&a], ""))
        .replace("[storage]\n", "[storage]\nmax_size = \"128KiB\"\n");
    let running = crate::support::proxy::start_text(&text).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &format!("{base}/r/simple/six/")).await.0, 200);
    // Larger than the whole store: it could only be streamed through, and a
    // stream-through is never in one place to check.
    let (status, _, _) = get(
        &client,
        &format!("{base}/r/packages/six-1.0-py3-none-any.whl"),
    )
    .await;
    assert_eq!(status, 500);
    // An undeclared one still streams through, as before.
    a.put("/m/other.bin", test_bytes(300_000, 11));
    let (status, _, body) = get(&client, &format!("{base}/r/other.bin")).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap().len(), 300_000);
    running.shutdown().await;
}

#[tokio::test]
async fn a_document_cached_before_its_digests_were_kept_is_learned_on_its_next_304() {
    let a = MirrorServer::start().await;
    let good = test_bytes(20_000, 12);
    a.put("/m/simple/six/", simple_page(&good));
    a.put(WHEEL, tampered(&good));
    let dir = tempfile::tempdir().unwrap();
    let remotes = remote("pypi", &[&a], "revalidate_after = \"1ms\"");
    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/r/simple/six/")).await.0, 200);
    proxy.stop().await;
    // As if the page had been cached by a version that kept no digests.
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}/meta.db", dir.path().display()))
        .await
        .unwrap();
    sqlx::query("DELETE FROM declared")
        .execute(&db)
        .await
        .unwrap();
    db.close().await;

    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let (status, cache, _) = get(&client, &proxy.url("/r/simple/six/")).await;
    assert_eq!((status, cache.as_str()), (200, "REVALIDATED"));
    let (status, _, _) = get(&client, &proxy.url("/r/packages/six-1.0-py3-none-any.whl")).await;
    assert_eq!(
        status, 502,
        "the wheel was checked against the page learned on its 304"
    );
    proxy.stop().await;
}

/// A declared body the in-memory tier holds is checked before any of it
/// reaches a client. The tampered first mirror sends its first bytes and
/// holds the rest: once the proxy has those bytes (a body of at most
/// 64 KiB in memory, a larger one in its temp file), the client has had
/// no response head and no byte. Released, the body is refused and the
/// client gets the second mirror's bytes, whole.
#[tokio::test]
async fn a_declared_small_body_reaches_no_client_before_its_digest_is_checked() {
    const FIRST: usize = 4096;
    for (size, in_memory) in [(40_000, true), (100_000, false)] {
        let good = test_bytes(size, 13);
        let (a, b, proxy, _) = wheel_tampered_on_the_first_of_two(&good).await;
        a.set_fault(Fault::StallAfter(FIRST));

        let (events, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let wheel = proxy.url("/r/packages/six-1.0-py3-none-any.whl");
        let request = tokio::spawn(async move {
            let mut response = reqwest::get(wheel).await?;
            let _ = events.send(format!("a {} head", response.status()));
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                let _ = events.send(format!("{} body bytes", chunk.len()));
                body.extend_from_slice(&chunk);
            }
            Ok::<_, reqwest::Error>(body)
        });
        let store = proxy.dir.join("store");
        wait_until("the proxy to hold the first bytes", async || {
            a.stalled() == 1 && (in_memory || temp_file_starts_with(&store, &good[..FIRST]))
        })
        .await;
        if in_memory {
            assert!(!temp_file_starts_with(&store, &good[..FIRST]));
        }
        // Were the bytes on their way to the client, a moment would bring them.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        if let Ok(event) = seen.try_recv() {
            panic!("{size} bytes: the client got {event} before the body was checked");
        }

        a.release();
        let body = request.await.unwrap().expect("the transfer is whole");
        assert_eq!(sha256_hex(&body), sha256_hex(&good));
        assert_eq!(seen.recv().await.unwrap(), "a 200 OK head");
        assert_eq!((a.hits(WHEEL), b.hits(WHEEL)), (1, 1));
        assert_eq!(integrity_failures(&proxy).await, 1.0);
    }
}

/// Whether a temp file of the store begins with `prefix`.
fn temp_file_starts_with(store: &std::path::Path, prefix: &[u8]) -> bool {
    let Ok(dir) = std::fs::read_dir(store.join("tmp")) else {
        return false;
    };
    dir.flatten()
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
        .any(|e| std::fs::read(e.path()).is_ok_and(|bytes| bytes.starts_with(prefix)))
}
