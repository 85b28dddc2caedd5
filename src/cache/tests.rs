//! Random interleavings of commit, release, eviction and fills in progress
//! (a hand-rolled xorshift picks them): the committed count never drifts
//! from the database's truth or the disk, no row is left without its blob,
//! and an eviction round stops at the low-water mark.

use std::sync::Arc;

use super::evict::{self, low_water};
use super::{Cache, Digest, Entry};
use crate::config::Config;
use crate::meta::index::Found;
use crate::metrics::Metrics;
use crate::path::ArtifactPath;
use crate::test_rng::XorShift;

const MAX: u64 = 64 * 1024;
const BODIES: u64 = 8;
const PATHS: u64 = 16;

fn body(n: u64) -> Vec<u8> {
    let len = 2048 + (n * 1237) % 8192;
    (0..len).map(|i| (i * 31 + n * 7) as u8).collect()
}

async fn open(dir: &std::path::Path) -> Arc<Cache> {
    open_with(dir, "0").await
}

/// [`open`] with `memory_cache_size` (the in-memory tier) set.
async fn open_with(dir: &std::path::Path, memory: &str) -> Arc<Cache> {
    open_packing(dir, memory, "0").await
}

/// [`open_with`], blobs of at most `pack_below` bytes packed.
async fn open_packing(dir: &std::path::Path, memory: &str, pack_below: &str) -> Arc<Cache> {
    let text = format!(
        "[storage]\npath = \"{d}/store\"\nmax_size = \"{MAX}\"\nmemory_cache_size = \"{memory}\"\n\
         pack_below = \"{pack_below}\"\n\n\
         [metadata]\nurl = \"sqlite://{d}/meta.db\"\n\n\
         [[remote]]\nname = \"r\"\nmirrors = [\"http://127.0.0.1:9/\"]\n",
        d = dir.display()
    );
    let config = Config::parse(&text, "test").unwrap();
    Cache::open(&config, Arc::new(Metrics::new()))
        .await
        .unwrap()
}

async fn commit(cache: &Cache, path: u64, n: u64) {
    let bytes = body(n);
    let digest = Digest::of(&bytes);
    let len = bytes.len() as u64;
    let temp = cache
        .store_blocking(move |store| {
            let temp = store.create_temp()?;
            temp.write_at(&bytes, 0)?;
            Ok(temp)
        })
        .await
        .unwrap();
    let path = ArtifactPath::parse(&format!("/r/p{path}")).unwrap();
    let entry = Entry::new(digest, len, None, None, None, crate::clock::now_ms());
    cache.commit_entry(temp, &path, entry).await.unwrap();
}

/// Hands `bytes`, kept in memory, to the commit queue as the entry of
/// `key` (`/r/…`), as a small fill does; waits until it is durable.
async fn commit_bytes(cache: &Cache, key: &str, bytes: Vec<u8>) -> super::commit_queue::Answer {
    let entry = Entry::new(
        Digest::of(&bytes),
        bytes.len() as u64,
        None,
        None,
        None,
        crate::clock::now_ms(),
    );
    let path = ArtifactPath::parse(&format!("/r/{key}")).unwrap();
    let ticket = cache.meta.memory.purges.ticket();
    let slot = cache.commits.slot().await?;
    let body = super::FillBody::Memory(bytes.into());
    slot.send(body, &path, (entry, None), ticket)
        .durable()
        .await
}

/// [`commit`] of a body kept in memory: the committer writes it (in place
/// where its digest is fresh), or refuses it when fills in progress hold
/// `storage.max_size` (served uncached).
async fn commit_memory(cache: &Cache, path: u64, n: u64) {
    if let Err(error) = commit_bytes(cache, &format!("p{path}"), body(n)).await {
        assert!(error.to_string().contains("max_size"), "{error}");
    }
}

async fn release(cache: &Cache, path: u64) {
    let path = ArtifactPath::parse(&format!("/r/p{path}")).unwrap();
    cache.forget_entry(&path).await.unwrap();
}

/// What the three views say at a quiet moment: (count, database, disk).
/// Every change holds `accounting` shared (the background evictor's too), so
/// holding it exclusively makes the moment quiet.
/// The database's truth counts the dead bytes of packs too, as the store
/// tallies them: what is on disk.
async fn views(cache: &Cache) -> (u64, u64, u64) {
    let _quiet = cache.locks.accounting.write().await;
    let disk = cache.local_size().unwrap();
    let rows = cache.meta.db.stored_bytes().await.unwrap();
    // The index's running sum, which the evictor takes instead once the
    // index is loaded, is the rows'.
    if cache.meta.memory.digests_in_memory() {
        assert_eq!(cache.meta.memory.index.stored_bytes(), rows);
    }
    (cache.size(), rows + cache.blobs.dead_bytes(), disk)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_never_drifts_and_eviction_stops_at_the_low_water_mark() {
    random_lifetimes("0").await;
}

/// The same with every blob packed: dead ranges counted until their pack
/// is compacted, and every row's bytes read from its pack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_sizes_never_drift_and_eviction_stops_at_the_low_water_mark() {
    random_lifetimes("64KiB").await;
}

