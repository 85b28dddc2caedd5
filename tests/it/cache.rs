//! Hits, restarts, revalidation, conditional and range requests.

use std::time::Duration;

use crate::support::proxy::get;
use crate::support::{sha256_hex, test_bytes, toml_urls, MirrorServer, TestProxy};

fn remote(name: &str, mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"{name}\"\nmirrors = {}\n{extra}\n",
        toml_urls(mirrors, "/repo")
    )
}

#[tokio::test]
async fn second_fetch_is_a_hit_with_every_mirror_stopped() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(300_000, 1);
    mirror.put("/repo/pool/a.deb", body.clone());
    let proxy = TestProxy::start(&remote("deb", &[&mirror], "")).await;
    let client = reqwest::Client::new();

    let (status, cache, bytes) = get(&client, &proxy.url("/deb/pool/a.deb")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));

    // The fill commits after the client has every byte: let it finish.
    proxy.settle().await;
    mirror.stop();
    let response = client
        .get(proxy.url("/deb/pool/a.deb"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["x-cache-status"], "HIT");
    assert_eq!(headers["content-length"], "300000");
    assert_eq!(headers["content-type"], "application/x-test");
    assert_eq!(headers["accept-ranges"], "bytes");
    assert_eq!(
        headers["etag"],
        format!("\"{}\"", sha256_hex(&body)).as_str()
    );
    assert_eq!(headers["last-modified"], "Wed, 21 Oct 2015 07:28:00 GMT");
    assert_eq!(
        sha256_hex(&response.bytes().await.unwrap()),
        sha256_hex(&body)
    );
    assert_eq!(mirror.hits("/repo/pool/a.deb"), 1);

    // HEAD of a hit: the headers, no body.
    let head = client
        .head(proxy.url("/deb/pool/a.deb"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], "300000");
    assert!(head.bytes().await.unwrap().is_empty());
    proxy.stop().await;
}

#[tokio::test]
async fn restart_keeps_the_cache() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(50_000, 2);
    mirror.put("/repo/x.bin", body.clone());
    let remotes = remote("r", &[&mirror], "immutable = [\"**\"]");
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();

    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let (_, cache, _) = get(&client, &proxy.url("/r/x.bin")).await;
    assert_eq!(cache, "MISS");
    proxy.stop().await;
    mirror.stop();

    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let (status, cache, bytes) = get(&client, &proxy.url("/r/x.bin")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));
    proxy.stop().await;
}

#[tokio::test]
async fn a_row_whose_blob_is_gone_is_a_miss() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(10_000, 3);
    mirror.put("/repo/gone.bin", body.clone());
    let dir = tempfile::tempdir().unwrap();
    let remotes = remote("r", &[&mirror], "");
    let client = reqwest::Client::new();
    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    get(&client, &proxy.url("/r/gone.bin")).await.2.unwrap();
    proxy.stop().await;

    // Remove every blob (and pack) behind the proxy's back, as a crash or
    // an operator might.
    for place in ["store/blobs", "store/packs"] {
        std::fs::remove_dir_all(dir.path().join(place)).unwrap();
        std::fs::create_dir_all(dir.path().join(place)).unwrap();
    }

    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let (status, cache, bytes) = get(&client, &proxy.url("/r/gone.bin")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&body));
    assert_eq!(mirror.hits("/repo/gone.bin"), 2);
    proxy.stop().await;
}

/// The same while the server runs and holds the blob's file open for its
/// hits (200 KB: a file of its own): a file unlinked behind it is not
/// served from the held descriptor a second later; the next hit finds it
/// gone and fetches the bytes again.
#[tokio::test]
async fn a_held_blob_file_removed_behind_the_server_is_fetched_again() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(200_000, 4);
    mirror.put("/repo/held.bin", body.clone());
    let proxy = TestProxy::start(&remote("r", &[&mirror], "")).await;
    let (client, url) = (reqwest::Client::new(), proxy.url("/r/held.bin"));
    assert_eq!(get(&client, &url).await.1, "MISS");
    proxy.settle().await;
    for round in 0..2 {
        // Apart, so the blob is not read into the in-memory tier.
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(get(&client, &url).await.1, "HIT", "hit {round}");
    }
    let hex = sha256_hex(&body);
    std::fs::remove_file(proxy.dir.join("store/blobs").join(&hex[..2]).join(&hex)).unwrap();
    // A held file's link is looked at once a second.
    tokio::time::sleep(mirrorcache::store::LINK_CHECKED_EVERY + Duration::from_millis(50)).await;
    let (status, cache, bytes) = get(&client, &url).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&bytes.unwrap()), hex);
    assert_eq!(mirror.hits("/repo/held.bin"), 2);
    proxy.stop().await;
}

