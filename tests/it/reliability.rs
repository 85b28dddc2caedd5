//! Fault injection: mirrors that fail, a disk that fills, a process that dies.
//! Each test says what was sent, what was served, and that nothing was lost.

use std::time::Duration;

use crate::support::proxy::{config_text, get, get_json, get_text};
use crate::support::{
    available, sha256_hex, test_bytes, toml_urls, wait_until, BinaryProxy, Fault, MirrorServer,
    TestProxy,
};

fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"r\"\nmirrors = {}\n{extra}\n",
        toml_urls(mirrors, "/m")
    )
}

#[tokio::test]
async fn a_failing_mirror_is_ejected_then_probed_back_after_its_cooldown() {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    for i in 0..20 {
        a.put(&format!("/m/f{i}"), vec![i as u8; 10]);
        b.put(&format!("/m/f{i}"), vec![i as u8; 10]);
    }
    a.set_fault(Fault::Status(503));
    let proxy = TestProxy::start(&remote(
        &[&a, &b],
        "strategy = \"single\"\neject_cooldown = \"3s\"",
    ))
    .await;
    let client = reqwest::Client::new();
    for i in 0..8 {
        assert_eq!(get(&client, &proxy.url(&format!("/r/f{i}"))).await.0, 200);
    }
    // Three failures eject it; the other five requests never touch it.
    assert_eq!((a.total(), b.total()), (3, 8));

    // It recovers; after the cooldown one request probes it and it is back.
    a.set_fault(Fault::None);
    tokio::time::sleep(Duration::from_millis(3100)).await;
    for i in 8..12 {
        assert_eq!(get(&client, &proxy.url(&format!("/r/f{i}"))).await.0, 200);
    }
    assert_eq!((a.total(), b.total()), (7, 8));
    let status = get_json(&client, &proxy.url("/-/status")).await;
    assert_eq!(status["remotes"][0]["mirrors"][0]["health"], "healthy");
    proxy.stop().await;
}

#[tokio::test]
async fn every_mirror_down_serves_stale_copies_and_known_404s() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/index.json", b"index v1".to_vec());
    let proxy = TestProxy::start(&remote(
        &[&mirror],
        "revalidate_after = \"0s\"\nnegative_ttl = \"0s\"",
    ))
    .await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/r/index.json")).await.1, "MISS");
    assert_eq!(get(&client, &proxy.url("/r/missing.json")).await.0, 404);
    proxy.settle().await;

    mirror.stop();
    let (status, cache, bytes) = get(&client, &proxy.url("/r/index.json")).await;
    assert_eq!(
        (status, cache.as_str(), &bytes.unwrap()[..]),
        (200, "STALE", &b"index v1"[..])
    );
    let (status, cache, _) = get(&client, &proxy.url("/r/missing.json")).await;
    assert_eq!((status, cache.as_str()), (404, "STALE"));
    // Nothing known: a plain 502.
    assert_eq!(get(&client, &proxy.url("/r/never-seen.json")).await.0, 502);
    proxy.stop().await;
}

#[tokio::test]
async fn staleness_is_bounded_by_max_stale() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/index.json", b"old".to_vec());
    let proxy = TestProxy::start(&remote(
        &[&mirror],
        "revalidate_after = \"0s\"\nmax_stale = \"0s\"",
    ))
    .await;
    let client = reqwest::Client::new();
    get(&client, &proxy.url("/r/index.json")).await.2.unwrap();
    proxy.settle().await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    mirror.stop();
    assert_eq!(get(&client, &proxy.url("/r/index.json")).await.0, 502);
    proxy.stop().await;
}

#[tokio::test]
async fn a_404_from_every_mirror_is_remembered_for_negative_ttl() {
    let mirror = MirrorServer::start().await;
    let proxy = TestProxy::start(&remote(&[&mirror], "negative_ttl = \"1h\"")).await;
    let client = reqwest::Client::new();
    for _ in 0..5 {
        let (status, _, _) = get(&client, &proxy.url("/r/nope.tar.gz")).await;
        assert_eq!(status, 404);
    }
    assert_eq!(mirror.hits("/m/nope.tar.gz"), 1);
    // Purging the path (admin API) forgets the 404 too; tested in `admin`.
    proxy.stop().await;
}

