//! Purges win: after the admin API's DELETE of a path (or purge of a
//! remote) answers, the next request for the path goes upstream, whatever
//! was in flight — an entry in memory, a commit queued or running, a fill
//! still downloading — and nothing a fill begun before the purge fetched is
//! served later. Each test counts the mirror's requests.

use std::time::Duration;

use crate::support::proxy::{config_text, get, start_text};
use crate::support::{sha256_hex, test_bytes, toml_urls, wait_until, Fault, MirrorServer};

/// Pins off: these tests change a path's bytes upstream after a purge, which
/// a pin on first use refuses by design (clearing a pin is its own admin
/// call: tests/it/pins.rs).
fn config(dir: &std::path::Path, mirror: &MirrorServer) -> String {
    let remote = format!(
        "[[remote]]\nname = \"r\"\nmirrors = {}\nimmutable = [\"**\"]\npin_on_first_use = false\n",
        toml_urls(&[mirror], "/m")
    );
    config_text(dir, &remote).replace("[server]\n", "[server]\nadmin_token = \"t\"\n")
}

async fn delete(client: &reqwest::Client, base: &str, path: &str) -> serde_json::Value {
    let response = client
        .delete(format!("{base}/-/cache{path}"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

/// 20 rounds of GET (a MISS, its client has every byte) then at once
/// DELETE: the DELETE says it removed something (the row, or the fill whose
/// commit had not landed yet), and the next GET goes upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_right_after_a_fill_sends_the_next_request_upstream() {
    let mirror = MirrorServer::start().await;
    for i in 0..20 {
        mirror.put(&format!("/m/f{i}"), test_bytes(4000, 900 + i));
    }
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config(dir.path(), &mirror)).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    for i in 0..20u64 {
        let path = format!("/r/f{i}");
        let want = sha256_hex(&test_bytes(4000, 900 + i));
        let (status, cache, bytes) = get(&client, &format!("{base}{path}")).await;
        assert_eq!((status, cache.as_str()), (200, "MISS"), "round {i}");
        assert_eq!(sha256_hex(&bytes.unwrap()), want);
        let answer = delete(&client, &base, &path).await;
        assert_eq!(answer["removed"], true, "round {i}: {answer}");
        let removed =
            answer["entries"].as_u64().unwrap() + answer["fills_cancelled"].as_u64().unwrap();
        assert!(removed >= 1, "round {i}: {answer}");
        let (status, cache, bytes) = get(&client, &format!("{base}{path}")).await;
        assert_eq!(
            (status, cache.as_str()),
            (200, "MISS"),
            "round {i}: {answer}"
        );
        assert_eq!(sha256_hex(&bytes.unwrap()), want);
        assert_eq!(mirror.hits(&format!("/m/f{i}")), 2, "round {i}");
    }
    running.proxy.fills.wait_idle().await;
    for i in 0..20 {
        assert_eq!(get(&client, &format!("{base}/r/f{i}")).await.1, "HIT");
        assert_eq!(mirror.hits(&format!("/m/f{i}")), 2);
    }
    running.shutdown().await;
}

/// The commit held: a fill's client has its bytes, its commit is queued.
/// The DELETE finds no row but cancels that fill; released, the commit
/// leaves nothing: no row, and the next GET goes upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_before_the_commit_lands_leaves_no_row() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/a", test_bytes(5000, 1));
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config(dir.path(), &mirror)).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    let hold = running.proxy.cache.commits.hold().await;
    assert_eq!(get(&client, &format!("{base}/r/a")).await.1, "MISS");
    // Before the purge the finished fill is joined (served from its file).
    assert_eq!(get(&client, &format!("{base}/r/a")).await.1, "HIT");
    let answer = delete(&client, &base, "/r/a").await;
    assert_eq!(
        (
            &answer["entries"],
            &answer["fills_cancelled"],
            &answer["removed"]
        ),
        (&0.into(), &1.into(), &true.into()),
        "{answer}"
    );
    drop(hold);
    running.proxy.fills.wait_idle().await;
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}/meta.db", dir.path().display()))
        .await
        .unwrap();
    let (rows,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM entries")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(rows, 0, "the purged fill's commit wrote a row");
    assert_eq!(running.proxy.cache.size(), 0);
    assert_eq!(get(&client, &format!("{base}/r/a")).await.1, "MISS");
    assert_eq!(mirror.hits("/m/a"), 2);
    running.shutdown().await;
}