async fn random_lifetimes(pack_below: &str) {
    const SEEDS: u64 = 12;
    const BATCHES: u64 = 8;
    let packed = pack_below != "0";
    let biggest = (0..BODIES).map(|n| body(n).len() as u64).max().unwrap();
    for seed in 1..=SEEDS {
        let dir = tempfile::tempdir().unwrap();
        let cache = open_packing(dir.path(), "0", pack_below).await;
        // Every other seed as the server: the entry index complete and
        // trusted, so its digest counts answer the reference checks.
        let serving = seed % 2 == 0;
        if serving {
            cache.meta.memory.others.serve();
            cache.meta.memory.index.loaded().await;
            assert!(cache.meta.memory.digests_in_memory());
        }
        let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for _ in 0..BATCHES {
            let mut tasks = Vec::new();
            for _ in 0..12 {
                let cache = cache.clone();
                let (op, path, n, hold) = (
                    rng.below(10),
                    rng.below(PATHS),
                    rng.below(BODIES),
                    rng.below(3),
                );
                tasks.push(tokio::spawn(async move {
                    match op {
                        0..=2 => commit(&cache, path, n).await,
                        3..=5 => commit_memory(&cache, path, n).await,
                        6..=7 => release(&cache, path).await,
                        8 => evict::evict(&cache).await.unwrap(),
                        _ => {
                            // A fill in progress: counted, then abandoned.
                            let temp = cache.store_blocking(|s| s.create_temp()).await.unwrap();
                            let _ = temp.reserve(4096);
                            tokio::time::sleep(std::time::Duration::from_millis(hold)).await;
                        }
                    }
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
            let (count, truth, disk) = views(&cache).await;
            // As the server, `views` checked the index's sum.
            assert!(!serving || cache.meta.memory.digests_in_memory());
            assert_eq!(
                (count, count),
                (truth, disk),
                "seed {seed}: count, database, disk"
            );
            assert_eq!(cache.budget().in_progress(), 0, "seed {seed}");
            // No eviction round while rows and records are compared (one
            // the last commits woke deletes a row, then its record).
            let rounds = cache.evictor.hold_rounds().await;
            for p in 0..PATHS {
                let path = ArtifactPath::parse(&format!("/r/p{p}")).unwrap();
                let row = cache.meta.read_row(&path).await.unwrap();
                if let Some(entry) = &row {
                    assert!(
                        cache.open_blob(&entry.digest, entry.size).await.is_ok(),
                        "seed {seed}: a row without its blob"
                    );
                }
                if serving {
                    let listed = match cache.meta.memory.index.get(path.key()) {
                        Found::Entry(e) => Some(e.digest),
                        _ => None,
                    };
                    assert_eq!(listed, row.map(|r| r.digest), "seed {seed}: index and row");
                }
            }
            // A round alone: over the limit it stops at the low-water mark,
            // less one blob at most; under it, it evicts nothing (packs
            // more than half dead are compacted all the same).
            // After any round the background evictor has under way (a
            // commit over the limit woke it).
            drop(rounds);
            drop(cache.evictor.hold_rounds().await);
            let before = cache.size();
            let live = cache.meta.db.stored_bytes().await.unwrap();
            evict::evict(&cache).await.unwrap();
            let after = cache.size();
            if before > MAX {
                assert!(
                    after <= low_water(MAX),
                    "seed {seed}: {after} over the low-water mark"
                );
                // A compaction frees a whole pack's dead bytes at once.
                assert!(
                    packed || after + biggest > low_water(MAX),
                    "seed {seed}: evicted to {after}, below the low-water mark less one blob"
                );
            } else if packed {
                let still = cache.meta.db.stored_bytes().await.unwrap();
                assert_eq!(still, live, "seed {seed}: evicted under the limit");
                assert!(after <= before, "seed {seed}: grew by compaction");
            } else {
                assert_eq!(after, before, "seed {seed}: evicted under the limit");
            }
        }
    }
}

/// A store of more rows than are summed before the index loads: its size
/// is counted after the load, from the index's own sum, and is the rows'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_store_takes_its_size_from_the_loaded_index() {
    use sqlx::ConnectOptions as _;
    const BULK: usize = super::open::DEFER_ABOVE_ROWS + 1;
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path()).await;
    for n in 0..3 {
        commit(&cache, n, n).await;
    }
    let expected: u64 = (0..3).map(|n| body(n).len() as u64).sum();
    cache.meta.db.close().await;
    drop(cache);
    // Many more names of the first blob, written behind the store's back.
    let url = format!("sqlite://{}/meta.db", dir.path().display());
    let options: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
    let mut conn = options.connect().await.unwrap();
    sqlx::query(
        "INSERT INTO entries (remote, path, digest, size, fetched_at, last_access) \
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1) \
         SELECT 'r', 'bulk/' || i, $2, $3, 0, 0 FROM n",
    )
    .bind(BULK as i64)
    .bind(Digest::of(&body(0)).to_hex())
    .bind(body(0).len() as i64)
    .execute(&mut conn)
    .await
    .unwrap();
    drop(conn);
    let cache = open(dir.path()).await;
    cache.meta.memory.others.serve();
    cache.meta.memory.index.loaded().await;
    for _ in 0..200 {
        if cache.size() == expected {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(cache.meta.memory.index.len(), BULK + 3);
    assert!(cache.meta.memory.digests_in_memory());
    assert_eq!(cache.meta.memory.index.stored_bytes(), expected);
    assert_eq!(cache.meta.db.stored_bytes().await.unwrap(), expected);
    assert_eq!(cache.size(), expected);
}

/// The first hits of one small blob, arriving together, read it into the
/// in-memory tier once (the others wait for that read), and each gets the
/// blob's bytes; a blob hit once is read (and checked), not kept there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_hits_arriving_together_read_a_small_blob_once() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open_with(dir.path(), "4MiB").await;
    commit(&cache, 0, 3).await;
    commit(&cache, 1, 4).await;
    let once = body(4);
    let blob = cache.open_blob(&Digest::of(&once), once.len() as u64).await;
    assert_eq!(
        blob.unwrap().read_all(once.len() as u64).await.unwrap(),
        once
    );
    assert_eq!(cache.hot.loads(), 0, "blobs read into the in-memory tier");

    let bytes = body(3);
    let (digest, len) = (Digest::of(&bytes), bytes.len() as u64);
    let hits: Vec<_> = (0..32)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move {
                let blob = cache.open_blob(&digest, len).await.unwrap();
                blob.read_all(len).await.unwrap()
            })
        })
        .collect();
    for hit in hits {
        assert_eq!(hit.await.unwrap(), bytes);
    }
    assert_eq!(cache.hot.loads(), 1, "blobs read into the in-memory tier");
}

