//! go mod download through a `go` remote (GOPROXY protocol), from a module
//! zip built on the spot. Debian's golang may be absent: then this test skips
//! loudly through `support::available`, which fails it instead under
//! `MIRRORCACHE_REQUIRE_SERVICES=1` (as `.ci/run` sets, after trying to
//! install golang-go).

use std::process::Command;

use crate::support::{available, MirrorServer, TestProxy};
use crate::{report, run, version, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_mod_download_through_the_proxy_then_from_the_cache_alone() {
    let Some(go) = version("go", "version") else {
        available("go (Debian's golang-go)", false);
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let module = "example.com/mchello";
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
    origin.put_typed(&format!("/{module}/@v/v1.0.0.zip"), zip, "application/zip");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"go\"\nkind = \"go\"\nmirrors = [\"{}\"]\n",
        origin.url("")
    ))
    .await;
    let goproxy = proxy.url("/go");

    let round = |n: usize| {
        let project = w.join(format!("project{n}"));
        write(
            &project.join("go.mod"),
            &format!("module consumer\n\ngo 1.19\n\nrequire {module} v1.0.0\n"),
        );
        let out = run(Command::new("go")
            .args(["mod", "download", "-json", module])
            .current_dir(&project)
            .env("GOPROXY", &goproxy)
            .env("GOSUMDB", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("GOPATH", w.join(format!("gopath{n}")))
            .env("GOMODCACHE", w.join(format!("gomodcache{n}")))
            .env("GOCACHE", w.join(format!("gocache{n}")))
            .env("HOME", w.join(format!("home{n}"))));
        assert!(out.contains("\"Version\": \"v1.0.0\""), "{out}");
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