#[tokio::test]
async fn temp_files_left_by_a_crash_are_removed_at_start() {
    let mirror = MirrorServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("store/tmp")).unwrap();
    std::fs::write(
        dir.path().join("store/tmp/4294967295-0"),
        b"half a download",
    )
    .unwrap();
    let proxy = TestProxy::start_in(dir.path(), &remote("r", &[&mirror], "")).await;
    assert_eq!(proxy.temp_files(), 0);
    proxy.stop().await;
}

#[tokio::test]
async fn range_and_conditional_requests_on_a_hit() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(100_000, 4);
    mirror.put("/repo/r.bin", body.clone());
    let proxy = TestProxy::start(&remote("r", &[&mirror], "immutable = [\"*.bin\"]")).await;
    let client = reqwest::Client::new();
    let url = proxy.url("/r/r.bin");
    get(&client, &url).await.2.unwrap();
    proxy.settle().await;

    let response = client
        .get(&url)
        .header("range", "bytes=10-19")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(response.headers()["content-range"], "bytes 10-19/100000");
    assert_eq!(response.headers()["x-cache-status"], "HIT");
    assert_eq!(&response.bytes().await.unwrap()[..], &body[10..20]);

    let response = client
        .get(&url)
        .header("range", "bytes=-5")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(
        &response.bytes().await.unwrap()[..],
        &body[body.len() - 5..]
    );

    let response = client
        .get(&url)
        .header("range", "bytes=200000-")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 416);
    assert_eq!(response.headers()["content-range"], "bytes */100000");

    let etag = format!("\"{}\"", sha256_hex(&body));
    let response = client
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 304);
    assert_eq!(response.headers()["etag"], etag.as_str());

    let response = client
        .get(&url)
        .header("if-none-match", "\"other\"")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let response = client
        .get(&url)
        .header("if-modified-since", "Wed, 21 Oct 2015 07:28:00 GMT")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 304);
    let response = client
        .get(&url)
        .header("if-modified-since", "Tue, 20 Oct 2015 07:28:00 GMT")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // If-Range with a stale validator: the whole body, not a range.
    let response = client
        .get(&url)
        .header("range", "bytes=0-9")
        .header("if-range", "\"old\"")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(mirror.hits("/repo/r.bin"), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn stale_entries_are_revalidated_and_replaced_when_changed() {
    let mirror = MirrorServer::start().await;
    mirror.put("/repo/index.json", b"version 1".to_vec());
    // Fresh for zero seconds: every hit is a revalidation.
    let proxy = TestProxy::start(&remote("r", &[&mirror], "revalidate_after = \"0s\"")).await;
    let client = reqwest::Client::new();
    let url = proxy.url("/r/index.json");

    let (_, cache, bytes) = get(&client, &url).await;
    assert_eq!(
        (cache.as_str(), &bytes.unwrap()[..]),
        ("MISS", &b"version 1"[..])
    );
    proxy.settle().await;
    let (status, cache, bytes) = get(&client, &url).await;
    assert_eq!(
        (status, cache.as_str(), &bytes.unwrap()[..]),
        (200, "REVALIDATED", &b"version 1"[..])
    );
    assert_eq!(mirror.hits("/repo/index.json"), 2);
    proxy.settle().await;

    mirror.put("/repo/index.json", b"version 2".to_vec());
    let (_, cache, bytes) = get(&client, &url).await;
    assert_eq!(
        (cache.as_str(), &bytes.unwrap()[..]),
        ("MISS", &b"version 2"[..])
    );
    proxy.stop().await;
}

/// A fresh row goes into the entry index only: a run of misses never read
/// again does not fill the entry cache. Hit again soon, the entry enters
/// the entry cache; a commit of new bytes for its key replaces it there, so
/// the next hit serves the new bytes.
#[tokio::test]
async fn an_entry_enters_the_entry_cache_on_its_hits_and_leaves_with_its_row() {
    let mirror = MirrorServer::start().await;
    mirror.put("/repo/index.json", b"version 1".to_vec());
    let proxy = TestProxy::start(&remote("r", &[&mirror], "revalidate_after = \"1s\"")).await;
    let memory = &proxy.running.proxy.cache.meta.memory;
    let path = mirrorcache::path::ArtifactPath::parse("/r/index.json").unwrap();
    let client = reqwest::Client::new();
    let url = proxy.url("/r/index.json");

    assert_eq!(get(&client, &url).await.1, "MISS");
    proxy.settle().await;
    assert!(
        memory.lookup_in_memory(&path).is_none(),
        "held on its commit"
    );
    let mut hits = 0;
    while memory.lookup_in_memory(&path).is_none() {
        let (status, cache, bytes) = get(&client, &url).await;
        assert_eq!(
            (status, cache.as_str(), &bytes.unwrap()[..]),
            (200, "HIT", &b"version 1"[..])
        );
        hits += 1;
        assert!(hits < 500, "never held after {hits} hits");
    }
    let held = memory.lookup_in_memory(&path).unwrap();
    assert_eq!(held.digest.to_hex(), sha256_hex(b"version 1"));

    mirror.put("/repo/index.json", b"version 2".to_vec());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (_, cache, bytes) = get(&client, &url).await;
    assert_eq!(
        (cache.as_str(), &bytes.unwrap()[..]),
        ("MISS", &b"version 2"[..])
    );
    proxy.settle().await;
    if let Some(entry) = memory.lookup_in_memory(&path) {
        assert_eq!(entry.digest.to_hex(), sha256_hex(b"version 2"));
    }
    let (status, cache, bytes) = get(&client, &url).await;
    assert_eq!(
        (status, cache.as_str(), &bytes.unwrap()[..]),
        (200, "HIT", &b"version 2"[..])
    );
    assert_eq!(mirror.hits("/repo/index.json"), 2);
    proxy.stop().await;
}

#[tokio::test]
async fn fresh_entries_are_not_revalidated() {
    let mirror = MirrorServer::start().await;
    mirror.put("/repo/index.json", b"v".to_vec());
    let proxy = TestProxy::start(&remote("r", &[&mirror], "revalidate_after = \"1h\"")).await;
    let client = reqwest::Client::new();
    for _ in 0..5 {
        get(&client, &proxy.url("/r/index.json")).await.2.unwrap();
    }
    assert_eq!(mirror.hits("/repo/index.json"), 1);
    proxy.stop().await;
}

/// Hits touch only memory. With the evictor's rounds held off (and with
/// them its batched flush of access times and hit counts), a trigger on
/// every table of the metadata database counts no write across many hits of
/// each shape: GET, HEAD, a range, a 304. The flush afterwards does write,
/// so the triggers would have seen a hit's write.
#[tokio::test]
async fn a_hit_never_writes_to_the_database() {
    let mirror = MirrorServer::start().await;
    let body = test_bytes(20_000, 4);
    mirror.put("/repo/hot.bin", body.clone());
    let dir = tempfile::tempdir().unwrap();
    let remotes = remote("r", &[&mirror], "immutable = [\"**\"]");
    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let client = reqwest::Client::new();
    let url = proxy.url("/r/hot.bin");
    assert_eq!(get(&client, &url).await.1, "MISS");
    proxy.settle().await;
    assert_eq!(get(&client, &url).await.1, "HIT");

    let no_rounds = proxy.running.proxy.cache.evictor.hold_rounds().await;
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}/meta.db", dir.path().display()))
        .await
        .unwrap();
    count_every_write(&db).await;
    let etag = format!("\"{}\"", sha256_hex(&body));
    for _ in 0..25 {
        let requests = [
            client.get(&url),
            client.head(&url),
            client.get(&url).header("range", "bytes=100-199"),
            client.get(&url).header("if-none-match", &etag),
        ];
        for (request, status) in requests.into_iter().zip([200, 200, 206, 304]) {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), status);
            assert_eq!(response.headers()["x-cache-status"], "HIT");
            response.bytes().await.unwrap();
        }
    }
    assert_eq!(writes(&db).await, 0, "a hit wrote to the database");

    // The hits were counted, in memory: the batched flush writes them.
    drop(no_rounds);
    let flushed = proxy.running.proxy.cache.meta.flush_access_times();
    assert_eq!(flushed.await.unwrap(), 1);
    assert!(writes(&db).await > 0, "the triggers did not see the flush");
    proxy.stop().await;
}