#[tokio::test]
async fn eviction_keeps_the_store_under_max_size_least_recently_used_first() {
    let mirror = MirrorServer::start().await;
    for i in 0..5 {
        mirror.put(&format!("/m/f{i}"), test_bytes(300_000, i));
    }
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&[&mirror], "immutable = [\"**\"]"))
        .replace("[storage]\n", "[storage]\nmax_size = \"1MiB\"\n");
    let running = crate::support::proxy::start_text(&text).await;
    let url = |p: &str| format!("http://{}{}", running.local_addr, p);
    let client = reqwest::Client::new();
    for i in 0..3 {
        get(&client, &url(&format!("/r/f{i}"))).await.2.unwrap();
        running.proxy.fills.wait_idle().await;
    }
    // Access times have one-second resolution: make f0 the most recent.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(get(&client, &url("/r/f0")).await.1, "HIT");
    for i in 3..5 {
        get(&client, &url(&format!("/r/f{i}"))).await.2.unwrap();
        running.proxy.fills.wait_idle().await;
        let cache = running.proxy.cache.clone();
        wait_until("eviction", async || cache.size() <= 1024 * 1024).await;
    }
    assert!(running.proxy.cache.size() <= 1024 * 1024);
    mirror.stop();
    // f0 (recently used), f3 and f4 stayed; f1 and f2 were evicted.
    for (i, expect) in [(0, 200), (1, 502), (2, 502), (3, 200), (4, 200)] {
        let (status, _, bytes) = get(&client, &url(&format!("/r/f{i}"))).await;
        assert_eq!(status, expect, "f{i}");
        if status == 200 {
            assert_eq!(
                sha256_hex(&bytes.unwrap()),
                sha256_hex(&test_bytes(300_000, i))
            );
        }
    }
    let metrics = get_text(&client, &url("/-/metrics")).await;
    assert!(
        metrics.contains("mirrorcache_evictions_total 2"),
        "{metrics}"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn a_blob_being_read_survives_its_deletion() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(8 * 1024 * 1024, 5);
    mirror.put("/m/big", body.clone());
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&[&mirror], "immutable = [\"**\"]"))
        .replace("[server]\n", "[server]\nadmin_token = \"t\"\n");
    let running = crate::support::proxy::start_text(&text).await;
    let url = |p: &str| format!("http://{}{}", running.local_addr, p);
    let client = reqwest::Client::new();
    get(&client, &url("/r/big")).await.2.unwrap();
    running.proxy.fills.wait_idle().await;

    let mut response = client.get(url("/r/big")).send().await.unwrap();
    assert_eq!(response.headers()["x-cache-status"], "HIT");
    let mut received = response.chunk().await.unwrap().unwrap().to_vec();
    // Delete it from the cache (row and blob) while the response is half read.
    let purge = client
        .post(url("/-/cache/r/purge"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert_eq!(purge.status(), 200);
    assert_eq!(running.proxy.cache.size(), 0);
    while let Some(chunk) = response.chunk().await.unwrap() {
        received.extend_from_slice(&chunk);
    }
    assert_eq!(sha256_hex(&received), sha256_hex(&body));
    running.shutdown().await;
}

#[tokio::test]
async fn too_big_for_the_store_is_streamed_through_and_not_cached() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(2 * 1024 * 1024, 6);
    mirror.put("/m/huge", body.clone());
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&[&mirror], ""))
        .replace("[storage]\n", "[storage]\nmax_size = \"1MiB\"\n");
    let running = crate::support::proxy::start_text(&text).await;
    let url = format!("http://{}/r/huge", running.local_addr);
    let client = reqwest::Client::new();
    for _ in 0..2 {
        let (status, cache, bytes) = get(&client, &url).await;
        assert_eq!((status, cache.as_str()), (200, "MISS"));
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));
        running.proxy.fills.wait_idle().await;
    }
    assert_eq!(mirror.hits("/m/huge"), 2);
    assert_eq!(running.proxy.cache.size(), 0);
    assert_eq!(
        crate::support::proxy::temp_files_in(&dir.path().join("store")),
        0
    );
    running.shutdown().await;
}