/// A batch asks about a digest only if its blob was already on disk: new
/// bytes cannot have a row yet (so a process whose memory cannot answer,
/// as `import` beside a server, reads no rows for them).
#[tokio::test]
async fn only_bytes_already_on_disk_are_asked_about() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path()).await;
    assert!(!cache.meta.memory.digests_in_memory(), "not the server");
    commit(&cache, 1, 1).await;
    commit(&cache, 2, 2).await;
    assert_eq!(cache.meta.db.digest_reads(), 0);
    // The same bytes under another name: asked (and counted once).
    commit(&cache, 3, 1).await;
    assert_eq!(cache.meta.db.digest_reads(), 1);
    let (count, truth, disk) = views(&cache).await;
    assert_eq!((count, count), (truth, disk));
}

/// Commits small bodies kept in memory, `names[i]` with `bodies[i]`, all
/// queued while the committer is held: one batch, or two where a loaded
/// machine sent some after the committer's collection window closed.
async fn commit_together(cache: &Arc<Cache>, names: &[String], bodies: &[Vec<u8>]) {
    let held = cache.commits.hold().await;
    let mut tasks = Vec::new();
    for (name, bytes) in names.iter().zip(bodies) {
        let (cache, bytes) = (cache.clone(), bytes.clone());
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            commit_bytes(&cache, &name, bytes).await.unwrap()
        }));
    }
    while cache.metrics.commits_queued.get() < names.len() as i64 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    // A place is counted when it is taken, and its body sent just after:
    // give the last ones time to arrive, or a loaded machine splits the batch.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    drop(held);
    for task in tasks {
        assert!(task.await.unwrap().is_some());
    }
}

