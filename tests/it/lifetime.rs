//! Blob lifetime and size accounting: a blob is deleted only when nothing
//! references it and no commit of it is in progress; `verify --remove` beside
//! a live server leaves blobs being committed alone; an S3 object outlives
//! the reads that opened it; the store size cannot drift; temp files belong
//! to an owner whose lock dies with its process; fills in progress count
//! against `storage.max_size`.
//!
//! The race tests repeat their round many times with random jitter and count
//! the rounds that went wrong; each prints its count.

use std::path::Path;
use std::time::{Duration, Instant};

use mirrorcache::cache::Digest;
use mirrorcache::path::ArtifactPath;

use crate::support::proxy::{commit_bytes, config_text, get, purge, start_text, temp_files_in};
use crate::support::{
    sha256_hex, test_bytes, BinaryProxy, Fault, MirrorServer, S3Server, XorShift,
};

fn remote(mirror: &MirrorServer) -> String {
    format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\nimmutable = [\"**\"]\n",
        mirror.url("/m")
    )
}

/// Never a row without its blob: a release (after its last row went) racing
/// a fill that commits the same bytes under another path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_racing_a_commit_of_the_same_digest_never_loses_the_blob() {
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        "[[remote]]\nname = \"r\"\nmirrors = [\"http://127.0.0.1:9/\"]\n",
    )
    .replace("[storage]\n", "[storage]\nmemory_cache_size = \"0\"\n");
    let running = start_text(&text).await;
    let cache = running.proxy.cache.clone();
    const ROUNDS: u64 = 300;
    let mut jitter = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut lost = 0;
    for round in 0..ROUNDS {
        let body = test_bytes(4096, round);
        let digest = commit_bytes(&cache, &format!("/r/one-{round}"), &body).await;
        let delay = jitter.next() % 3000;
        let releasing = {
            let cache = cache.clone();
            tokio::spawn(async move {
                let one = ArtifactPath::parse(&format!("/r/one-{round}")).unwrap();
                cache.meta.forget(&one).await.unwrap();
                cache.release_blob(&digest).await
            })
        };
        let committing = {
            let cache = cache.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(delay)).await;
                commit_bytes(&cache, &format!("/r/two-{round}"), &body).await
            })
        };
        releasing.await.unwrap();
        committing.await.unwrap();
        let two = ArtifactPath::parse(&format!("/r/two-{round}")).unwrap();
        let entry = cache.meta.lookup(&two).await.unwrap().expect("row of two");
        if cache.open_blob(&entry.digest, entry.size).await.is_err() {
            lost += 1;
        }
    }
    eprintln!("release vs commit: {lost} of {ROUNDS} rounds left a row without its blob");
    assert_eq!(
        lost, 0,
        "{lost} of {ROUNDS} rounds left a row without its blob"
    );
    running.shutdown().await;
}

fn blob_file(store: &Path, hex: &str) -> std::path::PathBuf {
    store.join("blobs").join(&hex[0..2]).join(hex)
}

/// Writes `bytes` as a blob file no row names, last modified `age` ago;
/// its path.
fn orphan_blob(store: &Path, bytes: &[u8], age: Duration) -> std::path::PathBuf {
    let path = blob_file(store, &sha256_hex(bytes));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - age)
        .unwrap();
    path
}

/// `verify --remove` leaves an unreferenced blob younger than its grace
/// period (a fill between its rename and its row) and removes an old one.
#[tokio::test]
async fn verify_remove_spares_a_blob_just_committed_and_removes_an_old_orphan() {
    let mirror = MirrorServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&mirror));
    let running = start_text(&text).await;
    let store = dir.path().join("store");
    let (young, old) = (test_bytes(1000, 1), test_bytes(1000, 2));
    orphan_blob(&store, &young, Duration::ZERO);
    let old_path = orphan_blob(&store, &old, Duration::from_secs(7200));
    let config = mirrorcache::config::Config::parse(&text, "test").unwrap();
    let report = mirrorcache::cache::verify::run(&config, true)
        .await
        .unwrap();
    assert_eq!(report.unreferenced, vec![sha256_hex(&old)], "{report}");
    assert!(blob_file(&store, &sha256_hex(&young)).exists(), "{report}");
    assert!(!old_path.exists(), "{report}");
    running.shutdown().await;
}