#[tokio::test]
async fn bodies_over_max_body_size_are_502_and_not_cached() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/big", test_bytes(100_000, 1));
    let proxy = TestProxy::start(&remote(&[&mirror], "max_body_size = \"50KB\"")).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/r/big")).await.0, 502);
    proxy.settle().await;
    assert_eq!(get(&client, &proxy.url("/r/big")).await.0, 502);
    assert_eq!(mirror.hits("/m/big"), 2);
    proxy.stop().await;
}

/// A chunked body (no Content-Length to refuse it by) is written until
/// `max_body_size`; past it the fill fails and nothing is kept. An artifact's
/// client gets a 502, or, when its 200 went out with the first bytes, a
/// transfer that breaks; never the whole body. A document, served whole, gets
/// 502. Every request goes upstream again; under the limit a chunked body is
/// cached like any other.
#[tokio::test]
async fn a_chunked_body_over_max_body_size_is_refused_and_not_cached() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/big", test_bytes(100_000, 2));
    mirror.put("/m/simple/big/", test_bytes(100_000, 3));
    let small = test_bytes(30_000, 4);
    mirror.put("/m/small", small.clone());
    mirror.set_fault(Fault::Chunked);
    let dir = tempfile::tempdir().unwrap();
    let remotes = format!(
        "{}\n[[remote]]\nname = \"p\"\nkind = \"pypi\"\nfiles = []\nmirrors = {}\nmax_body_size = \"50KB\"\n",
        remote(&[&mirror], "max_body_size = \"50KB\""),
        toml_urls(&[&mirror], "/m")
    );
    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let client = reqwest::Client::new();
    for round in 1..=2 {
        let (status, _, body) = get(&client, &proxy.url("/r/big")).await;
        assert!(
            status == 502 || (status == 200 && body.is_err()),
            "round {round}: {status} with a whole body: {:?}",
            body.map(|b| b.len())
        );
        let (status, _, _) = get(&client, &proxy.url("/p/simple/big/")).await;
        assert_eq!(status, 502, "round {round}");
        proxy.settle().await;
        assert_eq!(mirror.hits("/m/big"), round);
        assert_eq!(mirror.hits("/m/simple/big/"), round);
        assert_eq!(proxy.temp_files(), 0);
    }
    assert_eq!(proxy.running.proxy.cache.size(), 0);

    let (status, cache, body) = get(&client, &proxy.url("/r/small")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&small));
    proxy.settle().await;
    assert_eq!(get(&client, &proxy.url("/r/small")).await.1, "HIT");
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}/meta.db", dir.path().display()))
        .await
        .unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT remote, path FROM entries")
        .fetch_all(&db)
        .await
        .unwrap();
    assert_eq!(rows, [("r".to_string(), "small".to_string())]);
    assert_eq!(proxy.running.proxy.cache.size(), small.len() as u64);
    proxy.stop().await;
}

/// Unmounts a file system the test mounted, when dropped: lazily, since a
/// server's tasks may still hold files there until the test's runtime
/// ends (it is then let go, not left mounted).
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("--lazy")
            .arg(&self.0)
            .status();
    }
}

/// A 1 MiB tmpfs mounted on `dir/store` (where [`config_text`] puts the
/// store), unmounted when the guard drops; `None` where mounting is not
/// allowed.
fn store_on_a_small_tmpfs(dir: &std::path::Path) -> Option<(std::path::PathBuf, Unmount)> {
    let store = dir.join("store");
    std::fs::create_dir_all(&store).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&store)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !available("mounting a tmpfs (needs root)", mounted) {
        return None;
    }
    Some((store.clone(), Unmount(store)))
}

/// A server in `dir` with one remote `r` over `mirror`.
async fn start_running(
    dir: &std::path::Path,
    mirror: &MirrorServer,
) -> mirrorcache::http::server::Running {
    let config =
        mirrorcache::config::Config::parse(&config_text(dir, &remote(&[mirror], "")), "test")
            .unwrap();
    mirrorcache::http::server::Running::start(&config)
        .await
        .unwrap()
}

