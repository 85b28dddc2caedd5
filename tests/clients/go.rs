//! go mod download through a `go` remote (GOPROXY protocol), from a module
//! zip built on the spot. Debian's golang may be absent: then this test skips
//! loudly through `support::available`, which fails it instead under
//! `MIRRORCACHE_REQUIRE_SERVICES=1` (as `.ci/run` sets, after trying to
//! install golang-go).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{available, MirrorServer, TestProxy};
use crate::{report, run, version, write};

/// The fixture module, at v1.0.0.
pub const MODULE: &str = "example.com/mchello";

/// An origin serving [`MODULE`] v1.0.0 by the GOPROXY protocol; with its
/// `go.mod` text and its zip.
pub async fn module_origin() -> (MirrorServer, String, Vec<u8>) {
    let module = MODULE;
    let go_mod = format!("module {module}\n\ngo 1.19\n");
    let zip = crate::fixtures::module_zip(
        module,
        "v1.0.0",
        &[
            ("go.mod", &go_mod),
            ("hello.go", "package mchello\n\nconst Hello = 1\n"),
        ],
    );
    let origin = MirrorServer::start().await;
    origin.put_typed(&format!("/{module}/@v/list"), "v1.0.0\n", "text/plain");
    origin.put_typed(
        &format!("/{module}/@v/v1.0.0.info"),
        "{\"Version\":\"v1.0.0\",\"Time\":\"2026-01-01T00:00:00Z\"}",
        "application/json",
    );
    origin.put_typed(
        &format!("/{module}/@v/v1.0.0.mod"),
        go_mod.clone(),
        "text/plain",
    );
    origin.put_typed(
        &format!("/{module}/@v/v1.0.0.zip"),
        zip.clone(),
        "application/zip",
    );
    (origin, go_mod, zip)
}

/// `go mod download` of [`MODULE`] in a fresh project and fresh caches of
/// round `n`, through `goproxy`, checked against `gosumdb` (or `off`).
/// Returns the project's directory.
fn download(w: &Path, n: usize, goproxy: &str, gosumdb: &str) -> PathBuf {
    let project = w.join(format!("project{n}"));
    write(
        &project.join("go.mod"),
        &format!("module consumer\n\ngo 1.19\n\nrequire {MODULE} v1.0.0\n"),
    );
    let out = run(Command::new("go")
        .args(["mod", "download", "-json", MODULE])
        .current_dir(&project)
        .env("GOPROXY", goproxy)
        .env("GOSUMDB", gosumdb)
        .env("GONOSUMDB", "")
        .env("GOPRIVATE", "")
        .env("GOFLAGS", "-mod=mod")
        .env("GOPATH", w.join(format!("gopath{n}")))
        .env("GOMODCACHE", w.join(format!("gomodcache{n}")))
        .env("GOCACHE", w.join(format!("gocache{n}")))
        .env("HOME", w.join(format!("home{n}"))));
    assert!(out.contains("\"Version\": \"v1.0.0\""), "{out}");
    project
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_mod_download_through_the_proxy_then_from_the_cache_alone() {
    let Some(go) = version("go", "version") else {
        available("go (Debian's golang-go)", false);
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (origin, _, _) = module_origin().await;
    let module = MODULE;
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"go\"\nkind = \"go\"\nmirrors = [\"{}\"]\n",
        origin.url("")
    ))
    .await;
    let goproxy = proxy.url("/go");

    let round = |n: usize| {
        let project = download(w, n, &goproxy, "off");
        // A module that does not exist: the go command gets the 404 it expects.
        let missing = Command::new("go")
            .args(["mod", "download", "example.com/nothere@v1.0.0"])
            .current_dir(&project)
            .env("GOPROXY", &goproxy)
            .env("GOSUMDB", "off")
            .env("GOMODCACHE", w.join(format!("gomodcache{n}")))
            .env("GOCACHE", w.join(format!("gocache{n}")))
            .env("HOME", w.join(format!("home{n}")))
            .output()
            .unwrap();
        assert!(!missing.status.success());
    };
    tokio::task::block_in_place(|| round(1));
    let first = origin.total();
    assert_eq!(
        origin.hits(&format!("/{module}/@v/v1.0.0.zip")),
        1,
        "{:?}",
        origin.requests()
    );
    origin.stop();
    tokio::task::block_in_place(|| round(2));
    let second = origin.total() - first;
    assert_eq!(second, 0);
    report("go", &go, first, second);
    proxy.stop().await;
}

/// The checksum database fixture (tests/clients/sumdb/main.go), killed on drop.
struct SumDb(std::process::Child);

impl Drop for SumDb {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The proxy's upstream fetches for the `go` remote so far (its own metric).
async fn upstream_fetches(proxy: &TestProxy) -> usize {
    proxy
        .metric("mirrorcache_upstream_fetches_total{remote=\"go\"")
        .await as usize
}

/// `go mod download` with `GOSUMDB` left on, naming a checksum database the
/// test signs with a key of its own (Debian's golang-golang-x-mod-dev builds
/// it): the go command finds `sumdb/mcsum/supported` on the proxy, checks the
/// module against lookups and tiles fetched through it, and the second round,
/// with the module origin and the database stopped and fresh caches, verifies
/// again from the proxy's cache alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_mod_download_verified_by_a_signed_checksum_database_through_the_proxy() {
    let Some(go) = version("go", "version") else {
        available("go (Debian's golang-go)", false);
        return;
    };
    let x_mod = Path::new("/usr/share/gocode/src/golang.org/x/mod/sumdb").is_dir();
    if !available(
        "Debian's golang-golang-x-mod-dev (the checksum database fixture)",
        x_mod,
    ) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (origin, go_mod, zip) = module_origin().await;
    std::fs::write(w.join("m.zip"), &zip).unwrap();
    std::fs::write(w.join("go.mod"), &go_mod).unwrap();
    run(Command::new("go")
        .args(["build", "-o"])
        .arg(w.join("sumdb-fixture"))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/clients/sumdb/main.go"
        ))
        .env("GO111MODULE", "off")
        .env("GOPATH", "/usr/share/gocode")
        .env("GOCACHE", w.join("buildcache")));
    let mut child = Command::new(w.join("sumdb-fixture"))
        .args([MODULE, "v1.0.0"])
        .arg(w.join("m.zip"))
        .arg(w.join("go.mod"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let sumdb = SumDb(child);
    let (addr, key) = line.trim().split_once(' ').expect("ADDRESS KEY");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"go\"\nkind = \"go\"\nmirrors = [\"{}\"]\nsumdb = [\"http://{addr}\"]\n",
        origin.url("")
    ))
    .await;
    let goproxy = proxy.url("/go");
    let round = |n: usize| {
        download(w, n, &goproxy, key);
    };
    tokio::task::block_in_place(|| round(1));
    let first = upstream_fetches(&proxy).await;
    // The lookup went through the proxy and is kept.
    let lookup = proxy.url(&format!("/go/sumdb/mcsum/lookup/{MODULE}@v1.0.0"));
    let (status, cache, body) = crate::support::proxy::get(&reqwest::Client::new(), &lookup).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert!(String::from_utf8_lossy(&body.unwrap()).contains(&format!("{MODULE} v1.0.0 h1:")));
    origin.stop();
    drop(sumdb);
    tokio::task::block_in_place(|| round(2));
    let second = upstream_fetches(&proxy).await - first;
    assert_eq!(second, 0);
    report("go + GOSUMDB", &go, first, second);
    proxy.stop().await;
}
