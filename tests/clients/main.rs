//! The slow suite: real package-manager clients (pip, npm, cargo, apt-get, nuget,
//! go, mvn, dnf) in throwaway homes, and the dashboard in headless Chromium, through the proxy, against fixture registries
//! built on the spot from tiny packages and served on 127.0.0.1. Each client
//! runs twice: once with the origins up, once with every origin stopped
//! (served from the cache), and the origins' request logs show the second
//! round fetched nothing upstream. Run alone with `cargo test --test clients`.

#[path = "../it/support/mod.rs"]
mod support;

mod apt;
mod browser;
mod bundle;
mod cargo_registry;
mod composer;
mod conan;
mod conda;
mod cran;
mod daemon_fixtures;
mod daemons;
mod fixtures;
mod galaxy;
mod go;
mod guard;
mod hex;
mod huggingface;
mod integrity;
mod lfs;
mod maven;
mod nix;
mod npm;
mod npm_api;
mod npm_family;
mod nuget;
mod oci;
mod oci_fixtures;
mod pip;
mod private;
mod private_oci;
mod python_tools;
mod quarantine;
mod rpm;
mod rubygems;
mod warm;

use std::path::Path;
use std::process::Command;

/// Runs `cmd`, failing the test with its output if it fails. Returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs `cmd`, which may fail: whether it succeeded, and its stdout and
/// stderr together (what a user sees).
pub fn outcome(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// The first line of `tool --version`, or None when the tool is missing.
pub fn version(tool: &str, arg: &str) -> Option<String> {
    let out = Command::new(tool).arg(arg).output().ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    })
}

/// The client's version, or None after a loud skip (a failure under
/// `MIRRORCACHE_REQUIRE_SERVICES=1`) when it is not installed.
pub fn client(tool: &str, arg: &str) -> Option<String> {
    let found = version(tool, arg);
    support::available(
        &format!("{tool} (installed by .ci/tools.sh)"),
        found.is_some(),
    );
    found
}

/// Runs a publish `cmd` that the proxy must refuse: it fails, and the client
/// prints the proxy's read-only-cache 405 (the line is printed for the notes).
pub fn assert_refused_as_read_only(client: &str, cmd: &mut Command) {
    let out = cmd.output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        said.contains("405") && said.contains("read-only cache"),
        "{said}"
    );
    let shown = said
        .lines()
        .find(|l| l.contains("read-only"))
        .unwrap_or_default();
    println!("PUBLISH-REFUSED {client}: {shown}");
}

/// Every file below `dir`, at any depth (a fixture tree to serve).
pub fn files_below(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_below(&path));
        } else {
            out.push(path);
        }
    }
    out
}

pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Prints the figures the closing note quotes: client, version, upstream requests per round.
pub fn report(client: &str, version: &str, first: usize, second: usize) {
    println!(
        "CLIENT-REPORT {client} ({version}): round 1 upstream requests {first}, round 2 {second}"
    );
}