/// A store on a 1 MiB tmpfs: the disk is full for a 2 MiB artifact. The
/// client still gets every byte; nothing partial is kept.
#[tokio::test]
async fn a_full_disk_streams_through_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some((store, _unmount)) = store_on_a_small_tmpfs(dir.path()) else {
        return;
    };

    let mirror = MirrorServer::start().await;
    let body = test_bytes(2 * 1024 * 1024, 7);
    mirror.put("/m/f", body.clone());
    mirror.put("/m/small", test_bytes(1000, 8));
    let running = start_running(dir.path(), &mirror).await;
    let client = reqwest::Client::new();
    let (status, cache, bytes) = get(&client, &format!("http://{}/r/f", running.local_addr)).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));
    running.proxy.fills.wait_idle().await;
    assert_eq!(crate::support::proxy::temp_files_in(&store), 0);
    assert_eq!(running.proxy.cache.size(), 0);
    // What fits is still cached.
    get(&client, &format!("http://{}/r/small", running.local_addr))
        .await
        .2
        .unwrap();
    running.proxy.fills.wait_idle().await;
    assert_eq!(
        get(&client, &format!("http://{}/r/small", running.local_addr))
            .await
            .1,
        "HIT"
    );
    running.shutdown().await;
}

/// A store on a 1 MiB tmpfs and a 2 MiB body of no announced length (so
/// nothing is reserved up front): the disk fills in the middle of the
/// body. The client's transfer breaks after the bytes it was sent; no temp
/// file, no row, no byte counted (committed or in progress) is left; the
/// server goes on, and once the tmpfs is resized the same key is fetched
/// and kept whole.
#[tokio::test]
async fn a_disk_that_fills_in_the_middle_of_a_body_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some((store, _unmount)) = store_on_a_small_tmpfs(dir.path()) else {
        return;
    };

    let mirror = MirrorServer::start().await;
    mirror.set_fault(Fault::Chunked);
    let body = test_bytes(2 * 1024 * 1024, 9);
    mirror.put("/m/f", body.clone());
    mirror.put("/m/small", test_bytes(1000, 10));
    let running = start_running(dir.path(), &mirror).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    let mut response = client.get(format!("{base}/r/f")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(crate::support::proxy::cache_status(&response), "MISS");
    let mut received = 0;
    let broken = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => received += chunk.len(),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    assert!(
        broken,
        "a body the store could not hold ends as a broken transfer"
    );
    assert!(
        received > 0 && received < body.len(),
        "{received} bytes before the break"
    );
    running.proxy.fills.wait_idle().await;
    assert_eq!(crate::support::proxy::temp_files_in(&store), 0);
    assert_eq!(running.proxy.cache.size(), 0);
    assert_eq!(running.proxy.cache.budget().in_progress(), 0);
    let row = running.proxy.cache.meta.db.stored_digest("r", "f").await;
    assert!(row.unwrap().is_none(), "no row for the broken fill");

    // The server goes on: what fits is cached and served as a hit.
    let small = format!("{base}/r/small");
    get(&client, &small).await.2.unwrap();
    running.proxy.fills.wait_idle().await;
    assert_eq!(get(&client, &small).await.1, "HIT");

    // With room again (the tmpfs resized), the key is fetched anew and kept
    // whole.
    let remounted = std::process::Command::new("mount")
        .args(["-o", "remount,size=8m"])
        .arg(&store)
        .status()
        .unwrap();
    assert!(remounted.success());
    let (status, cache, bytes) = get(&client, &format!("{base}/r/f")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));
    running.proxy.fills.wait_idle().await;
    let (status, cache, bytes) = get(&client, &format!("{base}/r/f")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));
    assert_eq!(mirror.hits("/m/f"), 2);
    running.shutdown().await;
}

