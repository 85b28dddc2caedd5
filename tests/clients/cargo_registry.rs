//! cargo fetch through a `cargo` remote (sparse protocol) whose `config.json`
//! points downloads at a separate files origin, as crates.io's does.

use std::process::Command;

use crate::{report, run, version, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_fetch_through_the_proxy_then_from_the_cache_alone() {
    let cargo_version = version("cargo", "--version").expect("cargo runs the tests, so it is here");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let krate = crate::fixtures::cargo_leaf(w);

    let (index, files) = crate::fixtures::cargo_origins(&krate).await;
    let proxy = crate::fixtures::cargo_proxy(&index, &files).await;
    let registry = format!("sparse+{}", proxy.url("/cargo/"));

    let round = |n: usize| {
        let project = w.join(format!("project{n}"));
        write(
            &project.join("Cargo.toml"),
            "[package]\nname = \"consumer\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[dependencies]\nmc_leaf = \"0.1\"\n",
        );
        write(&project.join("src/lib.rs"), "");
        let home = w.join(format!("cargohome{n}"));
        write(
            &home.join("config.toml"),
            &format!("[source.crates-io]\nreplace-with = \"mc\"\n\n[source.mc]\nregistry = \"{registry}\"\n"),
        );
        run(Command::new("cargo")
            .arg("fetch")
            .current_dir(&project)
            .env("CARGO_HOME", &home));
        crate::fixtures::assert_leaf_downloaded(&home);
    };
    tokio::task::block_in_place(|| round(1));
    let first = index.total() + files.total();
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
