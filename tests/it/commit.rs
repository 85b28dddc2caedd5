//! The group commit: a fill's `max_fills` slot is free once its bytes are
//! written, commits wait in a bounded queue of their own, and a full queue
//! holds back the next fill's last bytes (back-pressure) instead of
//! refusing anyone; fills that finish together share one batch, a large
//! one synced with `syncfs`.

use crate::support::proxy::{cache_status, config_text, get, metric, start_text, temp_files_in};
use crate::support::{sha256_hex, test_bytes, toml_urls, wait_until, Fault, MirrorServer};

fn config(dir: &std::path::Path, mirror: &MirrorServer, server_keys: &str) -> String {
    let remote = format!(
        "[[remote]]\nname = \"r\"\nmirrors = {}\nimmutable = [\"**\"]\n",
        toml_urls(&[mirror], "/m")
    );
    config_text(dir, &remote).replace("[server]\n", &format!("[server]\n{server_keys}\n"))
}

async fn metrics(client: &reqwest::Client, base: &str) -> String {
    client
        .get(format!("{base}/-/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// With the committer held, misses go on one after another although
/// `max_fills = 2` and none of them is committed: each gave its slot back
/// when its bytes were written. Once the queue (as long as `max_fills`) is
/// full, the next fill waits for a place with its last bytes held back:
/// its client is not answered 503, only slower. Released, everything
/// commits, in fewer batches than fills, and every path is a HIT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_free_when_bytes_are_written_and_a_full_commit_queue_holds_back_not_refuses() {
    let mirror = MirrorServer::start().await;
    let body = |i: u64| test_bytes(3000, 500 + i);
    for i in 0..40 {
        mirror.put(&format!("/m/f{i}"), body(i));
    }
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config(dir.path(), &mirror, "max_fills = 2")).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();

    let hold = running.proxy.cache.commits.hold().await;
    let mut answered = 0u64;
    let waiting = loop {
        assert!(answered < 40, "the commit queue never filled up");
        let (client2, url) = (client.clone(), format!("{base}/r/f{answered}"));
        let fetch = tokio::spawn(async move { get(&client2, &url).await });
        wait_until(
            "the miss to be answered or to wait for the queue",
            async || {
                fetch.is_finished()
                    || metric(
                        &metrics(&client, &base).await,
                        "mirrorcache_commits_waiting",
                    ) == 1.0
            },
        )
        .await;
        if !fetch.is_finished() {
            break fetch;
        }
        let (status, cache, bytes) = fetch.await.unwrap();
        assert_eq!((status, cache.as_str()), (200, "MISS"), "f{answered}");
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body(answered)));
        answered += 1;
    };
    // Two queued and at least one taken by the held committer.
    assert!(
        answered >= 3,
        "{answered} answered before the queue was full"
    );
    let text = metrics(&client, &base).await;
    assert_eq!(metric(&text, "mirrorcache_commits_total"), 0.0);
    // The answered ones have their places; the waiting one has none yet.
    assert_eq!(metric(&text, "mirrorcache_commits_queued"), answered as f64);
    assert_eq!(metric(&text, "mirrorcache_commits_waiting"), 1.0);
    // Nothing committed: an answered path asked again joins its fill (a HIT
    // from the fill's file), with no second upstream request.
    assert_eq!(get(&client, &format!("{base}/r/f0")).await.1, "HIT");
    assert!(
        !waiting.is_finished(),
        "the waiting fill's client got its end"
    );

    drop(hold);
    let (status, cache, bytes) = waiting.await.unwrap();
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body(answered)));
    running.proxy.fills.wait_idle().await;
    let fills = answered + 1;
    let text = metrics(&client, &base).await;
    assert_eq!(metric(&text, "mirrorcache_commits_total"), fills as f64);
    assert!(metric(&text, "mirrorcache_commit_batches_total") < fills as f64);
    assert_eq!(metric(&text, "mirrorcache_commits_queued"), 0.0);
    for i in 0..fills {
        let (status, cache, bytes) = get(&client, &format!("{base}/r/f{i}")).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "f{i}");
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body(i)));
        assert_eq!(mirror.hits(&format!("/m/f{i}")), 1);
    }
    running.shutdown().await;
}

