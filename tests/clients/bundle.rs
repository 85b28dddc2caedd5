//! The air-gapped round trip: `mirrorcache warm` fills proxy A from
//! lockfiles (npm, cargo, pip), `mirrorcache export --sign` writes one
//! bundle, every origin is stopped, `mirrorcache import --verify-key` adds
//! it to a running proxy B that has never reached a mirror, and `npm ci`,
//! `cargo fetch --locked` and `pip install --require-hashes` install through
//! B. The key pair is made by `openssl genpkey`, as an operator would.

use std::path::Path;
use std::process::Command;

use crate::support::proxy::config_text;
use crate::support::{sha256_hex, MirrorServer, TestProxy};
use crate::{run, write};
use mirrorcache::ops::warm::{self, Options};

fn mirrorcache(args: &[&str], paths: &[&Path]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mirrorcache"));
    cmd.args(args).args(paths);
    run(&mut cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_export_then_import_offline_lets_npm_cargo_and_pip_install_with_every_origin_stopped()
{
    let Some(npm) = crate::fixtures::tool("npm", "--version") else {
        return;
    };
    let Some(cargo) = crate::fixtures::tool("cargo", "--version") else {
        return;
    };
    let Some(pip) = crate::fixtures::tool("pip", "--version") else {
        return;
    };
    let Some(openssl) = crate::fixtures::tool("openssl", "version") else {
        return;
    };
    if !crate::fixtures::can_build_wheels() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();

    // npm: mc-a depending on mc-b, locked.
    let registry = MirrorServer::start().await;
    let npm_project = w.join("npm-project");
    crate::fixtures::npm_locked_project(w, &npm_project, &registry);

    // cargo: mc_leaf 0.1.0 on a sparse index, locked.
    let krate = crate::fixtures::cargo_leaf(w);
    let (cargo_index, cargo_files) = crate::fixtures::cargo_origins(&krate).await;
    let (cargo_project, cargo_home) = crate::fixtures::cargo_consumer(w, 1, "sparse+PROXY", "");
    write(
        &cargo_project.join("Cargo.lock"),
        &format!(
            "version = 3\n\n[[package]]\nname = \"consumer\"\nversion = \"0.0.0\"\ndependencies = [\n \"mc_leaf\",\n]\n\n\
             [[package]]\nname = \"mc_leaf\"\nversion = \"0.1.0\"\n\
             source = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{}\"\n",
            sha256_hex(&krate)
        ),
    );

    // pip: two wheels, a hashed requirements file.
    let (pypi_index, pypi_files) = (MirrorServer::start().await, MirrorServer::start().await);
    let requirements = crate::fixtures::pip_hashed_requirements(w, &pypi_index, &pypi_files);
    write(&w.join("requirements.txt"), &requirements);

    let remotes = format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n\n\
         [[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n\n\
         [[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n",
        registry.url(""),
        cargo_index.url(""),
        cargo_files.url("/crates"),
        pypi_index.url(""),
        pypi_files.url(""),
    );
    let a = TestProxy::start(&remotes).await;
    for (remote, file) in [
        ("npm", npm_project.join("package-lock.json")),
        ("cargo", cargo_project.join("Cargo.lock")),
        ("pypi", w.join("requirements.txt")),
    ] {
        let summary = warm::run(&Options {
            server: a.base.clone(),
            remote: remote.into(),
            files: vec![file],
            jobs: 4,
            terminal: false,
        })
        .await
        .unwrap();
        assert!(summary.failed.is_empty(), "{remote}: {summary}");
    }
    a.settle().await;

    // Export, signed with a key openssl made.
    let (key, public) = (w.join("bundle.key"), w.join("bundle.pub"));
    run(Command::new("openssl")
        .args(["genpkey", "-algorithm", "ed25519", "-out"])
        .arg(&key));
    run(Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&key)
        .arg("-out")
        .arg(&public));
    let a_config = a.dir.join("a.toml");
    write(&a_config, &config_text(&a.dir, &remotes));
    let bundle = w.join("offline.mcb");
    let exported = tokio::task::block_in_place(|| {
        mirrorcache(
            &["export", "--config"],
            &[
                &a_config,
                Path::new("--out"),
                &bundle,
                Path::new("--sign"),
                &key,
            ],
        )
    });
    assert!(exported.contains(", signed"), "{exported}");
    let origins = [
        &registry,
        &cargo_index,
        &cargo_files,
        &pypi_index,
        &pypi_files,
    ];
    let asked_by_a: usize = origins.iter().map(|o| o.total()).sum();
    for origin in origins {
        origin.stop();
    }

    // B: running, never reached a mirror; the bundle is imported beside it.
    let b_dir = tempfile::tempdir().unwrap();
    let b = TestProxy::start_in(b_dir.path(), &remotes).await;
    let b_config = b_dir.path().join("b.toml");
    write(&b_config, &config_text(b_dir.path(), &remotes));
    let imported = tokio::task::block_in_place(|| {
        mirrorcache(
            &["import", "--config"],
            &[&b_config, Path::new("--verify-key"), &public, &bundle],
        )
    });
    assert!(
        imported.contains("signature checked against --verify-key"),
        "{imported}"
    );
    assert!(imported.contains("0 already cached"), "{imported}");

    let registry_url = b.url("/npm/");
    let cargo_config = std::fs::read_to_string(cargo_home.join("config.toml"))
        .unwrap()
        .replace("PROXY", &b.url("/cargo/"));
    write(&cargo_home.join("config.toml"), &cargo_config);
    let index_url = b.url("/pypi/simple/");
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
            .arg(w.join("npm-cache"))
            .current_dir(&npm_project)
            .env("HOME", w.join("npm-home")));
        run(Command::new("cargo")
            .args(["fetch", "--locked"])
            .current_dir(&cargo_project)
            .env("CARGO_HOME", &cargo_home));
        crate::fixtures::pip_install_hashed(
            &index_url,
            &w.join("requirements.txt"),
            &w.join("pip-target"),
            &w.join("pip-home"),
        );
    });
    crate::fixtures::assert_npm_installed(&npm_project, &["mc-a", "mc-b"]);
    crate::fixtures::assert_leaf_downloaded(&cargo_home);
    assert!(w.join("pip-target/mc_gamma.py").exists());
    assert!(w.join("pip-target/mc_delta.py").exists());
    let asked_after: usize = origins.iter().map(|o| o.total()).sum();
    assert_eq!(asked_after, asked_by_a, "B asked no origin");
    println!(
        "CLIENT-REPORT bundle: {} bytes; {}; {}; npm {npm}, {cargo}, {pip}, {openssl}",
        std::fs::metadata(&bundle).unwrap().len(),
        exported.trim(),
        imported.trim()
    );
    b.stop().await;
    a.stop().await;
}