/// kill -9 while 10 fills are half done; the restarted proxy cleans up and
/// never serves a partial or corrupt artifact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_ten_fills_loses_nothing_and_serves_nothing_partial() {
    let mirror = MirrorServer::start().await;
    for i in 0..10 {
        mirror.put(&format!("/m/f{i}"), test_bytes(2 * 1024 * 1024, 100 + i));
    }
    mirror.put("/m/done", test_bytes(5000, 99));
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&[&mirror], "immutable = [\"**\"]"));
    let mut proxy = BinaryProxy::start(dir.path(), &text).await;
    let client = reqwest::Client::new();
    get(&client, &proxy.url("/r/done")).await.2.unwrap();
    // A HIT alone is not a commit: a request that joins the finished fill
    // before its commit is durable is served (as a HIT) from its file. The
    // fill leaves `/-/status` only once its row is on disk.
    wait_until("/r/done to be committed", async || {
        get(&client, &proxy.url("/r/done")).await.1 == "HIT"
            && get_json(&client, &proxy.url("/-/status")).await["fills_in_progress"] == 0
    })
    .await;
    let before = mirror.total();

    mirror.set_fault(Fault::SlowBody(Duration::from_millis(30)));
    let fetches: Vec<_> = (0..10)
        .map(|i| {
            let (client, url) = (client.clone(), proxy.url(&format!("/r/f{i}")));
            tokio::spawn(async move { client.get(url).send().await.ok()?.bytes().await.ok() })
        })
        .collect();
    wait_until("10 fills to start", async || mirror.total() >= before + 10).await;
    let temp_files = || crate::support::proxy::temp_files_in(&dir.path().join("store"));
    wait_until("the fills' temp files", async || temp_files() >= 10).await;
    proxy.kill_hard();
    for f in fetches {
        // Every client saw a broken transfer, none a short "complete" one.
        assert!(f.await.unwrap().is_none());
    }

    mirror.set_fault(Fault::None);
    let proxy = BinaryProxy::start(dir.path(), &text).await;
    assert_eq!(temp_files(), 0);
    let (status, cache, _) = get(&client, &proxy.url("/r/done")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    for i in 0..10 {
        let (status, cache, bytes) = get(&client, &proxy.url(&format!("/r/f{i}"))).await;
        assert_eq!((status, cache.as_str()), (200, "MISS"));
        assert_eq!(
            sha256_hex(&bytes.unwrap()),
            sha256_hex(&test_bytes(2 * 1024 * 1024, 100 + i))
        );
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["verify", "--config"])
        .arg(&proxy.config_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test]
async fn verify_finds_and_removes_corrupt_blobs() {
    let mirror = MirrorServer::start().await;
    for i in 0..3 {
        mirror.put(&format!("/m/f{i}"), test_bytes(10_000, i));
    }
    let dir = tempfile::tempdir().unwrap();
    let remotes = remote(&[&mirror], "immutable = [\"**\"]");
    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let client = reqwest::Client::new();
    for i in 0..3 {
        get(&client, &proxy.url(&format!("/r/f{i}")))
            .await
            .2
            .unwrap();
    }
    proxy.stop().await;

    // Flip one byte of f1's blob on disk (in its pack).
    let hex = sha256_hex(&test_bytes(10_000, 1));
    damage(&dir.path().join("store"), &test_bytes(10_000, 1), 5000);

    let config_path = dir.path().join("c.toml");
    std::fs::write(&config_path, config_text(dir.path(), &remotes)).unwrap();
    let verify = |remove: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorcache"));
        cmd.args(["verify", "--config"]).arg(&config_path);
        if remove {
            cmd.arg("--remove");
        }
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, report) = verify(false);
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains(&format!("corrupt: {hex}")) && report.contains("checked 3 blobs"),
        "{report}"
    );
    let (code, report) = verify(true);
    assert_eq!(code, 0, "{report}");
    let (code, report) = verify(false);
    assert_eq!(code, 0, "{report}");
    assert!(report.contains("checked 2 blobs"), "{report}");

    // The corrupt copy is never served: the next request fetches it again.
    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let (status, cache, bytes) = get(&client, &proxy.url("/r/f1")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&bytes.unwrap()), hex);
    proxy.stop().await;
}

