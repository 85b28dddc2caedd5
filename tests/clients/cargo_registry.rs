//! cargo fetch through a `cargo` remote (sparse protocol) whose `config.json`
//! points downloads at a separate files origin, as crates.io's does — spelt
//! with an upper-case host and an explicit port, which the proxy must still
//! recognise as its own mirrors' — and `cargo search` through its `api`.

use std::process::Command;

use serde_json::json;

use crate::support::{sha256_hex, MirrorServer, TestProxy};
use crate::{assert_refused_as_read_only, report, run, version, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_fetch_through_the_proxy_then_from_the_cache_alone() {
    let cargo_version = version("cargo", "--version").expect("cargo runs the tests, so it is here");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let krate = crate::fixtures::cargo_leaf(w);

    let index = MirrorServer::start().await;
    let files = MirrorServer::start().await;
    let (index_port, files_port) = (index.addr.port(), files.addr.port());
    index.put_typed(
        "/config.json",
        json!({"dl": format!("HTTP://LocalHost:{files_port}/crates"),
               "api": format!("http://LOCALHOST:{index_port}/")})
        .to_string(),
        "application/json",
    );
    index.put_typed(
        "/api/v1/crates",
        json!({"crates": [{"name": "mc_leaf", "max_version": "0.1.0",
                           "description": "found by the fixture search"}],
               "meta": {"total": 1}})
        .to_string(),
        "application/json",
    );
    let line = json!({"name": "mc_leaf", "vers": "0.1.0", "deps": [], "cksum": sha256_hex(&krate), "features": {}, "yanked": false});
    index.put_typed("/mc/_l/mc_leaf", format!("{line}\n"), "text/plain");
    files.put_typed("/crates/mc_leaf/0.1.0/download", krate, "application/x-tar");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"http://localhost:{index_port}\"]\n\
         files = [\"http://localhost:{files_port}/crates\"]\n",
    ))
    .await;
    let registry = format!("sparse+{}", proxy.url("/cargo/"));

    let round = |n: usize| {
        let (project, home) = crate::fixtures::cargo_consumer(w, n, &registry, "");
        run(Command::new("cargo")
            .arg("fetch")
            .current_dir(&project)
            .env("CARGO_HOME", &home));
        crate::fixtures::assert_leaf_downloaded(&home);
        // The web API is passed through, uncached: only while the origin is up.
        if n == 1 {
            let found = run(Command::new("cargo")
                .args(["search", "--index", &registry, "mc_leaf"])
                .current_dir(&project)
                .env("CARGO_HOME", &home));
            assert!(found.contains("found by the fixture search"), "{found}");
        }
    };
    tokio::task::block_in_place(|| round(1));
    // cargo publish through the proxy: refused, and cargo says why.
    let new_crate = w.join("mc_new");
    write(
        &new_crate.join("Cargo.toml"),
        "[package]\nname = \"mc_new\"\nversion = \"0.1.0\"\nedition = \"2021\"\ndescription = \"test\"\nlicense = \"MIT\"\n",
    );
    write(&new_crate.join("src/lib.rs"), "");
    assert_refused_as_read_only(
        "cargo",
        Command::new("cargo")
            .args([
                "publish",
                "--no-verify",
                "--allow-dirty",
                "--token",
                "test-token",
                "--index",
            ])
            .arg(&registry)
            .current_dir(&new_crate)
            .env("CARGO_HOME", w.join("publishhome"))
            .env("CARGO_TARGET_DIR", w.join("packtarget")),
    );
    let first = index.total() + files.total();
    assert_eq!(index.hits("/api/v1/crates"), 1, "{:?}", index.requests());
    assert_eq!(
        files.hits("/crates/mc_leaf/0.1.0/download"),
        1,
        "{:?}",
        files.requests()
    );
    index.stop();
    files.stop();
    tokio::task::block_in_place(|| round(2));
    let second = index.total() + files.total() - first;
    assert_eq!(second, 0);
    report("cargo", &cargo_version, first, second);
    proxy.stop().await;
}
