//! `mirrorcache warm` (lockfiles fetched through a running server) and
//! `mirrorcache ls` (what is cached, with hit counts written in batches).

use std::path::Path;
use std::process::Command;

use base64::Engine;
use serde_json::json;
use sha2::Digest;

use crate::support::proxy::{config_text, get};
use crate::support::{sha256_hex, test_bytes, MirrorServer, TestProxy};
use mirrorcache::ops::warm::{self, Options};

fn sri(bytes: &[u8]) -> String {
    format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(bytes))
    )
}

fn package_lock(packages: &[(&str, &str, &[u8])]) -> String {
    let mut map = serde_json::Map::new();
    map.insert("".into(), json!({"name": "app"}));
    for (key, version, bytes) in packages {
        let name = key.rsplit("node_modules/").next().unwrap();
        let file = name.rsplit('/').next().unwrap();
        map.insert(
            format!("node_modules/{key}"),
            json!({
                "version": version,
                "resolved": format!("https://registry.npmjs.org/{name}/-/{file}-{version}.tgz"),
                "integrity": sri(bytes),
            }),
        );
    }
    serde_json::to_string_pretty(&json!({"name": "app", "lockfileVersion": 3, "packages": map}))
        .unwrap()
}

fn options(proxy: &TestProxy, remote: &str, files: Vec<std::path::PathBuf>) -> Options {
    Options {
        server: proxy.base.clone(),
        remote: remote.into(),
        files,
        jobs: 4,
        terminal: false,
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_fills_the_cache_from_npm_and_cargo_lockfiles_so_installs_need_no_mirror() {
    let npm = MirrorServer::start().await;
    let (a, b) = (test_bytes(5000, 1), test_bytes(7000, 2));
    npm.put("/m/a/-/a-1.0.0.tgz", a.clone());
    npm.put("/m/@s/b/-/b-2.0.0.tgz", b.clone());
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    index.put_typed(
        "/config.json",
        json!({"dl": files.url("/crates"), "api": index.url("")}).to_string(),
        "application/json",
    );
    let krate = test_bytes(3000, 3);
    files.put("/crates/leaf/0.1.0/download", krate.clone());
    index.put_typed(
        "/le/af/leaf",
        "{\"name\":\"leaf\",\"vers\":\"0.1.0\"}\n",
        "text/plain",
    );
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n\n\
         [[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n",
        npm.url("/m"),
        index.url(""),
        files.url("/crates"),
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let lock = write(
        dir.path(),
        "web/package-lock.json",
        &package_lock(&[("a", "1.0.0", &a), ("a/node_modules/@s/b", "2.0.0", &b)]),
    );
    let cargo_lock = write(
        dir.path(),
        "Cargo.lock",
        &format!(
            "version = 3\n\n[[package]]\nname = \"app\"\nversion = \"0.1.0\"\n\n\
             [[package]]\nname = \"leaf\"\nversion = \"0.1.0\"\n\
             source = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{}\"\n",
            sha256_hex(&krate)
        ),
    );

    let summary = warm::run(&options(&proxy, "npm", vec![lock.clone()]))
        .await
        .unwrap();
    assert_eq!((summary.fetched, summary.cached), (2, 0), "{summary}");
    assert!(summary.failed.is_empty(), "{summary}");
    let summary = warm::run(&options(&proxy, "cargo", vec![cargo_lock]))
        .await
        .unwrap();
    // The crate, and its index file (cargo reads it even with a lockfile).
    assert_eq!((summary.fetched, summary.failed.len()), (2, 0), "{summary}");
    assert_eq!(index.hits("/le/af/leaf"), 1);
    proxy.settle().await;
    // Again: everything is already cached.
    let summary = warm::run(&options(&proxy, "npm", vec![lock]))
        .await
        .unwrap();
    assert_eq!((summary.fetched, summary.cached), (0, 2), "{summary}");

    // Every mirror down: the artifacts come from the cache alone.
    npm.stop();
    files.stop();
    let client = reqwest::Client::new();
    let (status, cache, body) = get(&client, &proxy.url("/npm/@s/b/-/b-2.0.0.tgz")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(body.unwrap(), b);
    let (status, cache, body) = get(&client, &proxy.url("/cargo/~files/leaf/0.1.0/download")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(body.unwrap(), krate);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_names_a_missing_or_corrupt_artifact_and_exits_1_and_fetches_nothing_for_a_bad_lockfile(
) {
    let npm = MirrorServer::start().await;
    let a = test_bytes(4000, 4);
    npm.put("/m/a/-/a-1.0.0.tgz", a.clone());
    npm.put("/m/c/-/c-1.0.0.tgz", b"not what the lockfile says".to_vec());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n",
        npm.url("/m")
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let lock = write(
        dir.path(),
        "package-lock.json",
        &package_lock(&[
            ("a", "1.0.0", &a),
            ("gone", "1.0.0", b"x"),
            ("c", "1.0.0", b"the real c"),
        ]),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args([
            "warm",
            "--server",
            &proxy.base,
            "--remote",
            "npm",
            "--jobs",
            "2",
        ])
        .arg(&lock)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("fetched a@1.0.0"), "{stdout}");
    assert!(
        stdout.contains("1 fetched, 0 already cached, 2 failed"),
        "{stdout}"
    );
    assert!(
        stdout.contains("failed: gone@1.0.0: ") && stdout.contains("answered 404"),
        "{stdout}"
    );
    assert!(
        stdout.contains("failed: c@1.0.0: ") && stdout.contains("digest does not match"),
        "{stdout}"
    );

    let before = npm.total();
    let broken = write(
        dir.path(),
        "other/package-lock.json",
        "{\n  \"lockfileVersion\": 3,\n  \"packages\": {\n    \"node_modules/a\": {,\n  }\n}\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["warm", "--server", &proxy.base, "--remote", "npm"])
        .arg(&lock)
        .arg(&broken)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:4: ", broken.display())),
        "names the file and line: {stderr}"
    );
    assert_eq!(npm.total(), before, "nothing is fetched");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_lists_entries_with_hit_counts_written_in_batches() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/pkg/a-1.tgz", vec![1u8; 1500]);
    mirror.put("/m/pkg/b-1.tgz", vec![2u8; 10]);
    mirror.put("/m/other/c-1.tgz", vec![3u8; 20]);
    let dir = tempfile::tempdir().unwrap();
    let remotes = format!(
        "[[remote]]\nname = \"npm\"\nmirrors = [\"{}\"]\nimmutable = [\"**\"]\n",
        mirror.url("/m")
    );
    let config_path = write(
        dir.path(),
        "mirrorcache.toml",
        &config_text(dir.path(), &remotes),
    );
    let config = mirrorcache::config::Config::load(&config_path).unwrap();
    let proxy = TestProxy::start_in(dir.path(), &remotes).await;
    let client = reqwest::Client::new();
    for path in ["/npm/pkg/a-1.tgz", "/npm/pkg/b-1.tgz", "/npm/other/c-1.tgz"] {
        get(&client, &proxy.url(path)).await.2.unwrap();
    }
    proxy.settle().await;
    for _ in 0..3 {
        assert_eq!(get(&client, &proxy.url("/npm/pkg/a-1.tgz")).await.1, "HIT");
    }
    // No database write per hit: the counts are still in memory.
    let rows = mirrorcache::ops::ls::list(&config, Some("npm/pkg/"))
        .await
        .unwrap();
    assert_eq!(rows.iter().map(|r| r.hits).collect::<Vec<_>>(), [0, 0]);
    // The batch (every 30 s by the evictor; here by hand), then a stop.
    proxy
        .running
        .proxy
        .cache
        .meta
        .flush_access_times()
        .await
        .unwrap();
    assert_eq!(get(&client, &proxy.url("/npm/pkg/a-1.tgz")).await.1, "HIT");
    proxy.stop().await;

    let ls = |args: &[&str]| crate::support::binary::ls(&config_path, args);
    let json: serde_json::Value = serde_json::from_str(&ls(&["npm/pkg/", "--json"])).unwrap();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["path"], "pkg/a-1.tgz");
    assert_eq!(rows[0]["size"], 1500);
    assert_eq!(rows[0]["hits"], 4, "three hits flushed, one at shutdown");
    assert_eq!(rows[1]["path"], "pkg/b-1.tgz");
    assert_eq!(rows[1]["hits"], 0);
    let table = ls(&[]);
    assert!(table.contains("npm/other/c-1.tgz"), "{table}");
    assert!(
        table.lines().last().unwrap().starts_with("3 entries, "),
        "{table}"
    );
    assert!(ls(&["nothing"]).contains("0 entries"));

    // verify without a terminal: no bar, no control characters, and an end
    // line with the counts.
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["verify", "--config"])
        .arg(&config_path)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    let end = stdout.lines().last().unwrap();
    assert!(
        end.starts_with("checked 3 blobs (1530 bytes): 0 corrupt, 0 missing, 0 unreferenced (0 recent left alone) in "),
        "{end}"
    );
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\r'),
        "{stderr:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_resolves_requirements_through_the_simple_page_and_reads_go_sum() {
    let (index, files, go) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    let (wheel, sdist, six) = (test_bytes(900, 5), test_bytes(800, 6), test_bytes(700, 7));
    let link = |file: &str, bytes: &[u8]| {
        format!(
            "<a href=\"{}/packages/{file}#sha256={}\">{file}</a><br/>",
            files.url(""),
            sha256_hex(bytes)
        )
    };
    index.put_typed(
        "/simple/mc-alpha/",
        format!(
            "<html><body>{}{}{}</body></html>",
            link("mc_alpha-1.0-py3-none-any.whl", &wheel),
            link("mc-alpha-1.0.tar.gz", &sdist),
            link("mc_alpha-0.9-py3-none-any.whl", b"old"),
        ),
        "text/html",
    );
    index.put_typed(
        "/simple/six/",
        link("six-1.16.0-py2.py3-none-any.whl", &six),
        "text/html",
    );
    files.put("/packages/mc_alpha-1.0-py3-none-any.whl", wheel.clone());
    files.put("/packages/mc-alpha-1.0.tar.gz", sdist.clone());
    files.put("/packages/six-1.16.0-py2.py3-none-any.whl", six.clone());
    go.put("/golang.org/x/!text/@v/v0.3.0.zip", test_bytes(600, 8));
    go.put(
        "/golang.org/x/!text/@v/v0.3.0.mod",
        b"module golang.org/x/Text\n".to_vec(),
    );
    go.put(
        "/golang.org/x/!text/@v/v0.3.0.info",
        b"{\"Version\":\"v0.3.0\"}".to_vec(),
    );
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n\n\
         [[remote]]\nname = \"go\"\nkind = \"go\"\nmirrors = [\"{}\"]\n",
        index.url(""),
        files.url(""),
        go.url(""),
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    // The hash pins the wheel only; six, without a hash, gets every file of
    // its version (checked against the page's #sha256).
    let requirements = write(
        dir.path(),
        "requirements.txt",
        &format!(
            "# pip-compile\nMC_Alpha==1.0 \\\n    --hash=sha256:{}\nsix==1.16.0\n",
            sha256_hex(&wheel)
        ),
    );
    let summary = warm::run(&options(&proxy, "pypi", vec![requirements]))
        .await
        .unwrap();
    assert_eq!((summary.fetched, summary.failed.len()), (2, 0), "{summary}");
    assert_eq!(files.hits("/packages/mc_alpha-1.0-py3-none-any.whl"), 1);
    assert_eq!(files.hits("/packages/mc-alpha-1.0.tar.gz"), 0);
    assert_eq!(files.hits("/packages/six-1.16.0-py2.py3-none-any.whl"), 1);

    let missing = write(dir.path(), "more/requirements.txt", "mc-alpha==2.0\n");
    let summary = warm::run(&options(&proxy, "pypi", vec![missing]))
        .await
        .unwrap();
    assert_eq!(summary.failed.len(), 1, "{summary}");
    assert!(
        summary.failed[0].1.contains("no file of mc-alpha==2.0"),
        "{summary}"
    );

    let go_sum = write(
        dir.path(),
        "go.sum",
        "golang.org/x/Text v0.3.0 h1:g61tztE5qeGQ89tm6NTjjM9VPIm088od1l6aSorWRWg=\n\
         golang.org/x/Text v0.3.0/go.mod h1:NqM8EUOU14njkJ3fqMW+pc6Ldnwhi/IjpwHt7yyuwOQ=\n",
    );
    let summary = warm::run(&options(&proxy, "go", vec![go_sum]))
        .await
        .unwrap();
    assert_eq!((summary.fetched, summary.failed.len()), (3, 0), "{summary}");
    proxy.settle().await;
    go.stop();
    let client = reqwest::Client::new();
    let (status, cache, _) = get(&client, &proxy.url("/go/golang.org/x/!text/@v/v0.3.0.zip")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    proxy.stop().await;
}

/// What `ls` reads, the same on either backend: prefix filters (with `_` and
/// `%`, wildcards to LIKE, taken literally) and hits added in batches.
async fn listing(url: &str) {
    use mirrorcache::cache::{Digest, Entry, MetadataStore};
    use mirrorcache::ops::ls::entries;
    use mirrorcache::path::ArtifactPath;
    // Room for every row below in the entry cache, whose hits are counted
    // in the entries it holds.
    let meta = MetadataStore::connect(url, 1_000, 1 << 20).await.unwrap();
    for (n, path) in [
        "/r/a_b/1.tgz",
        "/r/a_b/2.tgz",
        "/r/axb/3.tgz",
        "/s/a_b/4.tgz",
    ]
    .into_iter()
    .enumerate()
    {
        let entry = Entry::new(
            Digest([n as u8; 32]),
            10 + n as u64,
            None,
            None,
            None,
            1_000,
        );
        meta.record(&ArtifactPath::parse(path).unwrap(), entry)
            .await
            .unwrap();
    }
    let hot = meta
        .lookup(&ArtifactPath::parse("/r/a_b/2.tgz").unwrap())
        .await
        .unwrap()
        .unwrap();
    for at in [5_000, 5_001, 9_000] {
        hot.touch(at);
    }
    assert_eq!(meta.flush_access_times().await.unwrap(), 1);
    hot.touch(9_500);
    assert_eq!(meta.flush_access_times().await.unwrap(), 1);
    assert_eq!(meta.flush_access_times().await.unwrap(), 0);
    /// Each row's path, hits and last access.
    fn counted(rows: &[mirrorcache::ops::ls::Listed]) -> Vec<(&str, u64, i64)> {
        rows.iter()
            .map(|r| (r.path.as_str(), r.hits, r.last_access_ms))
            .collect()
    }
    let rows = entries(&meta, Some("r"), "a_b/").await.unwrap();
    let got = counted(&rows);
    assert_eq!(got, [("a_b/1.tgz", 0, 1_000), ("a_b/2.tgz", 4, 9_000)]);
    assert_eq!(entries(&meta, None, "a_b/").await.unwrap().len(), 3);
    assert_eq!(entries(&meta, Some("r"), "").await.unwrap().len(), 3);
    assert!(entries(&meta, Some("r"), "a%").await.unwrap().is_empty());
    // A flush of more rows than one statement takes (they go 32 to an
    // `UPDATE … FROM (VALUES …)` on Postgres, 256 on SQLite): each row gets
    // its own hits and access time, and rows not hit keep theirs.
    let many: Vec<ArtifactPath> = (0..300)
        .map(|i| ArtifactPath::parse(&format!("/r/many/{i:03}")).unwrap())
        .collect();
    for (i, path) in many.iter().enumerate() {
        let entry = Entry::new(Digest([9; 32]), 1, None, None, None, 20_000 - i as i64);
        meta.record(path, entry).await.unwrap();
    }
    let hit = |i: usize| i % 7 != 3;
    for (i, path) in many.iter().enumerate().filter(|(i, _)| hit(*i)) {
        let entry = meta.lookup(path).await.unwrap().unwrap();
        for _ in 0..=i {
            meta.memory.touch(path, &entry, 30_000 + i as i64 * 1_000);
        }
    }
    assert_eq!(meta.flush_access_times().await.unwrap(), 257);
    let rows = entries(&meta, Some("r"), "many/").await.unwrap();
    let got = counted(&rows);
    let names: Vec<String> = (0..300).map(|i| format!("many/{i:03}")).collect();
    let want: Vec<(&str, u64, i64)> = (0..300)
        .map(|i| match hit(i) {
            true => (names[i].as_str(), i as u64 + 1, 30_000 + i as i64 * 1_000),
            false => (names[i].as_str(), 0, 20_000 - i as i64),
        })
        .collect();
    assert_eq!(got, want);
    // A later access time already in a row (another instance's write) is
    // kept; the hits add up.
    let other = sqlx::AnyPool::connect(url).await.unwrap();
    sqlx::query(
        "UPDATE entries SET last_access = 99000000 WHERE remote = 'r' AND path = 'many/001'",
    )
    .execute(&other)
    .await
    .unwrap();
    other.close().await;
    let entry = meta.lookup(&many[1]).await.unwrap().unwrap();
    meta.memory.touch(&many[1], &entry, 40_000_000);
    assert_eq!(meta.flush_access_times().await.unwrap(), 1);
    let row = &entries(&meta, Some("r"), "many/001").await.unwrap()[0];
    assert_eq!((row.hits, row.last_access_ms), (3, 99_000_000));
    meta.db.close().await;
}

#[tokio::test]
async fn listing_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    listing(&format!("sqlite://{}/meta.db", dir.path().display())).await;
}

#[tokio::test]
async fn listing_on_postgres() {
    let Some(db) = crate::metadata::PgDatabase::create().await else {
        return;
    };
    listing(&db.url).await;
}
