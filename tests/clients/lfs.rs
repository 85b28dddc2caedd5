//! Git LFS (Debian's git-lfs 3.3 under git) through an `lfs` remote,
//! against a fixture Git host on 127.0.0.1 (`LfsHost`): a bare repository
//! made on the spot by git and git-lfs, with three LFS objects (1 KiB,
//! 3 MiB, 64 MiB), served over Git's dumb HTTP; its batch API behind Basic
//! auth, whose download actions point at a second host with a signed
//! header per object. Each client has a home of its own whose `lfs.url`
//! points at the proxy and whose credential store holds its user. What
//! git-lfs asks is what its `tq/transfer.go` (the batch) and
//! `tq/basic_download.go` (the action's `href` with its `header`s) say.
//! Clones run cold, again from fresh homes, eight at once through a cold
//! proxy, as a user the host does not admit, past a tampered object, and
//! `git lfs pull` runs with the host stopped.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{sha256_hex, tampered, test_bytes, LfsHost, TestProxy};
use crate::{client, outcome, report, run, write};

const REPO: &str = "team/assets.git";
const SIZES: [usize; 3] = [1024, 3 << 20, 64 << 20];

/// `git` in the home `home` (made if need be), never prompting, reading
/// no system config.
fn git(home: &Path) -> Command {
    std::fs::create_dir_all(home).unwrap();
    let mut cmd = Command::new("git");
    cmd.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .env_remove("GIT_DIR");
    cmd
}

/// The bare repository below `root`, made from a work tree whose `*.bin`
/// files are LFS objects; the objects' bytes by file name.
fn make_repository(w: &Path, root: &Path) -> Vec<(String, Vec<u8>)> {
    let home = w.join("author");
    let work = w.join("work");
    run(git(&home).args(["lfs", "install", "--skip-repo"]));
    run(git(&home).args(["init", "-q", "-b", "main"]).arg(&work));
    run(git(&home)
        .current_dir(&work)
        .args(["lfs", "track", "*.bin"]));
    let objects: Vec<(String, Vec<u8>)> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &size)| (format!("asset-{i}.bin"), test_bytes(size, 40 + i as u64)))
        .collect();
    for (name, bytes) in &objects {
        std::fs::write(work.join(name), bytes).unwrap();
    }
    write(&work.join("README"), "assets\n");
    run(git(&home).current_dir(&work).args(["add", "."]));
    run(git(&home).current_dir(&work).args([
        "-c",
        "user.name=Fixture",
        "-c",
        "user.email=fixture@example.invalid",
        "commit",
        "-q",
        "-m",
        "assets",
    ]));
    let bare = root.join(REPO);
    run(git(&home)
        .args(["clone", "-q", "--bare"])
        .arg(&work)
        .arg(&bare));
    run(git(&home).current_dir(&bare).args(["update-server-info"]));
    objects
}

/// A client's home: git-lfs installed, `lfs.url` at the proxy's remote,
/// `user:password` in its credential store for the proxy's host.
fn client_home(w: &Path, name: &str, proxy: &TestProxy, credentials: &str) -> PathBuf {
    let home = w.join(format!("home-{name}"));
    run(git(&home).args(["lfs", "install", "--skip-repo"]));
    let lfs_url = format!("{}/lfs/{REPO}/info/lfs", proxy.base);
    run(git(&home).args(["config", "--global", "lfs.url", &lfs_url]));
    let store = home.join("credentials");
    let helper = format!("store --file={}", store.display());
    run(git(&home).args(["config", "--global", "credential.helper", &helper]));
    let host = proxy.base.trim_start_matches("http://");
    write(&store, &format!("http://{credentials}@{host}\n"));
    home
}

/// `git clone` of the fixture repository into `dir` (LFS objects smudged
/// through the proxy): whether it worked, and what it said.
fn clone(host: &LfsHost, home: &Path, dir: &Path) -> (bool, String) {
    outcome(
        git(home)
            .args(["clone", "-q", &format!("{}/{REPO}", host.url())])
            .arg(dir),
    )
}

/// `git clone` with `GIT_LFS_SKIP_SMUDGE=1`: pointers only, for `git lfs pull`.
fn clone_unsmudged(host: &LfsHost, home: &Path, dir: &Path) {
    run(git(home)
        .env("GIT_LFS_SKIP_SMUDGE", "1")
        .args(["clone", "-q", &format!("{}/{REPO}", host.url())])
        .arg(dir));
}

/// Every object is in `dir` with its bytes.
fn assert_checked_out(dir: &Path, objects: &[(String, Vec<u8>)], said: &str) {
    for (name, bytes) in objects {
        let got = std::fs::read(dir.join(name)).unwrap_or_default();
        assert_eq!(sha256_hex(&got), sha256_hex(bytes), "{name}: {said}");
    }
}

/// Upstream object downloads per object, in file order.
fn downloads(host: &LfsHost, oids: &[String]) -> Vec<usize> {
    oids.iter().map(|oid| host.downloads(oid)).collect()
}