/// `verify --remove` in a loop beside fills: no fill's blob is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_remove_beside_live_fills_never_deletes_a_committed_blob() {
    let mirror = MirrorServer::start().await;
    const ROUNDS: u64 = 40;
    for i in 0..20 {
        mirror.put(&format!("/m/base{i}"), test_bytes(512 * 1024, 1000 + i));
    }
    for round in 0..ROUNDS {
        mirror.put(&format!("/m/new{round}"), test_bytes(64 * 1024, round));
    }
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&mirror))
        .replace("[storage]\n", "[storage]\nmemory_cache_size = \"0\"\n");
    let running = start_text(&text).await;
    let config = mirrorcache::config::Config::parse(&text, "test").unwrap();
    let client = reqwest::Client::new();
    let url = |p: &str| format!("http://{}{}", running.local_addr, p);
    for i in 0..20 {
        get(&client, &url(&format!("/r/base{i}"))).await.2.unwrap();
    }
    running.proxy.fills.wait_idle().await;
    let mut jitter = XorShift(77);
    let mut lost = 0;
    for round in 0..ROUNDS {
        let delay = jitter.next() % 40_000;
        let fetch = {
            let (client, url) = (client.clone(), url(&format!("/r/new{round}")));
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(delay)).await;
                client.get(url).send().await.unwrap().bytes().await.unwrap()
            })
        };
        mirrorcache::cache::verify::run(&config, true)
            .await
            .unwrap();
        fetch.await.unwrap();
        running.proxy.fills.wait_idle().await;
        let path = ArtifactPath::parse(&format!("/r/new{round}")).unwrap();
        let entry = running
            .proxy
            .cache
            .meta
            .lookup(&path)
            .await
            .unwrap()
            .unwrap();
        if running
            .proxy
            .cache
            .open_blob(&entry.digest, entry.size)
            .await
            .is_err()
        {
            lost += 1;
        }
    }
    eprintln!("verify --remove vs fills: {lost} of {ROUNDS} rounds lost a committed blob");
    assert_eq!(lost, 0, "{lost} of {ROUNDS} rounds lost a committed blob");
    running.shutdown().await;
}

/// The same bytes filled under many paths at once count once, and a purge
/// brings the count back to zero (no double count, no wrap-around) once
/// the packs holding them are compacted (64 KiB bodies are packed: their
/// bytes are dead, and counted, until then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_size_counts_each_digest_once_under_concurrent_fills() {
    let mirror = MirrorServer::start().await;
    const ROUNDS: u64 = 10;
    const PATHS: u64 = 16;
    for round in 0..ROUNDS {
        for i in 0..PATHS {
            mirror.put(&format!("/m/{round}/{i}"), test_bytes(64 * 1024, round));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&mirror))
        .replace("[server]\n", "[server]\nadmin_token = \"t\"\n");
    let running = start_text(&text).await;
    let client = reqwest::Client::new();
    let url = |p: &str| format!("http://{}{}", running.local_addr, p);
    let mut drifted = 0;
    for round in 0..ROUNDS {
        let fetches: Vec<_> = (0..PATHS)
            .map(|i| {
                let (client, url) = (client.clone(), url(&format!("/r/{round}/{i}")));
                tokio::spawn(async move { client.get(url).send().await.unwrap().bytes().await })
            })
            .collect();
        for f in fetches {
            f.await.unwrap().unwrap();
        }
        running.proxy.fills.wait_idle().await;
        if running.proxy.cache.size() != (round + 1) * 64 * 1024 {
            drifted += 1;
        }
    }
    purge(&client, &format!("http://{}", running.local_addr), "r", "t").await;
    running.proxy.cache.compact_packs().await;
    let after_purge = running.proxy.cache.size();
    eprintln!(
        "size accounting: {drifted} of {ROUNDS} rounds drifted; {after_purge} bytes after purge"
    );
    assert_eq!((drifted, after_purge), (0, 0));
    running.shutdown().await;
}

