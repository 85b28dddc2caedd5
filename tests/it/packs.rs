//! The pack store: small blobs appended to pack files by the group commit,
//! served whole and by range from them (across a restart), compacted once
//! more than half dead while a reader holds the old pack, and whole after a
//! `kill -9` of a real `mirrorcache serve` during commits and compactions:
//! every row's bytes hash right, no two places overlap, and no pack keeps
//! bytes past the last one a place names.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use mirrorcache::path::ArtifactPath;

use crate::support::proxy::{commit_bytes, config_text, get, start_text};
use crate::support::{sha256_hex, test_bytes, BinaryProxy, MirrorServer};

fn remote(mirror: &MirrorServer) -> String {
    format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\nimmutable = [\"**\"]\n",
        mirror.url("/m")
    )
}

/// A config keeping no blob in memory (hits read the store).
fn packing_config(dir: &Path, mirror: &MirrorServer, storage: &str) -> String {
    config_text(dir, &remote(mirror)).replace(
        "[storage]\n",
        &format!("[storage]\nmemory_cache_size = \"0\"\n{storage}"),
    )
}

/// The pack files of a store, by name, with their lengths.
fn packs(store: &Path) -> HashMap<String, u64> {
    std::fs::read_dir(store.join("packs"))
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
                .map(|e| {
                    let len = e.metadata().map_or(0, |m| m.len());
                    (e.file_name().to_string_lossy().into_owned(), len)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How many blob files (not packed) the store holds.
fn blob_files(store: &Path) -> usize {
    let mut n = 0;
    for dir in std::fs::read_dir(store.join("blobs")).unwrap().flatten() {
        if let Ok(files) = std::fs::read_dir(dir.path()) {
            n += files.count();
        }
    }
    n
}

/// A pool on the SQLite database at `db`.
async fn sqlite(db: &Path) -> sqlx::SqlitePool {
    sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap()
}

/// The place rows (digest, pack, start, length) of the database at `db`.
async fn place_rows(db: &Path) -> Vec<(String, i64, i64, i64)> {
    let pool = sqlite(db).await;
    let rows = sqlx::query_as("SELECT digest, pack, start_byte, length FROM blob_places")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    rows
}

/// Bytes of places whose digest no row references.
async fn orphan_place_bytes(db: &Path) -> u64 {
    let pool = sqlite(db).await;
    let (bytes,): (i64,) = sqlx::query_as(
        "SELECT COALESCE(SUM(length), 0) FROM blob_places \
         WHERE digest NOT IN (SELECT digest FROM entries)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    bytes as u64
}

/// No two places overlap, each lies within its pack, and no pack holds a
/// byte past the last place that names it (nor is there one no place
/// names); returns the live bytes.
fn assert_places_tile_their_packs(store: &Path, rows: &[(String, i64, i64, i64)]) -> u64 {
    let files = packs(store);
    let mut by_pack: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    for (_, pack, start, length) in rows {
        by_pack.entry(*pack).or_default().push((*start, *length));
    }
    let mut live = 0;
    for (pack, mut ranges) in by_pack {
        ranges.sort();
        let name = format!("{pack:016x}.pack");
        let len = *files
            .get(&name)
            .unwrap_or_else(|| panic!("{name} is missing"));
        let mut end = 0;
        for (start, length) in ranges {
            assert!(
                start >= end,
                "{name}: a place at {start} overlaps one ending at {end}"
            );
            end = start + length;
            live += length as u64;
        }
        assert_eq!(len, end as u64, "{name}: bytes past its last place");
    }
    let named: Vec<String> = rows.iter().map(|r| format!("{:016x}.pack", r.1)).collect();
    for name in files.keys() {
        assert!(named.contains(name), "{name}: a pack no place names");
    }
    live
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_blobs_are_packed_and_served_whole_and_by_range_across_a_restart() {
    let mirror = MirrorServer::start().await;
    let bodies: Vec<Vec<u8>> = (0..40).map(|i| test_bytes(1024, 500 + i)).collect();
    for (i, body) in bodies.iter().enumerate() {
        mirror.put(&format!("/m/small-{i}"), body.clone());
    }
    let large = test_bytes(100 * 1024, 600);
    mirror.put("/m/large", large.clone());
    // The largest body a fill keeps whole in memory is packed; one byte
    // more is a file of its own.
    let edge = test_bytes(64 * 1024, 601);
    mirror.put("/m/edge", edge.clone());
    let over = test_bytes(64 * 1024 + 1, 602);
    mirror.put("/m/over", over.clone());
    let dir = tempfile::tempdir().unwrap();
    let text = packing_config(dir.path(), &mirror, "");
    let store = dir.path().join("store");
    let client = reqwest::Client::new();
    for round in 0..2 {
        let running = start_text(&text).await;
        let base = format!("http://{}", running.local_addr);
        let fetched = futures_util::future::join_all((0..40).map(|i| {
            let (client, url) = (client.clone(), format!("{base}/r/small-{i}"));
            async move { get(&client, &url).await }
        }))
        .await;
        for (i, (status, _, body)) in fetched.into_iter().enumerate() {
            assert_eq!(status, 200, "round {round}");
            assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&bodies[i]));
        }
        for (name, bytes) in [("large", &large), ("edge", &edge), ("over", &over)] {
            let (status, _, body) = get(&client, &format!("{base}/r/{name}")).await;
            assert_eq!(
                (status, sha256_hex(&body.unwrap())),
                (200, sha256_hex(bytes)),
                "{name}, round {round}"
            );
        }
        running.proxy.fills.wait_idle().await;
        let ranged = client
            .get(format!("{base}/r/small-7"))
            .header("range", "bytes=100-299")
            .send()
            .await
            .unwrap();
        assert_eq!(ranged.status(), 206);
        assert_eq!(&ranged.bytes().await.unwrap()[..], &bodies[7][100..300]);
        // The small ones and the 64 KiB one in one pack, the larger ones
        // files of their own.
        assert_eq!(
            packs(&store).values().sum::<u64>(),
            40 * 1024 + 64 * 1024,
            "round {round}"
        );
        assert_eq!(blob_files(&store), 2, "round {round}");
        running.shutdown().await;
    }
    // The second round read every blob from the store.
    assert_eq!(mirror.hits("/m/small-7"), 1);
    assert_eq!(mirror.hits("/m/large"), 1);
    assert_eq!(mirror.hits("/m/edge"), 1);
    let rows = place_rows(&dir.path().join("meta.db")).await;
    assert_eq!(rows.len(), 41);
    assert_eq!(
        assert_places_tile_their_packs(&store, &rows),
        40 * 1024 + 64 * 1024
    );
    let config = mirrorcache::config::Config::parse(&text, "test").unwrap();
    let report = mirrorcache::cache::verify::run(&config, false)
        .await
        .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.checked, 43, "{report}");
}

/// A pack more than half dead is rewritten into a new one: the rows that
/// stay are read from there, the old pack is unlinked, the store counts
/// only the live bytes, and a reader that opened a blob before keeps
/// reading it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_more_than_half_dead_is_compacted_under_an_open_reader() {
    let mirror = MirrorServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&packing_config(dir.path(), &mirror, "")).await;
    let cache = running.proxy.cache.clone();
    let bodies: Vec<Vec<u8>> = (0..64).map(|i| test_bytes(2000, 700 + i)).collect();
    for (i, body) in bodies.iter().enumerate() {
        commit_bytes(&cache, &format!("/r/k{i}"), body).await;
    }
    let store = dir.path().join("store");
    let before = packs(&store);
    assert_eq!(before.values().sum::<u64>(), 64 * 2000);
    // A reader of a blob that is about to go.
    let doomed = mirrorcache::cache::Digest::of(&bodies[1]);
    let open = cache.open_blob(&doomed, 2000).await.unwrap();
    for i in (0..64).filter(|i| i % 4 != 0) {
        let path = ArtifactPath::parse(&format!("/r/k{i}")).unwrap();
        cache.forget_entry(&path).await.unwrap();
    }
    assert_eq!(cache.size(), 64 * 2000, "dead bytes still on disk, counted");
    cache.compact_packs().await;
    let after = packs(&store);
    assert!(
        before.keys().all(|name| !after.contains_key(name)),
        "{after:?}"
    );
    assert_eq!(after.values().sum::<u64>(), 16 * 2000);
    assert_eq!(cache.size(), 16 * 2000);
    assert_eq!(cache.local_size().unwrap(), 16 * 2000);
    assert_eq!(open.read_all(2000).await.unwrap(), bodies[1]);
    for i in (0..64).filter(|i| i % 4 == 0) {
        let digest = mirrorcache::cache::Digest::of(&bodies[i]);
        let blob = cache.open_blob(&digest, 2000).await.unwrap();
        assert_eq!(blob.read_all(2000).await.unwrap(), bodies[i], "k{i}");
    }
    running.shutdown().await;
    let rows = place_rows(&dir.path().join("meta.db")).await;
    assert_eq!(assert_places_tile_their_packs(&store, &rows), 16 * 2000);
}