/// 64 names with the same bytes (commits of one digest, which used to
/// queue behind each other holding their slots), fetched by 16 clients at
/// once with `max_fills = 16`: every answer is a 200 with the bytes, none a
/// 503; the store keeps one blob (counted once), every name is a HIT
/// afterwards and each went upstream once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_names_with_the_same_bytes_commit_together_into_one_blob() {
    let mirror = MirrorServer::start().await;
    let bytes = test_bytes(1024, 77);
    for i in 0..64 {
        mirror.put(&format!("/m/same/{i}"), bytes.clone());
    }
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config(dir.path(), &mirror, "max_fills = 16")).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    let workers: Vec<_> = (0..16)
        .map(|w| {
            let (client, base) = (client.clone(), base.clone());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for i in (w..64).step_by(16) {
                    let (status, _, body) = get(&client, &format!("{base}/r/same/{i}")).await;
                    answers.push((i, status, body.map(|b| sha256_hex(&b)).ok()));
                }
                answers
            })
        })
        .collect();
    let want = sha256_hex(&bytes);
    for worker in workers {
        for (i, status, got) in worker.await.unwrap() {
            assert_eq!(status, 200, "same/{i}");
            assert_eq!(got.as_deref(), Some(want.as_str()), "same/{i}");
        }
    }
    running.proxy.fills.wait_idle().await;
    for i in 0..64 {
        assert_eq!(get(&client, &format!("{base}/r/same/{i}")).await.1, "HIT");
        assert_eq!(mirror.hits(&format!("/m/same/{i}")), 1, "same/{i}");
    }
    assert_eq!(running.proxy.cache.size(), 1024);
    assert_eq!(running.proxy.cache.local_size().unwrap(), 1024);
    running.shutdown().await;
}

/// 40 misses of distinct bytes whose commits pile up behind the held
/// committer, then commit in a batch large enough to be synced with
/// `syncfs` (the data before the renames, the names after): every one is
/// a HIT with its bytes, and still is after a restart on the same store
/// and database, with one upstream request each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_of_distinct_blobs_commits_whole_and_survives_a_restart() {
    let mirror = MirrorServer::start().await;
    let body = |i: u64| test_bytes(2000, 900 + i);
    for i in 0..40 {
        mirror.put(&format!("/m/d{i}"), body(i));
    }
    let dir = tempfile::tempdir().unwrap();
    let text = config(dir.path(), &mirror, "max_fills = 64");
    let running = start_text(&text).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();
    let hold = running.proxy.cache.commits.hold().await;
    for i in 0..40 {
        let (status, cache, bytes) = get(&client, &format!("{base}/r/d{i}")).await;
        assert_eq!((status, cache.as_str()), (200, "MISS"), "d{i}");
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body(i)));
    }
    drop(hold);
    running.proxy.fills.wait_idle().await;
    let text_metrics = metrics(&client, &base).await;
    assert_eq!(metric(&text_metrics, "mirrorcache_commits_total"), 40.0);
    // The one formed before the hold, and the rest together (16 or more).
    assert!(metric(&text_metrics, "mirrorcache_commit_batches_total") <= 2.0);
    running.shutdown().await;

    let running = start_text(&text).await;
    let base = format!("http://{}", running.local_addr);
    for i in 0..40 {
        let (status, cache, bytes) = get(&client, &format!("{base}/r/d{i}")).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "d{i}");
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body(i)));
        assert_eq!(mirror.hits(&format!("/m/d{i}")), 1, "d{i}");
    }
    assert_eq!(running.proxy.cache.local_size().unwrap(), 40 * 2000);
    running.shutdown().await;
}