/// Installs triggers counting every insert, update and delete on every table
/// of a SQLite database into `test_writes`.
async fn count_every_write(db: &sqlx::SqlitePool) {
    sqlx::query("CREATE TABLE test_writes (tbl TEXT NOT NULL)")
        .execute(db)
        .await
        .unwrap();
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT name FROM sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name != 'test_writes'",
    )
    .fetch_all(db)
    .await
    .unwrap();
    assert!(tables.iter().any(|(t,)| t == "entries"), "{tables:?}");
    for (table,) in &tables {
        for event in ["INSERT", "UPDATE", "DELETE"] {
            sqlx::query(&format!(
                "CREATE TRIGGER test_{table}_{event} AFTER {event} ON {table} \
                 BEGIN INSERT INTO test_writes VALUES ('{table}'); END"
            ))
            .execute(db)
            .await
            .unwrap();
        }
    }
}

async fn writes(db: &sqlx::SqlitePool) -> i64 {
    sqlx::query_as::<_, (i64,)>("SELECT COUNT(*) FROM test_writes")
        .fetch_one(db)
        .await
        .unwrap()
        .0
}

/// Hits do not depend on how many entries the in-memory entry cache holds:
/// with room for one entry, 30 entries after a restart (loaded into the
/// entry index at start-up) are each a HIT with no row read from the
/// database, and on SQLite (this process's own database) a cold miss reads
/// none either: the index knows the key has no row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_read_no_row_whatever_the_entry_cache_holds() {
    let mirror = MirrorServer::start().await;
    for i in 0..31 {
        mirror.put(&format!("/m/f{i}"), test_bytes(3000, 40 + i));
    }
    mirror.put_dated(
        "/m/dated",
        b"dated".to_vec(),
        std::time::UNIX_EPOCH + Duration::from_secs(1_600_000_000),
    );
    let dir = tempfile::tempdir().unwrap();
    let remotes = format!(
        "[[remote]]\nname = \"r\"\nmirrors = {}\nimmutable = [\"**\"]\n",
        toml_urls(&[&mirror], "/m")
    );
    let text = crate::support::proxy::config_text(dir.path(), &remotes)
        .replace("[metadata]\n", "[metadata]\ncache_entries = 1\n");
    let running = crate::support::proxy::start_text(&text).await;
    let client = reqwest::Client::new();
    let url = |running: &mirrorcache::http::server::Running, p: &str| {
        format!("http://{}{p}", running.local_addr)
    };
    for i in 0..30 {
        get(&client, &url(&running, &format!("/r/f{i}")))
            .await
            .2
            .unwrap();
    }
    get(&client, &url(&running, "/r/dated")).await.2.unwrap();
    running.proxy.fills.wait_idle().await;
    let hit = client.get(url(&running, "/r/dated")).send().await.unwrap();
    assert_eq!(hit.headers()["x-cache-status"], "HIT");
    let modified = hit.headers()["last-modified"].clone();
    running.shutdown().await;

    let running = crate::support::proxy::start_text(&text).await;
    let meta = &running.proxy.cache.meta;
    // The index loads in the background (a key it does not list yet is read
    // from its row meanwhile): counted once it is loaded.
    meta.memory.index.loaded().await;
    let reads = meta.db.row_reads();
    for round in 0..2 {
        for i in 0..30 {
            let (status, cache, bytes) = get(&client, &url(&running, &format!("/r/f{i}"))).await;
            assert_eq!((status, cache.as_str()), (200, "HIT"), "round {round} f{i}");
            assert_eq!(
                sha256_hex(&bytes.unwrap()),
                sha256_hex(&test_bytes(3000, 40 + i))
            );
        }
    }
    // Built from the index, a hit answers as one built from the row.
    let hit = client.get(url(&running, "/r/dated")).send().await.unwrap();
    assert_eq!(hit.headers()["x-cache-status"], "HIT");
    assert_eq!(hit.headers()["last-modified"], modified);
    assert_eq!(hit.headers()["content-type"], "application/x-test");
    assert_eq!(meta.db.row_reads(), reads, "a hit read a row");
    let (status, cache, _) = get(&client, &url(&running, "/r/f30")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    // A key the complete index does not list has no row, for the request
    // and for the fill's double check under its slot (no other process
    // wrote: `meta::other_writers`); nothing declares it (the declared keys).
    assert_eq!(meta.db.row_reads(), reads, "a cold miss reads no row");
    assert_eq!(mirror.hits("/m/f0"), 1);
    running.shutdown().await;
}