/// A store whose places were kept by digest (the table before its
/// migration to places keyed by where they lie) serves every packed blob
/// from its pack once opened, and its table is then keyed by place, with
/// no index on digests in the embedded database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn places_kept_by_digest_are_served_after_their_table_is_keyed_by_place() {
    let mirror = MirrorServer::start().await;
    let bodies: Vec<Vec<u8>> = (0..12).map(|i| test_bytes(3000, 800 + i)).collect();
    for (i, body) in bodies.iter().enumerate() {
        mirror.put(&format!("/m/p{i}"), body.clone());
    }
    let dir = tempfile::tempdir().unwrap();
    let text = packing_config(dir.path(), &mirror, "");
    let client = reqwest::Client::new();
    let running = start_text(&text).await;
    let base = format!("http://{}", running.local_addr);
    for i in 0..12 {
        assert_eq!(get(&client, &format!("{base}/r/p{i}")).await.0, 200);
    }
    running.proxy.fills.wait_idle().await;
    running.shutdown().await;
    // The table as migration 0009 made it, that migration the last applied.
    let db = dir.path().join("meta.db");
    let pool = sqlite(&db).await;
    let mut conn = pool.acquire().await.unwrap();
    for sql in [
        "CREATE TABLE by_digest (digest TEXT NOT NULL PRIMARY KEY, pack BIGINT NOT NULL, \
         start_byte BIGINT NOT NULL, length BIGINT NOT NULL)",
        "INSERT INTO by_digest SELECT digest, pack, start_byte, length FROM blob_places",
        "DROP TABLE blob_places",
        "ALTER TABLE by_digest RENAME TO blob_places",
        "DELETE FROM _sqlx_migrations WHERE version = 10",
    ] {
        sqlx::query(sql).execute(&mut *conn).await.unwrap();
    }
    drop(conn);
    pool.close().await;

    let running = start_text(&text).await;
    let base = format!("http://{}", running.local_addr);
    for (i, body) in bodies.iter().enumerate() {
        let (status, cache, got) = get(&client, &format!("{base}/r/p{i}")).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "p{i}");
        assert_eq!(sha256_hex(&got.unwrap()), sha256_hex(body), "p{i}");
        assert_eq!(mirror.hits(&format!("/m/p{i}")), 1, "p{i}");
    }
    running.shutdown().await;
    let rows = place_rows(&db).await;
    assert_eq!(rows.len(), 12);
    assert_eq!(
        assert_places_tile_their_packs(&dir.path().join("store"), &rows),
        12 * 3000
    );
    let pool = sqlite(&db).await;
    let schema: Vec<(String,)> = sqlx::query_as(
        "SELECT COALESCE(sql, name) FROM sqlite_master WHERE tbl_name = 'blob_places'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    let schema: Vec<String> = schema.into_iter().map(|(s,)| s).collect();
    assert!(
        schema
            .iter()
            .any(|s| s.contains("PRIMARY KEY (pack, start_byte, length)")),
        "{schema:?}"
    );
    assert!(
        !schema.iter().any(|s| s.contains("blob_places_digest")),
        "{schema:?}"
    );
}

