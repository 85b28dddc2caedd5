//! `mirrorcache export` / `import`: a signed bundle made from one cache and
//! imported into another, whose entries are then HITs with the right bytes
//! and documents, with every mirror stopped; a damaged or wrongly signed
//! bundle imports nothing and says what is wrong; an import beside live
//! traffic keeps what the running cache has, and the advisory feeds the
//! bundle carries are in force on the running server within seconds.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{EncodePrivateKey, EncodePublicKey};
use sha2::Digest as _;

use crate::support::osv::{feed_status, malicious, osv_zip};
use crate::support::proxy::{config_text, get};
use crate::support::{sha256_hex, test_bytes, MirrorServer, TestProxy};
use mirrorcache::config::Config;
use mirrorcache::ops::bundle::{export, import};

/// The npm packument of `p` 1.0.0 at `base`, declaring the tarball's sha512.
fn packument(base: &str, tarball: &[u8]) -> String {
    let sri = format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(tarball))
    );
    serde_json::json!({"name": "p", "dist-tags": {"latest": "1.0.0"}, "versions": {
        "1.0.0": {"name": "p", "version": "1.0.0",
                  "dist": {"tarball": format!("{base}/p/-/p-1.0.0.tgz"), "integrity": sri}}}})
    .to_string()
}

fn remotes(npm: &MirrorServer, files: &MirrorServer) -> String {
    format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n\n\
         [[remote]]\nname = \"files\"\nmirrors = [\"{}\"]\nimmutable = [\"**\"]\n",
        npm.url("/m"),
        files.url("/f")
    )
}

/// What proxy A caches: a packument, its tarball, and three files, two of
/// them the same bytes (one blob, two rows).
struct Origin {
    npm: MirrorServer,
    files: MirrorServer,
    artifacts: Vec<(&'static str, Vec<u8>)>,
}

async fn origin() -> Origin {
    let (npm, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let tarball = test_bytes(30_000, 1);
    npm.put("/m/p", packument(&npm.url("/m"), &tarball));
    npm.put("/m/p/-/p-1.0.0.tgz", tarball.clone());
    let (one, two) = (test_bytes(200_000, 2), test_bytes(3 << 20, 3));
    files.put("/f/a/one.bin", one.clone());
    files.put("/f/a/same.bin", one.clone());
    files.put("/f/b/two.bin", two.clone());
    Origin {
        npm,
        files,
        artifacts: vec![
            ("/npm/p/-/p-1.0.0.tgz", tarball),
            ("/files/a/one.bin", one.clone()),
            ("/files/a/same.bin", one),
            ("/files/b/two.bin", two),
        ],
    }
}

/// Proxy A with everything fetched through it once (and committed).
async fn filled(origin: &Origin) -> TestProxy {
    let proxy = TestProxy::start(&remotes(&origin.npm, &origin.files)).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &proxy.url("/npm/p")).await.0, 200);
    proxy.settle().await;
    for (path, _) in &origin.artifacts {
        assert_eq!(get(&client, &proxy.url(path)).await.0, 200, "{path}");
    }
    proxy.settle().await;
    proxy
}

fn config_in(dir: &Path, origin: &Origin) -> Config {
    Config::parse(
        &config_text(dir, &remotes(&origin.npm, &origin.files)),
        "test.toml",
    )
    .unwrap()
}

/// An ed25519 key pair as PEM files (what `openssl genpkey` would write).
fn key_pair(dir: &Path, name: &str, seed: u8) -> (PathBuf, PathBuf) {
    let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
    let (private, public) = (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    );
    std::fs::write(
        &private,
        key.to_pkcs8_pem(LineEnding::LF).unwrap().as_bytes(),
    )
    .unwrap();
    std::fs::write(
        &public,
        key.verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap(),
    )
    .unwrap();
    (private, public)
}

async fn export_from(
    proxy: &TestProxy,
    origin: &Origin,
    out: &Path,
    key: Option<&Path>,
) -> export::Exported {
    export::run(
        &config_in(&proxy.dir, origin),
        &export::Options {
            out: out.to_path_buf(),
            select: Vec::new(),
            since: None,
            sign: key.map(Path::to_path_buf),
            terminal: false,
        },
    )
    .await
    .unwrap()
}

fn import_options(bundle: &Path, verify_key: Option<&Path>) -> import::Options {
    import::Options {
        bundle: bundle.to_path_buf(),
        verify_key: verify_key.map(Path::to_path_buf),
        terminal: false,
    }
}