/// A config with one remote `r`, everything immutable, on `mirror`'s `/m`.
fn immutable_remote(dir: &std::path::Path, mirror: &MirrorServer) -> String {
    let remotes = format!(
        "[[remote]]\nname = \"r\"\nmirrors = {}\nimmutable = [\"**\"]\n",
        toml_urls(&[mirror], "/m")
    );
    crate::support::proxy::config_text(dir, &remotes)
}

#[tokio::test]
async fn a_cold_miss_reads_no_row_and_its_hits_none() {
    let mirror = MirrorServer::start().await;
    for i in 0..8 {
        mirror.put(&format!("/m/c{i}"), test_bytes(2000, 90 + i));
    }
    let dir = tempfile::tempdir().unwrap();
    let text = immutable_remote(dir.path(), &mirror);
    let running = crate::support::proxy::start_text(&text).await;
    let meta = &running.proxy.cache.meta;
    meta.memory.index.loaded().await;
    assert!(
        meta.memory.index.is_complete(),
        "SQLite without Redis: complete once loaded"
    );
    let client = reqwest::Client::new();
    let reads = meta.db.row_reads();
    for i in 0..8 {
        let url = format!("http://{}/r/c{i}", running.local_addr);
        let (status, cache, bytes) = get(&client, &url).await;
        assert_eq!((status, cache.as_str()), (200, "MISS"), "c{i}");
        assert_eq!(
            sha256_hex(&bytes.unwrap()),
            sha256_hex(&test_bytes(2000, 90 + i))
        );
        running.proxy.fills.wait_idle().await;
        assert_eq!(meta.db.row_reads(), reads, "c{i}: no row read");
    }
    for i in 0..8 {
        let url = format!("http://{}/r/c{i}", running.local_addr);
        let (status, cache, _) = get(&client, &url).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "c{i}");
    }
    assert_eq!(meta.db.row_reads(), reads, "a hit read a row");
    assert_eq!(mirror.hits("/m/c0"), 1);
    running.shutdown().await;
}