/// Where the entry index answers digest questions, a batch of small bodies
/// kept in memory makes no temp file: bytes no row references are written
/// under their own names, bytes already referenced not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_bodies_in_a_batch_make_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path()).await;
    cache.meta.memory.others.serve();
    cache.meta.memory.index.loaded().await;
    let bodies: Vec<Vec<u8>> = (0..20)
        .map(|n| format!("small body {n} ").repeat(40).into_bytes())
        .collect();
    let names: Vec<String> = (0..20).map(|n| format!("a{n}")).collect();
    commit_together(&cache, &names, &bodies).await;
    assert_eq!(cache.metrics.commits.get(), 20);
    assert_eq!(cache.store.temp_files_made(), 0);
    let (count, truth, disk) = views(&cache).await;
    assert_eq!((count, count), (truth, disk));
    // The same bytes under other names: nothing written.
    let names: Vec<String> = (0..20).map(|n| format!("b{n}")).collect();
    commit_together(&cache, &names, &bodies).await;
    assert_eq!(cache.store.temp_files_made(), 0);
    assert_eq!(views(&cache).await, (count, count, count));
    // A blob whose file went behind the store's back is written again by
    // the next commit of its bytes, though rows reference it.
    let gone = Digest::of(&bodies[0]);
    cache.store.remove_blob(&gone).unwrap();
    commit_bytes(&cache, "c0", bodies[0].clone()).await.unwrap();
    for (n, bytes) in bodies.iter().enumerate() {
        for name in [format!("a{n}"), format!("b{n}")] {
            let path = ArtifactPath::parse(&format!("/r/{name}")).unwrap();
            let entry = cache.meta.read_row(&path).await.unwrap().unwrap();
            let blob = cache.open_blob(&entry.digest, entry.size).await.unwrap();
            assert_eq!(&blob.read_all(entry.size).await.unwrap(), bytes);
        }
    }
}

/// A row read from the database just before a deletion (an eviction, a
/// forgotten row) is not put back in memory when the read is remembered
/// after it: the index names only rows, and its digest counts stay the
/// rows'.
#[tokio::test]
async fn a_row_read_before_its_deletion_is_not_remembered_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path()).await;
    commit(&cache, 1, 1).await;
    let path = ArtifactPath::parse("/r/p1").unwrap();
    let ticket = cache.meta.memory.purges.ticket();
    let read = Arc::new(cache.meta.read_row(&path).await.unwrap().unwrap());
    cache.forget_entry(&path).await.unwrap();
    assert!(!cache.meta.memory.remember_read(&path, &read, ticket));
    assert!(matches!(
        cache.meta.memory.index.get(path.key()),
        Found::Absent | Found::Unknown
    ));
    assert!(!cache.meta.memory.index.references(&read.digest));
    // A read begun after the deletion is remembered as before.
    commit(&cache, 1, 1).await;
    let ticket = cache.meta.memory.purges.ticket();
    let read = Arc::new(cache.meta.read_row(&path).await.unwrap().unwrap());
    assert!(cache.meta.memory.remember_read(&path, &read, ticket));
    let (count, truth, disk) = views(&cache).await;
    assert_eq!((count, count), (truth, disk));
}

/// A packed blob of at least 4 KiB hashed at an open is read unhashed at
/// its place (here past another blob's) by the next hits for a minute
/// (`Blob::Held`), whole or a range; a smaller one is hashed at each; one
/// let go, or committed again, is hashed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checked_packed_blob_serves_unhashed() {
    use crate::store::Blob;
    use futures_util::TryStreamExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = open_packing(dir.path(), "48MiB", "64KiB").await;
    let large: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    let small = vec![7u8; 1024];
    commit_bytes(&cache, "small", small.clone()).await.unwrap();
    commit_bytes(&cache, "large", large.clone()).await.unwrap();
    let (l, s) = (Digest::of(&large), Digest::of(&small));
    let packed = |blob: Blob| matches!(blob, Blob::Packed { .. });
    assert!(
        packed(cache.blobs.open(&l).await.unwrap()),
        "not hashed yet"
    );
    for (digest, bytes) in [(l, &large), (s, &small)] {
        let len = bytes.len() as u64;
        let blob = cache.open_blob(&digest, len).await.unwrap();
        assert_eq!(&blob.read_all(len).await.unwrap(), bytes);
    }
    let held = cache.blobs.open(&l).await.unwrap();
    assert!(matches!(held, Blob::Held { start, .. } if start > 0));
    assert_eq!(held.read_all(8192).await.unwrap(), large);
    let parts: Vec<bytes::Bytes> = held.stream(100, 5000).try_collect().await.unwrap();
    assert_eq!(parts.concat(), large[100..5100]);
    assert!(
        packed(cache.blobs.open(&s).await.unwrap()),
        "too small to keep"
    );
    cache.blobs.let_go(&l);
    assert!(packed(cache.blobs.open(&l).await.unwrap()), "let go");
    cache.open_blob(&l, 8192).await.unwrap();
    let path = ArtifactPath::parse("/r/large").unwrap();
    cache.forget_entry(&path).await.unwrap();
    commit_bytes(&cache, "again", large.clone()).await.unwrap();
    let again = cache.blobs.open(&l).await.unwrap();
    assert!(packed(again), "hashed again once committed again");
}