/// Rebuilds a bundle with `change` applied to each file's bytes.
fn rewrite_bundle(from: &Path, to: &Path, mut change: impl FnMut(&str, &mut Vec<u8>)) {
    let mut archive = tar::Archive::new(
        zstd::stream::read::Decoder::new(std::fs::File::open(from).unwrap()).unwrap(),
    );
    let encoder = zstd::stream::write::Encoder::new(std::fs::File::create(to).unwrap(), 1).unwrap();
    let mut builder = tar::Builder::new(encoder);
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        change(&name, &mut bytes);
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, &name, bytes.as_slice())
            .unwrap();
    }
    builder
        .into_inner()
        .unwrap()
        .finish()
        .unwrap()
        .flush()
        .unwrap();
}

fn rows_in(dir: &Path) -> usize {
    let db = dir.join("meta.db");
    if !db.exists() {
        return 0;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["ls", "--json", "--config"])
        .arg(dir.join("test.toml"))
        .output()
        .unwrap();
    serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout)
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_then_import_into_an_empty_store_serves_every_entry_as_a_hit_with_every_mirror_stopped(
) {
    let origin = origin().await;
    let a = filled(&origin).await;
    let work = tempfile::tempdir().unwrap();
    let (key, public) = key_pair(work.path(), "bundle", 7);
    let bundle = work.path().join("cache.mcb");
    let exported = export_from(&a, &origin, &bundle, Some(&key)).await;
    // The packument and 4 artifact rows; one blob for the two equal files;
    // the packument's integrity and the three generic files' first-use pins.
    assert_eq!(
        (exported.entries, exported.blobs, exported.declared),
        (5, 4, 4),
        "{exported}"
    );
    assert!(exported.signed);
    let asked_by_a = origin.npm.total() + origin.files.total();
    origin.npm.stop();
    origin.files.stop();

    let b_dir = tempfile::tempdir().unwrap();
    let imported = import::run(
        &config_in(b_dir.path(), &origin),
        &import_options(&bundle, Some(&public)),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            imported.added,
            imported.kept,
            imported.skipped,
            imported.declared_added
        ),
        (5, 0, 0, 4),
        "{imported}"
    );
    assert_eq!(imported.signed, import::Signed::ByTrustedKey);
    // The small blobs (the packument, the tarball) were read from A's packs
    // and packed again in B's.
    let pack_bytes = |dir: &Path| -> u64 {
        let packs = std::fs::read_dir(dir.join("store/packs"))
            .unwrap()
            .flatten();
        packs.map(|pack| pack.metadata().unwrap().len()).sum()
    };
    assert!(pack_bytes(&a.dir) > 30_000);
    assert_eq!(pack_bytes(b_dir.path()), pack_bytes(&a.dir));
    let b = TestProxy::start_in(b_dir.path(), &remotes(&origin.npm, &origin.files)).await;
    let client = reqwest::Client::new();
    for (path, bytes) in &origin.artifacts {
        let (status, cache, body) = get(&client, &b.url(path)).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "{path}");
        assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(bytes), "{path}");
    }
    // The document, served from the bundle and rewritten for this proxy.
    let (status, cache, body) = get(&client, &b.url("/npm/p")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    let doc: serde_json::Value = serde_json::from_slice(&body.unwrap()).unwrap();
    assert_eq!(
        doc["versions"]["1.0.0"]["dist"]["tarball"],
        b.url("/npm/p/-/p-1.0.0.tgz")
    );
    assert_eq!(
        origin.npm.total() + origin.files.total(),
        asked_by_a,
        "B asked no mirror"
    );

    // Importing again adds nothing and keeps everything.
    let again = import::run(
        &config_in(b_dir.path(), &origin),
        &import_options(&bundle, Some(&public)),
    )
    .await
    .unwrap();
    assert_eq!(
        (again.added, again.kept, again.declared_added),
        (0, 5, 0),
        "{again}"
    );
    b.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_blob_or_a_bad_signature_imports_nothing_and_says_which() {
    let origin = origin().await;
    let a = filled(&origin).await;
    let work = tempfile::tempdir().unwrap();
    let (key, public) = key_pair(work.path(), "bundle", 7);
    let (_, other_public) = key_pair(work.path(), "other", 8);
    let good = work.path().join("good.mcb");
    export_from(&a, &origin, &good, Some(&key)).await;
    let two = sha256_hex(&origin.artifacts[3].1);

    // One byte of one blob (the last, so every other blob was staged first).
    let corrupt = work.path().join("corrupt.mcb");
    rewrite_bundle(&good, &corrupt, |name, bytes| {
        if name == format!("blobs/{two}") {
            bytes[1000] ^= 1;
        }
    });
    // The manifest changed under its signature.
    let resigned = work.path().join("forged.mcb");
    rewrite_bundle(&good, &resigned, |name, bytes| {
        if name == "mirrorcache-bundle.json" {
            let text = String::from_utf8(bytes.clone())
                .unwrap()
                .replace("a/one.bin", "a/0ne.bin");
            *bytes = text.into_bytes();
        }
    });

    let b_dir = tempfile::tempdir().unwrap();
    let config = config_in(b_dir.path(), &origin);
    let cases: [(&Path, Option<&Path>, &str); 4] = [
        (&corrupt, Some(&public), &format!("blob {two} is corrupt")),
        (&resigned, Some(&public), "bad signature"),
        (&resigned, None, "bad signature"),
        (&good, Some(&other_public), "not by the --verify-key"),
    ];
    for (bundle, verify, says) in cases {
        let error = import::run(&config, &import_options(bundle, verify))
            .await
            .unwrap_err();
        let text = format!("{error:#}");
        assert!(text.contains(says), "{text}");
        assert!(text.contains("nothing imported"), "{text}");
    }
    // Nothing was added, and no staged file was left behind.
    std::fs::write(
        b_dir.path().join("test.toml"),
        config_text(b_dir.path(), &remotes(&origin.npm, &origin.files)),
    )
    .unwrap();
    assert_eq!(rows_in(b_dir.path()), 0);
    assert_eq!(
        crate::support::proxy::temp_files_in(&b_dir.path().join("store")),
        0
    );

    // The command says it too, and exits 2.
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["import", "--config"])
        .arg(b_dir.path().join("test.toml"))
        .arg("--verify-key")
        .arg(&public)
        .arg(&corrupt)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("blob {two} is corrupt")),
        "{stderr}"
    );
    assert_eq!(rows_in(b_dir.path()), 0);

    // The good bundle, through the command: all of it.
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["import", "--config"])
        .arg(b_dir.path().join("test.toml"))
        .arg("--verify-key")
        .arg(&public)
        .arg(&good)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("imported 5 entries"), "{stdout}");
    assert_eq!(rows_in(b_dir.path()), 5);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_beside_live_traffic_keeps_what_the_server_has_and_serves_the_rest() {
    let origin = origin().await;
    let a = filled(&origin).await;
    // A's saved advisory feed travels in the bundle.
    let feed = osv_zip(&[malicious("MAL-2025-47020", "npm", "p", &["1.0.0"])]);
    std::fs::create_dir_all(a.dir.join("store/advisories")).unwrap();
    std::fs::write(a.dir.join("store/advisories/osv.zip"), &feed).unwrap();
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("cache.mcb");
    let exported = export_from(&a, &origin, &bundle, None).await;
    assert_eq!(exported.advisories, 1, "{exported}");

    // B has its own mirrors: one path the bundle also has, with other bytes
    // (B's entry must stay), and a hot file clients keep asking for.
    let (npm_b, files_b) = (MirrorServer::start().await, MirrorServer::start().await);
    let own = test_bytes(200_000, 9);
    let hot = test_bytes(50_000, 10);
    files_b.put("/f/a/one.bin", own.clone());
    files_b.put("/f/hot.bin", hot.clone());
    let b = TestProxy::start(&remotes(&npm_b, &files_b)).await;
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &b.url("/files/a/one.bin")).await.0, 200);
    b.settle().await;

    let traffic = tokio::spawn({
        let (client, url) = (client.clone(), b.url("/files/hot.bin"));
        let hot = hot.clone();
        async move {
            for _ in 0..200 {
                let (status, _, body) = get(&client, &url).await;
                assert_eq!(status, 200);
                assert_eq!(body.unwrap(), hot);
            }
        }
    });
    let config = Config::parse(
        &config_text(&b.dir, &remotes(&npm_b, &files_b)),
        "test.toml",
    )
    .unwrap();
    let imported = import::run(&config, &import_options(&bundle, None))
        .await
        .unwrap();
    traffic.await.unwrap();
    assert_eq!((imported.added, imported.kept), (4, 1), "{imported}");
    assert_eq!(imported.signed, import::Signed::Unsigned);
    assert_eq!(imported.advisories, 1, "{imported}");
    assert_eq!(
        std::fs::read(b.dir.join("store/advisories/osv.zip")).unwrap(),
        feed
    );
    // The running server reads it without a restart.
    feed_status(&b.base, "osv", |f| f["report"]["records"] == 1).await;

    npm_b.stop();
    files_b.stop();
    let (status, cache, body) = get(&client, &b.url("/files/a/one.bin")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(body.unwrap(), own, "the server's own entry is kept");
    for (path, bytes) in origin
        .artifacts
        .iter()
        .filter(|(p, _)| *p != "/files/a/one.bin")
    {
        let (status, cache, body) = get(&client, &b.url(path)).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "{path}");
        assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(bytes), "{path}");
    }
    // The store's count follows the import (the server re-derives it).
    assert!(b.running.proxy.cache.rederive_size().await.unwrap() >= (3 << 20) + 200_000);
    b.stop().await;
    a.stop().await;
}
