//! `mirrorcache warm` then the real clients with every origin stopped: npm
//! (`npm ci` from a package-lock.json), cargo (`cargo fetch --locked` from a
//! Cargo.lock), pip (`pip install --require-hashes -r requirements.txt`) and
//! go (`go mod download` checking go.sum) install from what warm put in the
//! cache alone.

use std::process::Command;

use crate::support::{sha256_hex, MirrorServer, TestProxy};
use crate::{report, run, write};
use mirrorcache::ops::warm::{self, Options};

fn options(proxy: &TestProxy, remote: &str, file: std::path::PathBuf) -> Options {
    Options {
        server: proxy.base.clone(),
        remote: remote.into(),
        files: vec![file],
        jobs: 4,
        terminal: false,
    }
}

/// Warms `file` through `remote` (`n` artifacts, none failing), waits for
/// the commits, stops the origins; returns the requests they had.
async fn warm_then_stop(
    proxy: &TestProxy,
    remote: &str,
    file: std::path::PathBuf,
    n: usize,
    origins: &[&MirrorServer],
) -> usize {
    let summary = warm::run(&options(proxy, remote, file)).await.unwrap();
    assert_eq!((summary.fetched, summary.failed.len()), (n, 0), "{summary}");
    proxy.settle().await;
    let warmed = origins.iter().map(|o| o.total()).sum();
    for origin in origins {
        origin.stop();
    }
    warmed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_ci_installs_what_warm_fetched_with_the_origin_stopped() {
    let Some(npm) = crate::fixtures::tool("npm", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let registry = MirrorServer::start().await;
    let project = w.join("project");
    crate::fixtures::npm_locked_project(w, &project, &registry);
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n",
        registry.url("")
    ))
    .await;

    let warmed = warm_then_stop(
        &proxy,
        "npm",
        project.join("package-lock.json"),
        2,
        &[&registry],
    )
    .await;
    let registry_url = proxy.url("/npm/");
    tokio::task::block_in_place(|| {
        run(Command::new("npm")
            .args([
                "ci",
                "--no-audit",
                "--no-fund",
                "--registry",
                &registry_url,
                "--cache",
            ])
            .arg(w.join("cache"))
            .current_dir(&project)
            .env("HOME", w.join("home")))
    });
    crate::fixtures::assert_npm_installed(&project, &["mc-a", "mc-b"]);
    assert_eq!(registry.total(), warmed);
    report("npm ci after warm", &npm, warmed, 0);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_fetch_locked_uses_what_warm_fetched_with_the_origins_stopped() {
    let Some(cargo_version) = crate::fixtures::tool("cargo", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let krate = crate::fixtures::cargo_leaf(w);
    let (index, files) = crate::fixtures::cargo_origins(&krate).await;
    let proxy = crate::fixtures::cargo_proxy(&index, &files).await;
    let project = w.join("project");
    write(
        &project.join("Cargo.toml"),
        "[package]\nname = \"consumer\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[dependencies]\nmc_leaf = \"0.1\"\n",
    );
    write(&project.join("src/lib.rs"), "");
    write(
        &project.join("Cargo.lock"),
        &format!(
            "version = 3\n\n[[package]]\nname = \"consumer\"\nversion = \"0.0.0\"\ndependencies = [\n \"mc_leaf\",\n]\n\n\
             [[package]]\nname = \"mc_leaf\"\nversion = \"0.1.0\"\n\
             source = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{}\"\n",
            sha256_hex(&krate)
        ),
    );

    let warmed = warm_then_stop(
        &proxy,
        "cargo",
        project.join("Cargo.lock"),
        2,
        &[&index, &files],
    )
    .await;
    let home = w.join("cargohome");
    write(
        &home.join("config.toml"),
        &format!(
            "[source.crates-io]\nreplace-with = \"mc\"\n\n[source.mc]\nregistry = \"sparse+{}\"\n",
            proxy.url("/cargo/")
        ),
    );
    tokio::task::block_in_place(|| {
        run(Command::new("cargo")
            .args(["fetch", "--locked"])
            .current_dir(&project)
            .env("CARGO_HOME", &home))
    });
    crate::fixtures::assert_leaf_downloaded(&home);
    assert_eq!(index.total() + files.total(), warmed);
    report("cargo fetch after warm", &cargo_version, warmed, 0);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_installs_a_hashed_requirements_file_that_warm_fetched_with_the_origins_stopped() {
    let Some(pip) = crate::fixtures::tool("pip", "--version") else {
        return;
    };
    if !crate::fixtures::can_build_wheels() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let requirements = crate::fixtures::pip_hashed_requirements(w, &index, &files);
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n",
        index.url(""),
        files.url("")
    ))
    .await;
    write(&w.join("requirements.txt"), &requirements);

    let warmed = warm_then_stop(
        &proxy,
        "pypi",
        w.join("requirements.txt"),
        2,
        &[&index, &files],
    )
    .await;
    let index_url = proxy.url("/pypi/simple/");
    tokio::task::block_in_place(|| {
        crate::fixtures::pip_install_hashed(
            &index_url,
            &w.join("requirements.txt"),
            &w.join("target"),
            &w.join("home"),
        )
    });
    assert!(w.join("target/mc_gamma.py").exists());
    assert!(w.join("target/mc_delta.py").exists());
    assert_eq!(index.total() + files.total(), warmed);
    report("pip after warm", &pip, warmed, 0);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_mod_download_uses_what_warm_fetched_with_the_origin_stopped() {
    let Some(go) = crate::fixtures::tool("go", "version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let module = "example.com/mcwarm";
    let go_mod = format!("module {module}\n\ngo 1.19\n");
    let zip = crate::fixtures::module_zip(
        module,
        "v1.0.0",
        &[("go.mod", &go_mod), ("w.go", "package mcwarm\n")],
    );
    let info = "{\"Version\":\"v1.0.0\",\"Time\":\"2026-01-01T00:00:00Z\"}";
    let origin = MirrorServer::start().await;
    let layout: [(&str, Vec<u8>); 3] = [
        ("v1.0.0.info", info.into()),
        ("v1.0.0.mod", go_mod.clone().into()),
        ("v1.0.0.zip", zip),
    ];
    for (file, bytes) in &layout {
        origin.put(&format!("/{module}/@v/{file}"), bytes.clone());
        let on_disk = w.join("fileproxy").join(module).join("@v").join(file);
        std::fs::create_dir_all(on_disk.parent().unwrap()).unwrap();
        std::fs::write(on_disk, bytes).unwrap();
    }
    let go_env = |cmd: &mut Command, goproxy: &str, n: usize| {
        cmd.env("GOPROXY", goproxy)
            .env("GOSUMDB", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("GOMODCACHE", w.join(format!("gomodcache{n}")))
            .env("GOCACHE", w.join(format!("gocache{n}")))
            .env("HOME", w.join(format!("home{n}")));
    };
    // The go command's own go.sum lines, from a file GOPROXY of the same files.
    let mut sums = Command::new("go");
    sums.args(["mod", "download", "-json", &format!("{module}@v1.0.0")])
        .current_dir(w);
    go_env(
        &mut sums,
        &format!("file://{}", w.join("fileproxy").display()),
        0,
    );
    let sums: serde_json::Value = serde_json::from_str(&run(&mut sums)).unwrap();
    let project = w.join("project");
    write(
        &project.join("go.mod"),
        &format!("module consumer\n\ngo 1.19\n\nrequire {module} v1.0.0\n"),
    );
    write(
        &project.join("go.sum"),
        &format!(
            "{module} v1.0.0 {}\n{module} v1.0.0/go.mod {}\n",
            sums["Sum"].as_str().unwrap(),
            sums["GoModSum"].as_str().unwrap()
        ),
    );
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"go\"\nkind = \"go\"\nmirrors = [\"{}\"]\n",
        origin.url("")
    ))
    .await;

    let warmed = warm_then_stop(&proxy, "go", project.join("go.sum"), 3, &[&origin]).await;
    let goproxy = proxy.url("/go");
    let out = tokio::task::block_in_place(|| {
        let mut download = Command::new("go");
        download
            .args(["mod", "download", "-json", module])
            .current_dir(&project);
        go_env(&mut download, &goproxy, 1);
        run(&mut download)
    });
    assert!(out.contains("\"Version\": \"v1.0.0\""), "{out}");
    assert_eq!(origin.total(), warmed);
    report("go after warm", &go, warmed, 0);
    proxy.stop().await;
}
