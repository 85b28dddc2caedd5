//! R (Debian's 4.2: `Rscript`, `install.packages`) through a `cran`
//! remote, against two fixture CRAN mirrors on 127.0.0.1 built on the spot:
//! three tiny packages made with `R CMD build` (`mctop` imports `mcleaf`;
//! `mcbad` is denied) and their indexes (`PACKAGES`, `.gz`, `.rds`) written
//! by `tools::write_PACKAGES`. The first mirror sends a tampered `mcleaf`
//! whose `MD5sum` the index still declares. What R asks for is read from
//! its source (`src/library/utils/R/packages.R`: `available.packages` reads
//! `PACKAGES.rds`, then `.gz`, then the plain file, once per session;
//! `download.packages` then each `<pkg>_<version>.tar.gz`): the proxy reads
//! `PACKAGES.gz` itself for the MD5. `install.packages("mctop")` runs
//! through the proxy, then in a fresh home with every origin stopped; the
//! denied package's refusal is printed by R's `wget` download method (the
//! default `libcurl` one prints the status code only).

use std::path::Path;
use std::process::Command;

use crate::support::{tampered, MirrorServer, TestProxy};
use crate::{client, files_below, outcome, report, run, write};

/// A package `name` `version` of one R function, importing `imports`.
fn package_source(w: &Path, name: &str, version: &str, imports: &str) -> std::path::PathBuf {
    let dir = w.join("src").join(name);
    let imports = if imports.is_empty() {
        String::new()
    } else {
        format!("Imports: {imports}\n")
    };
    write(
        &dir.join("DESCRIPTION"),
        &format!(
            "Package: {name}\nVersion: {version}\nTitle: Fixture\nDescription: A mirrorcache fixture.\n\
             License: MIT\nAuthor: mirrorcache\nMaintainer: mirrorcache <mc@example.invalid>\n{imports}"
        ),
    );
    write(
        &dir.join("R/f.R"),
        &format!("{name}_value <- function() 1\n"),
    );
    write(&dir.join("NAMESPACE"), &format!("export({name}_value)\n"));
    dir
}

/// The fixture repository in `w/repo`: the three packages built and indexed.
fn repository(w: &Path) -> std::path::PathBuf {
    let contrib = w.join("repo/src/contrib");
    std::fs::create_dir_all(&contrib).unwrap();
    let sources = [
        package_source(w, "mcleaf", "1.0.0", ""),
        package_source(w, "mctop", "2.1-3", "mcleaf (>= 1.0)"),
        package_source(w, "mcbad", "0.1", ""),
    ];
    run(Command::new("R")
        .args(["CMD", "build", "--no-build-vignettes", "--no-manual"])
        .args(&sources)
        .current_dir(&contrib)
        .env("HOME", w));
    run(Command::new("Rscript")
        .args(["-e", "tools::write_PACKAGES('.', type = 'source')"])
        .current_dir(&contrib)
        .env("HOME", w));
    w.join("repo")
}

/// `install.packages(package)` from `repos` into a fresh library, with a
/// home and temporary directory of its own (R keeps the index it read for
/// the session in `tempdir()`); `method` sets `download.file.method`.
/// Returns what R printed (it exits 0 when a package fails).
fn install(w: &Path, n: usize, repos: &str, package: &str, method: &str) -> String {
    let home = w.join(format!("r-home{n}"));
    for dir in ["lib", "tmp"] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
    }
    let script = format!(
        "options(download.file.method = '{method}'); \
         install.packages('{package}', repos = '{repos}', lib = '{}')",
        home.join("lib").display()
    );
    let (_, said) = outcome(
        Command::new("Rscript")
            .args(["-e", &script])
            .env("HOME", &home)
            .env("TMPDIR", home.join("tmp"))
            .env("R_LIBS_USER", home.join("lib"))
            .env("R_PROFILE_USER", "/dev/null")
            .env("R_ENVIRON_USER", "/dev/null"),
    );
    said
}

fn installed(w: &Path, n: usize, package: &str) -> bool {
    w.join(format!("r-home{n}/lib/{package}/DESCRIPTION"))
        .exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_installs_past_a_tampered_mirror_then_from_the_cache_alone() {
    let Some(version) = client("Rscript", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let repo = tokio::task::block_in_place(|| repository(w));
    let (tampering, good) = (MirrorServer::start().await, MirrorServer::start().await);
    for file in files_below(&repo) {
        let relative = file.strip_prefix(&repo).unwrap().to_str().unwrap();
        let bytes = std::fs::read(&file).unwrap();
        tampering.put(&format!("/c/{relative}"), bytes.clone());
        good.put(&format!("/c/{relative}"), bytes);
    }
    let leaf = std::fs::read(repo.join("src/contrib/mcleaf_1.0.0.tar.gz")).unwrap();
    tampering.put("/c/src/contrib/mcleaf_1.0.0.tar.gz", tampered(&leaf));
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"cran\"\nkind = \"cran\"\nmirrors = {}\nstrategy = \"single\"\ndeny = [\"mcbad\"]\n",
        crate::support::toml_urls(&[&tampering, &good], "/c")
    ))
    .await;
    let repos = proxy.url("/cran");
    let upstream = || tampering.total() + good.total();

    let said = tokio::task::block_in_place(|| install(w, 1, &repos, "mctop", "libcurl"));
    assert!(
        installed(w, 1, "mctop") && installed(w, 1, "mcleaf"),
        "{said}"
    );
    // R read the .rds; the proxy read PACKAGES.gz for the MD5 that refused
    // the tampered mcleaf, and took it from the second mirror.
    assert_eq!(tampering.hits("/c/src/contrib/PACKAGES.rds"), 1);
    assert_eq!(tampering.hits("/c/src/contrib/PACKAGES.gz"), 1);
    assert_eq!(good.hits("/c/src/contrib/mcleaf_1.0.0.tar.gz"), 1);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    // The denied package: refused, the reason in R's output.
    let said = tokio::task::block_in_place(|| install(w, 1, &repos, "mcbad", "wget"));
    assert!(!installed(w, 1, "mcbad"), "{said}");
    let line = said
        .lines()
        .find(|l| l.contains("is refused by this proxy"))
        .unwrap_or_else(|| panic!("no reason in R's output:\n{said}"));
    println!("GUARD-OUTPUT R: {}", line.trim());
    let denied = "/c/src/contrib/mcbad_0.1.tar.gz";
    assert_eq!(tampering.hits(denied) + good.hits(denied), 0);
    let first = upstream();

    tampering.stop();
    good.stop();
    let said = tokio::task::block_in_place(|| install(w, 2, &repos, "mctop", "libcurl"));
    assert!(
        installed(w, 2, "mctop") && installed(w, 2, "mcleaf"),
        "{said}"
    );
    let second = upstream() - first;
    assert_eq!(second, 0);
    report("R install.packages", &version, first, second);
    proxy.stop().await;
}