/// A small body that comes whole (64 KiB or less, announced or chunked)
/// is kept in memory until its commit writes it: with the committer held,
/// its fill leaves no file in the store, its client and a second request
/// get its bytes (the second a HIT from the fill, no second upstream
/// request), and a larger body's fill has its temp file. Released, both
/// are committed, HITs from the store with their bytes, and no temp file
/// is left. A chunked body of 3 MiB (hashed on a thread of its own from
/// its first MiB on) is served and kept with its own sha256.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_body_stays_in_memory_until_its_commit_writes_it() {
    let mirror = MirrorServer::start().await;
    let small = test_bytes(3000, 41);
    let large = test_bytes(200 * 1024, 42);
    mirror.put("/m/small", small.clone());
    mirror.put("/m/large", large.clone());
    let chunked = MirrorServer::start().await;
    let long = test_bytes(3 * 1024 * 1024 + 123, 43);
    let short = test_bytes(5000, 44);
    chunked.put("/m/long", long.clone());
    chunked.put("/m/short", short.clone());
    chunked.set_fault(Fault::Chunked);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let text = config(dir.path(), &mirror, "").replace(
        "[[remote]]",
        &format!(
            "[[remote]]\nname = \"c\"\nmirrors = {}\nimmutable = [\"**\"]\n\n[[remote]]",
            toml_urls(&[&chunked], "/m")
        ),
    );
    let running = start_text(&text).await;
    let base = format!("http://{}", running.local_addr);
    let client = reqwest::Client::new();

    let hold = running.proxy.cache.commits.hold().await;
    for (path, bytes) in [("/r/small", &small), ("/c/short", &short)] {
        // Answered from memory in one frame of known length: with its
        // length, also when the mirror sent it chunked. (The fill yields
        // after publishing the whole body, so this first reader sees it
        // still `Streaming`, before the fill settles.)
        let response = client.get(format!("{base}{path}")).send().await.unwrap();
        let length = response.headers().get("content-length").cloned();
        let (status, cache) = (response.status().as_u16(), cache_status(&response));
        let body = response.bytes().await.unwrap();
        assert_eq!((status, cache.as_str()), (200, "MISS"), "{path}");
        assert_eq!(length.unwrap(), bytes.len().to_string().as_str(), "{path}");
        assert_eq!(sha256_hex(&body), sha256_hex(bytes), "{path}");
        assert_eq!(
            temp_files_in(&store),
            0,
            "{path}: a file was made during the fill"
        );
        let (status, cache, body) = get(&client, &format!("{base}{path}")).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "{path}");
        assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(bytes), "{path}");
    }
    assert_eq!(mirror.hits("/m/small"), 1);
    assert_eq!(chunked.hits("/m/short"), 1);
    let (status, _, body) = get(&client, &format!("{base}/r/large")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&large));
    assert_eq!(temp_files_in(&store), 1, "the larger body's temp file");
    drop(hold);

    let (status, _, body) = get(&client, &format!("{base}/c/long")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&long));
    running.proxy.fills.wait_idle().await;
    assert_eq!(temp_files_in(&store), 0);
    for (path, bytes) in [
        ("/r/small", &small),
        ("/c/short", &short),
        ("/r/large", &large),
        ("/c/long", &long),
    ] {
        let (status, cache, body) = get(&client, &format!("{base}{path}")).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "{path}");
        assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(bytes), "{path}");
    }
    assert_eq!(mirror.hits("/m/small"), 1);
    assert_eq!(chunked.hits("/m/long"), 1);
    let rows: Vec<(String, i64)> = {
        let db = sqlx::SqlitePool::connect(&format!("sqlite://{}/meta.db", dir.path().display()))
            .await
            .unwrap();
        sqlx::query_as("SELECT path, size FROM entries ORDER BY path")
            .fetch_all(&db)
            .await
            .unwrap()
    };
    assert_eq!(rows.len(), 4, "{rows:?}");
    running.shutdown().await;
}