fn lfs_remote(host: &LfsHost) -> String {
    format!(
        "[[remote]]\nname = \"lfs\"\nkind = \"lfs\"\nmirrors = [\"{}\"]\n",
        host.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_lfs_clones_through_the_proxy_fetch_each_object_once_and_admit_only_readers() {
    let Some(version) = client("git-lfs", "version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let root = w.join("repositories");
    let objects = tokio::task::block_in_place(|| make_repository(w, &root));
    let host = LfsHost::start(Some(&root)).await;
    host.add_user("alice", "alice-secret");
    host.add_user("bob", "bob-secret");
    host.allow(&format!("{REPO}/info/lfs"), "alice");
    let oids: Vec<String> = objects
        .iter()
        .map(|(_, bytes)| host.put_object(bytes.clone()))
        .collect();

    // Cold: one download upstream per object.
    let proxy = TestProxy::start(&lfs_remote(&host)).await;
    let alice = client_home(w, "alice", &proxy, "alice:alice-secret");
    let (ok, said) = tokio::task::block_in_place(|| clone(&host, &alice, &w.join("cold")));
    assert!(ok, "{said}");
    assert_checked_out(&w.join("cold"), &objects, &said);
    proxy.settle().await;
    assert_eq!(downloads(&host, &oids), [1, 1, 1]);
    let cold = (host.batches(), host.total_downloads());

    // A second clone from a fresh directory and home, and `git lfs pull`
    // in a clone made without smudging: no object downloaded upstream.
    let again = client_home(w, "again", &proxy, "alice:alice-secret");
    let (ok, said) = tokio::task::block_in_place(|| clone(&host, &again, &w.join("warm")));
    assert!(ok, "{said}");
    assert_checked_out(&w.join("warm"), &objects, &said);
    let pulled = w.join("pulled");
    tokio::task::block_in_place(|| clone_unsmudged(&host, &again, &pulled));
    let (ok, said) = tokio::task::block_in_place(|| {
        outcome(git(&again).current_dir(&pulled).args(["lfs", "pull"]))
    });
    assert!(ok, "{said}");
    assert_checked_out(&pulled, &objects, &said);
    assert_eq!(downloads(&host, &oids), [1, 1, 1]);
    let warm_batches = host.batches() - cold.0;
    report("git-lfs", &version, cold.0 + cold.1, warm_batches);

    // Bob may not read the repository: his batch is refused upstream (404)
    // and he gets none of the bytes alice's clone cached.
    let bob = client_home(w, "bob", &proxy, "bob:bob-secret");
    let (ok, said) = tokio::task::block_in_place(|| clone(&host, &bob, &w.join("bob")));
    assert!(!ok, "{said}");
    for (name, _) in &objects {
        let len = std::fs::metadata(w.join("bob").join(name)).map_or(0, |m| m.len());
        assert!(len < 200, "{name}: {len} bytes: {said}");
    }
    let refused = reqwest::Client::new()
        .post(format!("{}/lfs/{REPO}/info/lfs/objects/batch", proxy.base))
        .basic_auth("bob", Some("bob-secret"))
        .body(format!(
            r#"{{"operation":"download","objects":[{{"oid":"{}","size":{}}}]}}"#,
            oids[2], SIZES[2]
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);
    let body = refused.text().await.unwrap();
    assert!(!body.contains("objects") && body.len() < 200, "{body}");
    assert_eq!(downloads(&host, &oids), [1, 1, 1]);
    proxy.stop().await;

    // Eight concurrent clones through a cold proxy: one download per object.
    let proxy = TestProxy::start(&lfs_remote(&host)).await;
    let before = downloads(&host, &oids);
    let batches = host.batches();
    let homes: Vec<PathBuf> = (0..8)
        .map(|i| client_home(w, &format!("c{i}"), &proxy, "alice:alice-secret"))
        .collect();
    let results = tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let clones: Vec<_> = homes
                .iter()
                .enumerate()
                .map(|(i, home)| {
                    let (host, dir) = (&host, w.join(format!("concurrent-{i}")));
                    scope.spawn(move || (clone(host, home, &dir), dir))
                })
                .collect();
            clones
                .into_iter()
                .map(|c| c.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    for ((ok, said), dir) in &results {
        assert!(ok, "{said}");
        assert_checked_out(dir, &objects, said);
        std::fs::remove_dir_all(dir).unwrap();
    }
    proxy.settle().await;
    let after = downloads(&host, &oids);
    let made: Vec<usize> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(made, [1, 1, 1]);
    println!(
        "LFS-CONCURRENT 8 clones: {} batches upstream, object downloads {made:?}",
        host.batches() - batches
    );
    proxy.stop().await;

    // A tampered object is refused and nothing is cached: once the host
    // has the right bytes, they are fetched.
    let proxy = TestProxy::start(&lfs_remote(&host)).await;
    host.put_as(&oids[1], tampered(&objects[1].1));
    let home = client_home(w, "tamper", &proxy, "alice:alice-secret");
    run(git(&home).args(["config", "--global", "lfs.transfer.maxretries", "1"]));
    let (ok, said) = tokio::task::block_in_place(|| clone(&host, &home, &w.join("tampered")));
    assert!(!ok, "{said}");
    let len = std::fs::metadata(w.join("tampered").join(&objects[1].0)).map_or(0, |m| m.len());
    assert!(len < 200, "{len} bytes: {said}");
    proxy.settle().await;
    host.put_as(&oids[1], objects[1].1.clone());
    let before = host.downloads(&oids[1]);
    let (ok, said) = tokio::task::block_in_place(|| clone(&host, &home, &w.join("fixed")));
    assert!(ok, "{said}");
    assert_checked_out(&w.join("fixed"), &objects, &said);
    assert_eq!(host.downloads(&oids[1]), before + 1);

    // Offline: with the Git host and its object store stopped, `git lfs
    // pull` in a clone made without smudging gets every object.
    let offline = w.join("offline");
    tokio::task::block_in_place(|| clone_unsmudged(&host, &home, &offline));
    proxy.settle().await;
    let upstream = (host.batches(), host.total_downloads(), host.git_requests());
    host.stop();
    let (ok, said) = tokio::task::block_in_place(|| {
        outcome(git(&home).current_dir(&offline).args(["lfs", "pull"]))
    });
    assert!(ok, "{said}");
    assert_checked_out(&offline, &objects, &said);
    let now = (host.batches(), host.total_downloads(), host.git_requests());
    assert_eq!(now, upstream);
    proxy.stop().await;
}