/// A row another process writes beside the running server (as `mirrorcache
/// import` does) is served by the server's next miss of it, from the row,
/// not the mirror; and once memory is loaded anew, cold misses read no row
/// again.
#[tokio::test]
async fn a_row_another_process_writes_is_found_and_memory_is_whole_again_after() {
    use mirrorcache::cache::Cache;
    let mirror = MirrorServer::start().await;
    mirror.put("/m/mirror.bin", test_bytes(2000, 7));
    mirror.put("/m/after.bin", test_bytes(2000, 8));
    let dir = tempfile::tempdir().unwrap();
    let text = immutable_remote(dir.path(), &mirror);
    let running = crate::support::proxy::start_text(&text).await;
    let meta = &running.proxy.cache.meta;
    meta.memory.index.loaded().await;
    assert!(meta.memory.index.is_complete());

    // The other process: a cache of its own on the same database and store.
    let config = mirrorcache::config::Config::parse(&text, "test.toml").unwrap();
    let tool = Cache::open(
        &config,
        std::sync::Arc::new(mirrorcache::metrics::Metrics::new()),
    )
    .await
    .unwrap();
    let theirs = test_bytes(3000, 9);
    crate::support::proxy::commit_bytes(&tool, "/r/mirror.bin", &theirs).await;
    tool.meta.db.close().await;

    let client = reqwest::Client::new();
    let url = |p: &str| format!("http://{}/r/{p}", running.local_addr);
    let (status, _, bytes) = get(&client, &url("mirror.bin")).await;
    assert_eq!(status, 200);
    assert_eq!(
        sha256_hex(&bytes.unwrap()),
        sha256_hex(&theirs),
        "the other process's row"
    );
    assert_eq!(
        mirror.hits("/m/mirror.bin"),
        0,
        "no fetch of what the row has"
    );

    // Memory is loaded anew: a cold miss is again answered without a row read.
    let loaded = async {
        while !meta.memory.index.is_complete() || !meta.memory.declared_keys.is_complete() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), loaded)
        .await
        .expect("memory loaded anew");
    let reads = meta.db.row_reads();
    let (status, cache, bytes) = get(&client, &url("after.bin")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(
        sha256_hex(&bytes.unwrap()),
        sha256_hex(&test_bytes(2000, 8))
    );
    running.proxy.fills.wait_idle().await;
    assert_eq!(
        meta.db.row_reads(),
        reads,
        "no row read once memory is whole"
    );
    running.shutdown().await;
}