/// Two instances share an S3 bucket and a database: a purge on one leaves
/// the object readable for `delete_delay`, so the other's read finishes; the
/// object is gone after the delay; a digest stored under two paths counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_a_purge_elsewhere_does_not_cut_off_a_read_and_sizes_count_once() {
    let Some(s3) = S3Server::start("lifetime").await else {
        return;
    };
    let mirror = MirrorServer::start().await;
    let body = test_bytes(3 * 1024 * 1024, 8);
    mirror.put("/m/a.bin", body.clone());
    mirror.put("/m/b.bin", body.clone());
    let meta_dir = tempfile::tempdir().unwrap();
    let text = |local: &Path| {
        config_text(local, &remote(&mirror))
            .replace(
                "[storage]\n",
                &format!(
                    "[storage]\ndelete_delay = \"2s\"\n{}",
                    s3.storage_keys("lifetime")
                ),
            )
            .replace("[server]\n", "[server]\nadmin_token = \"t\"\n")
            .replace(
                &format!("sqlite://{}/meta.db", local.display()),
                &format!("sqlite://{}/meta.db", meta_dir.path().display()),
            )
    };
    let (local_a, local_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start_text(&text(local_a.path())).await;
    let b = start_text(&text(local_b.path())).await;
    let client = reqwest::Client::new();
    for p in ["/r/a.bin", "/r/b.bin"] {
        get(&client, &format!("http://{}{p}", a.local_addr))
            .await
            .2
            .unwrap();
        a.proxy.fills.wait_idle().await;
    }
    assert_eq!(
        a.proxy.cache.size(),
        body.len() as u64,
        "one digest, two paths"
    );

    // A opens the blob (a hit that has sent its head), then B purges.
    let digest = Digest::of(&body);
    let blob = a
        .proxy
        .cache
        .open_blob(&digest, body.len() as u64)
        .await
        .unwrap();
    purge(&client, &format!("http://{}", b.local_addr), "r", "t").await;
    let read = blob.read_all(body.len() as u64).await;
    assert_eq!(
        sha256_hex(&read.expect("the read outlives the purge")),
        sha256_hex(&body)
    );

    // After the delay the object is gone.
    let deadline = Instant::now() + Duration::from_secs(20);
    while a
        .proxy
        .cache
        .open_blob(&digest, body.len() as u64)
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "the object was never deleted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// A temp file named after a live PID whose owner lock nobody holds is a
/// dead fill's: start-up removes it.
#[tokio::test]
async fn a_temp_file_whose_owner_lock_is_free_is_removed_even_if_its_pid_lives() {
    let mirror = MirrorServer::start().await;
    let mut sleeper = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("store/tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join(format!("{}-0", sleeper.id())), b"half").unwrap();
    let running = start_text(&config_text(dir.path(), &remote(&mirror))).await;
    let left = temp_files_in(&dir.path().join("store"));
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(left, 0);
    running.shutdown().await;
}

/// A second instance starting on the same store keeps the temp file of a
/// fill the first one is still writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_instance_keeps_its_temp_files_when_another_starts_on_its_store() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/slow", test_bytes(1024 * 1024, 3));
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(50)));
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&mirror));
    let first = start_text(&text).await;
    let client = reqwest::Client::new();
    let fetch = {
        let url = format!("http://{}/r/slow", first.local_addr);
        let client = client.clone();
        tokio::spawn(async move { client.get(url).send().await.unwrap().bytes().await.unwrap() })
    };
    let store = dir.path().join("store");
    let deadline = Instant::now() + Duration::from_secs(10);
    while temp_files_in(&store) == 0 {
        assert!(Instant::now() < deadline, "the fill never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = start_text(&text).await;
    assert_eq!(
        temp_files_in(&store),
        1,
        "the live fill's temp file was removed"
    );
    let bytes = fetch.await.unwrap();
    assert_eq!(sha256_hex(&bytes), sha256_hex(&test_bytes(1024 * 1024, 3)));
    second.shutdown().await;
    first.shutdown().await;
}

/// kill -9 during ten fills, the dead process left unreaped (a zombie keeps
/// its PID in /proc): the restarted binary removes all ten temp files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_unreaped_during_ten_fills_leaves_no_temp_files_after_restart() {
    let mirror = MirrorServer::start().await;
    for i in 0..10 {
        mirror.put(&format!("/m/f{i}"), test_bytes(1024 * 1024, 200 + i));
    }
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&mirror));
    let proxy = BinaryProxy::start(dir.path(), &text).await;
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(30)));
    let client = reqwest::Client::new();
    let fetches: Vec<_> = (0..10)
        .map(|i| {
            let (client, url) = (client.clone(), proxy.url(&format!("/r/f{i}")));
            tokio::spawn(async move { client.get(url).send().await.ok()?.bytes().await.ok() })
        })
        .collect();
    let store = dir.path().join("store");
    let deadline = Instant::now() + Duration::from_secs(10);
    while temp_files_in(&store) < 10 {
        assert!(Instant::now() < deadline, "10 fills did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SIGKILL, not reaped: the PID stays in /proc as a zombie.
    proxy.signal("KILL");
    for f in fetches {
        assert!(f.await.unwrap().is_none());
    }
    assert!(Path::new(&format!("/proc/{}", proxy.pid())).exists());
    mirror.set_fault(Fault::None);
    let restarted = BinaryProxy::start(dir.path(), &text).await;
    assert_eq!(temp_files_in(&store), 0);
    drop(restarted);
    drop(proxy);
}

/// Fills in progress count against `storage.max_size`: with 1 MiB and three
/// 400 KiB bodies arriving at once, only two are written to disk; the third
/// streams through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fills_in_progress_count_against_max_size() {
    let mirror = MirrorServer::start().await;
    for i in 0..3 {
        mirror.put(&format!("/m/f{i}"), test_bytes(400 * 1024, 300 + i));
    }
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(100)));
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&mirror))
        .replace("[storage]\n", "[storage]\nmax_size = \"1MiB\"\n");
    let running = start_text(&text).await;
    let client = reqwest::Client::new();
    let fetches: Vec<_> = (0..3)
        .map(|i| {
            let (client, url) = (
                client.clone(),
                format!("http://{}/r/f{i}", running.local_addr),
            );
            tokio::spawn(
                async move { client.get(url).send().await.unwrap().bytes().await.unwrap() },
            )
        })
        .collect();
    let store = dir.path().join("store");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut most = 0;
    while mirror.total() < 3 || most == 0 {
        most = most.max(temp_files_in(&store));
        assert!(Instant::now() < deadline, "fills did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for _ in 0..20 {
        most = most.max(temp_files_in(&store));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for (i, f) in fetches.into_iter().enumerate() {
        assert_eq!(
            sha256_hex(&f.await.unwrap()),
            sha256_hex(&test_bytes(400 * 1024, 300 + i as u64))
        );
    }
    running.proxy.fills.wait_idle().await;
    assert_eq!(most, 2, "temp files written at once");
    assert!(running.proxy.cache.size() <= 1024 * 1024);
    running.shutdown().await;
}

/// On SQLite without Redis, "does a row still reference this blob?" is the
/// entry index's question (the database keeps no index on
/// `entries.digest`): a blob goes with its last row, not before, however
/// many names share it; and a row another process deletes is seen.
#[tokio::test]
async fn digest_questions_answered_from_memory_free_a_blob_with_its_last_row() {
    use sqlx::Connection as _;
    let mirror = MirrorServer::start().await;
    let shared = test_bytes(3000, 21);
    mirror.put("/m/a", shared.clone());
    mirror.put("/m/b", shared.clone());
    mirror.put("/m/own", test_bytes(3000, 22));
    let dir = tempfile::tempdir().unwrap();
    // Blob files, whose removal shows (packed blobs: `packs.rs`).
    let text = config_text(dir.path(), &remote(&mirror))
        .replace("[storage]\n", "[storage]\npack_below = \"0\"\n");
    let running = start_text(&text).await;
    let cache = &running.proxy.cache;
    cache.meta.memory.index.loaded().await;
    assert!(cache.meta.memory.index.is_complete());
    let client = reqwest::Client::new();
    for name in ["a", "b", "own"] {
        let url = format!("http://{}/r/{name}", running.local_addr);
        assert_eq!(get(&client, &url).await.0, 200);
    }
    running.proxy.fills.wait_idle().await;
    let mut db =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}/meta.db", dir.path().display()))
            .await
            .unwrap();
    let (indexes,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM sqlite_master WHERE name = 'entries_digest'")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(indexes, 0, "no index on entries.digest");
    let blob = |bytes: &[u8]| {
        let hex = sha256_hex(bytes);
        dir.path().join("store/blobs").join(&hex[..2]).join(hex)
    };
    assert!(blob(&shared).exists() && blob(&test_bytes(3000, 22)).exists());
    let hex = sha256_hex(&shared);
    assert!(cache.meta.digest_referenced(&hex).await.unwrap());
    assert_eq!(
        cache.forget_row("r", "a").await.unwrap(),
        0,
        "b still has it"
    );
    assert!(blob(&shared).exists());
    assert!(cache.meta.digest_referenced(&hex).await.unwrap());
    assert_eq!(cache.forget_row("r", "b").await.unwrap(), 3000);
    assert!(!blob(&shared).exists());
    assert!(!cache.meta.digest_referenced(&hex).await.unwrap());
    assert_eq!(
        cache.meta.db.digest_reads(),
        0,
        "memory answered every check"
    );
    // A row another process adds (marker written, as `mirrorcache import`
    // does) keeps the blob it references when the server's own row of it
    // goes: the database answers until memory is loaded again, and memory
    // then counts that row.
    let own = test_bytes(3000, 22);
    let other = mirrorcache::cache::MetadataStore::connect(
        &format!("sqlite://{}/meta.db", dir.path().display()),
        1,
        1 << 20,
    )
    .await
    .unwrap();
    let entry = mirrorcache::meta::Entry::new(
        Digest::from_hex(&sha256_hex(&own)).unwrap(),
        3000,
        None,
        None,
        None,
        1,
    );
    other
        .record(&ArtifactPath::parse("/r/copy").unwrap(), entry)
        .await
        .unwrap();
    other.db.close().await;
    assert_eq!(
        cache.forget_row("r", "own").await.unwrap(),
        0,
        "copy has it"
    );
    assert_eq!(cache.meta.db.digest_reads(), 1, "the database answered");
    assert!(blob(&own).exists());
    // The reload begins once the server saw the marker change.
    for _ in 0..500 {
        cache.meta.memory.index.loaded().await;
        if cache.meta.memory.index.is_complete() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(cache.meta.memory.index.is_complete());
    assert_eq!(cache.forget_row("r", "copy").await.unwrap(), 3000);
    assert!(!blob(&own).exists());
    running.shutdown().await;
}

/// `verify --remove` and the server agree through the store's commit lock:
/// while a commit holds it (shared, from before its blobs are placed or
/// found in place until its rows are written), an old unreferenced blob is
/// not unlinked; once it is let go, the check runs again and unlinks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_remove_waits_for_a_commit_holding_the_store_lock() {
    use rustix::fs::{flock, FlockOperation};
    let mirror = MirrorServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&mirror));
    let running = start_text(&text).await;
    let store = dir.path().join("store");
    let old = test_bytes(1000, 3);
    let old_path = orphan_blob(&store, &old, Duration::from_secs(7200));
    // A commit in progress, as the committer holds it.
    let lock = std::fs::File::options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(store.join("commit.lock"))
        .unwrap();
    flock(&lock, FlockOperation::LockShared).unwrap();
    let config = mirrorcache::config::Config::parse(&text, "test").unwrap();
    let verify = tokio::spawn(async move { mirrorcache::cache::verify::run(&config, true).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !verify.is_finished(),
        "verify --remove went past a held commit"
    );
    assert!(old_path.exists());
    drop(lock);
    let report = verify.await.unwrap().unwrap();
    assert_eq!(report.unreferenced, vec![sha256_hex(&old)], "{report}");
    assert!(!old_path.exists(), "{report}");
    running.shutdown().await;
}