/// `kill -9` of a real server filling many small blobs (with a
/// `max_size` that keeps eviction and compaction busy when `tight`), at
/// several moments: after restart every row's bytes hash right, no two
/// places overlap, no pack keeps bytes no place names, and the store's
/// count is what is on disk.
async fn power_cut(tight: bool) {
    let mirror = MirrorServer::start().await;
    const KEYS: u64 = 600;
    for i in 0..KEYS {
        mirror.put(
            &format!("/m/f{i}"),
            test_bytes(1024 + (i as usize % 7) * 100, 900 + i),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let storage = match tight {
        true => "max_size = \"160KiB\"\n",
        false => "",
    };
    let text = packing_config(dir.path(), &mirror, storage);
    let store = dir.path().join("store");
    let client = reqwest::Client::new();
    let fetched = || {
        (0..KEYS)
            .map(|i| mirror.hits(&format!("/m/f{i}")) as u64)
            .sum::<u64>()
    };
    for (cut, after) in [(0, 150u64), (1, 40), (2, 190)] {
        let mut proxy = BinaryProxy::start(dir.path(), &text).await;
        let before = fetched();
        let offset = cut * 200;
        let fetches: Vec<_> = (0..16)
            .map(|worker| {
                let (client, base) = (client.clone(), proxy.base.clone());
                tokio::spawn(async move {
                    for i in (worker..200).step_by(16) {
                        let url = format!("{base}/r/f{}", (offset + i) % KEYS);
                        if client.get(url).send().await.is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while fetched() < before + after {
            assert!(Instant::now() < deadline, "cut {cut}: fills did not go on");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        proxy.kill_hard();
        for fetch in fetches {
            let _ = fetch.await;
        }
    }
    // Every row's bytes whole, read as they were left.
    let config = mirrorcache::config::Config::parse(&text, "test").unwrap();
    let report = mirrorcache::cache::verify::run(&config, false)
        .await
        .unwrap();
    assert!(
        report.corrupt.is_empty() && report.missing.is_empty(),
        "{report}"
    );
    assert!(report.checked > 0, "{report}");
    // Restarted, with its eviction rounds (and compactions) held off: the
    // packs cut back to their last place, and counted as they are on disk.
    let running = start_text(&text).await;
    let cache = running.proxy.cache.clone();
    let held = cache.evictor.hold_rounds().await;
    let rows = place_rows(&dir.path().join("meta.db")).await;
    let live = assert_places_tile_their_packs(&store, &rows);
    let on_disk = cache.local_size().unwrap();
    assert!(on_disk >= live);
    // A cut between a row's deletion and its place's leaves a place no row
    // references: uncounted until `verify --remove`, as a blob file is.
    let orphans = orphan_place_bytes(&dir.path().join("meta.db")).await;
    assert_eq!(
        cache.size() + orphans,
        on_disk,
        "the store's count against the disk"
    );
    drop(held);
    // Served from the packs: no row's key is fetched again.
    let base = format!("http://{}", running.local_addr);
    let hits_before: usize = (0..KEYS).map(|i| mirror.hits(&format!("/m/f{i}"))).sum();
    let mut served = 0;
    for i in 0..KEYS {
        let path = ArtifactPath::parse(&format!("/r/f{i}")).unwrap();
        if cache.meta.lookup(&path).await.unwrap().is_none() {
            continue;
        }
        let (status, _, body) = get(&client, &format!("{base}/r/f{i}")).await;
        let expected = test_bytes(1024 + (i as usize % 7) * 100, 900 + i);
        assert_eq!(
            (status, sha256_hex(&body.unwrap())),
            (200, sha256_hex(&expected))
        );
        served += 1;
    }
    let hits_after: usize = (0..KEYS).map(|i| mirror.hits(&format!("/m/f{i}"))).sum();
    assert!(served > 0);
    assert_eq!(
        hits_after, hits_before,
        "a key with a row was fetched again"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_commits_of_small_fills_leaves_every_packed_row_whole() {
    power_cut(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_compactions_leaves_every_packed_row_whole() {
    power_cut(true).await;
}

/// Two instances on one store and one Postgres database: what one packs,
/// the other serves (its place read from the database, the pack opened
/// once), also after the first compacted the pack away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_instance_serves_what_another_packed_and_compacted() {
    let Some(db) = crate::metadata::PgDatabase::create().await else {
        return;
    };
    let mirror = MirrorServer::start().await;
    let bodies: Vec<Vec<u8>> = (0..12).map(|i| test_bytes(3000, 800 + i)).collect();
    for (i, body) in bodies.iter().enumerate() {
        mirror.put(&format!("/m/s{i}"), body.clone());
    }
    let dir = tempfile::tempdir().unwrap();
    let text = packing_config(dir.path(), &mirror, "").replace(
        &format!("sqlite://{}/meta.db", dir.path().display()),
        &db.url,
    );
    let (a, b) = (start_text(&text).await, start_text(&text).await);
    let (base_a, base_b) = (
        format!("http://{}", a.local_addr),
        format!("http://{}", b.local_addr),
    );
    let client = reqwest::Client::new();
    let fetch_all = |base: String| {
        let client = client.clone();
        let bodies = bodies.clone();
        async move {
            for (i, body) in bodies.iter().enumerate() {
                let (status, _, got) = get(&client, &format!("{base}/r/s{i}")).await;
                assert_eq!(
                    (status, sha256_hex(&got.unwrap())),
                    (200, sha256_hex(body)),
                    "s{i}"
                );
            }
        }
    };
    fetch_all(base_a.clone()).await;
    a.proxy.fills.wait_idle().await;
    fetch_all(base_b.clone()).await;
    let fetched = |mirror: &MirrorServer| {
        (0..12)
            .map(|i| mirror.hits(&format!("/m/s{i}")))
            .sum::<usize>()
    };
    assert_eq!(fetched(&mirror), 12, "the second instance fetched again");
    assert_eq!(blob_files(&dir.path().join("store")), 0);
    // Most of them go; the first instance compacts its pack away.
    for i in (0..12).filter(|i| i % 3 != 0) {
        let path = ArtifactPath::parse(&format!("/r/s{i}")).unwrap();
        a.proxy.cache.forget_entry(&path).await.unwrap();
    }
    let before = packs(&dir.path().join("store"));
    a.proxy.cache.compact_packs().await;
    let after = packs(&dir.path().join("store"));
    assert!(
        before.keys().all(|name| !after.contains_key(name)),
        "{after:?}"
    );
    for i in (0..12).filter(|i| i % 3 == 0) {
        let (status, _, got) = get(&client, &format!("{base_b}/r/s{i}")).await;
        assert_eq!(
            (status, sha256_hex(&got.unwrap())),
            (200, sha256_hex(&bodies[i])),
            "s{i}"
        );
    }
    assert_eq!(fetched(&mirror), 12);
    a.shutdown().await;
    b.shutdown().await;
}