/// Flips byte `at` of the blob `body` where the store keeps it: its own
/// file, or its range of a pack.
fn damage(store: &std::path::Path, body: &[u8], at: usize) {
    let hex = sha256_hex(body);
    let file = store.join("blobs").join(&hex[0..2]).join(&hex);
    let mut packs = std::fs::read_dir(store.join("packs")).unwrap().flatten();
    let (path, start) = match file.exists() {
        true => (file, 0),
        false => packs
            .find_map(|pack| {
                let bytes = std::fs::read(pack.path()).unwrap();
                let start = bytes.windows(body.len()).position(|w| w == body)?;
                Some((pack.path(), start))
            })
            .expect("the blob's file or pack"),
    };
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[start + at] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
}

/// A small blob damaged on disk is caught when it is first read into memory:
/// the client gets the right bytes, fetched again, never the damaged ones.
#[tokio::test]
async fn a_blob_damaged_on_disk_is_never_served() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(20_000, 42);
    mirror.put("/m/x", body.clone());
    let dir = tempfile::tempdir().unwrap();
    let remotes = remote(&[&mirror], "immutable = [\"**\"]");
    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let client = reqwest::Client::new();
    get(&client, &proxy.url("/r/x")).await.2.unwrap();
    proxy.stop().await;

    let hex = sha256_hex(&body);
    damage(&dir.path().join("store"), &body, 10);

    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let (status, cache, got) = get(&client, &proxy.url("/r/x")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&got.unwrap()), hex);
    assert_eq!(mirror.hits("/m/x"), 2);
    proxy.settle().await;
    assert_eq!(get(&client, &proxy.url("/r/x")).await.1, "HIT");
    proxy.stop().await;
}

/// A temp file whose write-back failed during its fill, the error already
/// reported to another batch's `syncfs` (as when another batch commits
/// first, or another program syncs): its own batch still fails, and no
/// file is named after the blob. The store is on an ext4 image on a small
/// tmpfs, loop-mounted; with the tmpfs full, the image's writes fail as a
/// failing disk's would.
#[test]
fn a_write_back_error_reported_elsewhere_still_fails_its_blobs_batch() {
    use std::io::Write;
    use std::process::Command;

    use mirrorcache::store::BatchBody;
    use mirrorcache::store::{Budget, ContentStore, Digest};

    let dir = tempfile::tempdir().unwrap();
    let (backing, mnt) = (dir.path().join("backing"), dir.path().join("mnt"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let ran = |command: &mut Command| command.status().is_ok_and(|s| s.success());
    let mounted = ran(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=48m", "tmpfs"])
        .arg(&backing));
    if !available("mounting a tmpfs (needs root)", mounted) {
        return;
    }
    // Dropped after the image's unmount, declared below.
    let _backing = Unmount(backing.clone());
    let image = backing.join("ext4.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    let made = ran(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-O", "^has_journal"])
        .arg(&image))
        && ran(Command::new("mount")
            .args(["-o", "loop,errors=continue"])
            .arg(&image)
            .arg(&mnt));
    if !available(
        "an ext4 image mounted through a loop device (mkfs.ext4, mount -o loop)",
        made,
    ) {
        return;
    }
    let _image = Unmount(mnt.clone());

    let store = ContentStore::open(
        &mnt.join("store"),
        std::sync::Arc::new(Budget::new(u64::MAX)),
    )
    .unwrap();
    let body = test_bytes(1 << 20, 11);
    let temp = store.create_temp().unwrap();
    temp.write_at(&body, 0).unwrap();
    // The tmpfs full: the image's blocks not yet written cannot be.
    let filler = backing.join("filler");
    let mut fill = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 1 << 20];
    while fill.write_all(&chunk).is_ok() {}
    drop(fill);
    // Another batch's `syncfs` writes the temp file back, fails, and is
    // the one told.
    let other = std::fs::File::open(mnt.join("store")).unwrap();
    assert!(
        rustix::fs::syncfs(&other).is_err(),
        "writes to the image should fail while its tmpfs is full"
    );
    std::fs::remove_file(&filler).unwrap();

    let digest = Digest::of(&body);
    let results = store.commit_synced(vec![(BatchBody::Temp(temp), digest)]);
    assert!(results[0].is_err(), "{results:?}");
    assert!(!store.holds(&digest));
    assert_eq!(crate::support::proxy::temp_files_in(&mnt.join("store")), 0);
}