/// A slow fill of v1 is purged while it streams (its client still gets all
/// of v1); the mirror now has v2, which the next request fetches at once
/// and commits first. The slow fill ends after it and must not put v1 back:
/// afterwards the path is a HIT of v2. The same with a purge of the remote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_during_a_slow_fill_is_not_undone_when_that_fill_ends() {
    for remote_wide in [false, true] {
        let mirror = MirrorServer::start().await;
        let (v1, v2) = (test_bytes(1024 * 1024, 11), test_bytes(1024 * 1024, 12));
        mirror.put("/m/big", v1.clone());
        // 16 pieces, 40 ms apart: about 0.6 s.
        mirror.set_fault(Fault::SlowBody(Duration::from_millis(40)));
        let dir = tempfile::tempdir().unwrap();
        let running = start_text(&config(dir.path(), &mirror)).await;
        let base = format!("http://{}", running.local_addr);
        let client = reqwest::Client::new();
        let first = {
            let (client, url) = (client.clone(), format!("{base}/r/big"));
            tokio::spawn(async move { get(&client, &url).await })
        };
        wait_until("the slow fill to stream", async || {
            running
                .proxy
                .fills
                .snapshot()
                .iter()
                .any(|f| f.stage == "streaming" && f.written > 0)
        })
        .await;
        let answer = if remote_wide {
            let response = client
                .post(format!("{base}/-/cache/r/purge"))
                .bearer_auth("t")
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            serde_json::from_slice::<serde_json::Value>(&response.bytes().await.unwrap()).unwrap()
        } else {
            delete(&client, &base, "/r/big").await
        };
        assert_eq!(answer["fills_cancelled"], 1, "{answer}");
        mirror.set_fault(Fault::None);
        mirror.put("/m/big", v2.clone());
        let (status, cache, bytes) = get(&client, &format!("{base}/r/big")).await;
        assert_eq!((status, cache.as_str()), (200, "MISS"));
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&v2));
        // The first client read the purged fill to its end.
        let (status, _, bytes) = first.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&v1));
        running.proxy.fills.wait_idle().await;
        let (status, cache, bytes) = get(&client, &format!("{base}/r/big")).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"));
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&v2), "v1 came back");
        assert_eq!(mirror.hits("/m/big"), 2);
        assert_eq!(running.proxy.cache.size(), v2.len() as u64);
        assert_eq!(
            crate::support::proxy::temp_files_in(&dir.path().join("store")),
            0
        );
        running.shutdown().await;
    }
}

/// A purge racing the commit: 40 rounds, each a GET (its client has the
/// bytes) then a DELETE sent 0–4 ms later, so the DELETE falls at every
/// stage of the group commit (queued, batching, syncing, in the
/// transaction, done). Every round the next GET goes upstream and is the
/// one committed: two upstream requests per path, a HIT after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_racing_a_commit_always_wins() {
    let mirror = MirrorServer::start().await;
    const ROUNDS: u64 = 40;
    for i in 0..ROUNDS {
        mirror.put(&format!("/m/p{i}"), test_bytes(2000, 300 + i));
    }
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config(dir.path(), &mirror)).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    for i in 0..ROUNDS {
        let path = format!("/r/p{i}");
        assert_eq!(get(&client, &format!("{base}{path}")).await.1, "MISS");
        tokio::time::sleep(Duration::from_micros(100 * (i % 40))).await;
        let answer = delete(&client, &base, &path).await;
        assert_eq!(answer["removed"], true, "round {i}: {answer}");
        let (status, cache, bytes) = get(&client, &format!("{base}{path}")).await;
        assert_eq!(
            (status, cache.as_str()),
            (200, "MISS"),
            "round {i}: {answer}"
        );
        assert_eq!(
            sha256_hex(&bytes.unwrap()),
            sha256_hex(&test_bytes(2000, 300 + i))
        );
    }
    running.proxy.fills.wait_idle().await;
    let mut upstream = 0;
    for i in 0..ROUNDS {
        assert_eq!(
            get(&client, &format!("{base}/r/p{i}")).await.1,
            "HIT",
            "p{i}"
        );
        upstream += mirror.hits(&format!("/m/p{i}"));
    }
    assert_eq!(upstream, 2 * ROUNDS as usize);
    running.shutdown().await;
}

/// The descriptors this process holds on the blob `hex` (its file, or the
/// file once unlinked).
fn descriptors_on(hex: &str) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.to_string_lossy().contains(hex))
        .count()
}

/// A blob of its own file (200 KB: above `pack_below`, within
/// `memory_object_max`) is held open by its first hit, and the hits after
/// it read the same descriptor (one, however many hits); purged, the
/// server lets it go with the file, so the blob's disk space is freed at
/// once, and the next GET goes upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_blob_file_is_let_go_and_its_space_freed() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(200_000, 77);
    mirror.put("/m/big", body.clone());
    let hex = sha256_hex(&body);
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config(dir.path(), &mirror)).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    let url = format!("{base}/r/big");
    assert_eq!(get(&client, &url).await.1, "MISS");
    running.proxy.fills.wait_idle().await;
    for round in 0..3 {
        // Apart, so the blob is not read into the in-memory tier.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (status, cache, bytes) = get(&client, &url).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "hit {round}");
        assert_eq!(sha256_hex(&bytes.unwrap()), hex, "hit {round}");
        assert_eq!(descriptors_on(&hex), 1, "hit {round}");
    }
    assert_eq!(running.proxy.cache.memory_loads(), 0);
    let answer = delete(&client, &base, "/r/big").await;
    assert_eq!(answer["entries"], 1, "{answer}");
    assert_eq!(descriptors_on(&hex), 0, "the purged blob is still held");
    let blobs = dir.path().join("store/blobs");
    assert!(!blobs.join(&hex[..2]).join(&hex).exists());
    let (status, cache, bytes) = get(&client, &url).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&bytes.unwrap()), hex);
    assert_eq!(mirror.hits("/m/big"), 2);
    running.shutdown().await;
}
