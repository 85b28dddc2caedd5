//! nuget (Debian's 2.8, NuGet.Core under mono, which speaks only the v2
//! protocol) through a `nuget` remote, against two fixture v2 feeds on
//! 127.0.0.1 serving a real `.nupkg` (an OPC zip with its nuspec), the
//! first with tampered package bytes under the entry's true `PackageHash`.
//! `nuget install` runs with and without `-Version` (the second asks
//! `FindPackagesById()` first), each from a fresh home so its machine
//! cache is empty, through the proxy, then with every origin stopped.

use std::path::Path;
use std::process::Command;

use crate::fixtures::zip;
use crate::support::nuget::v2_feed;
use crate::support::{available, tampered, MirrorServer, TestProxy};
use crate::{report, run};

/// `Acme.Hello` 1.0.0 as `nuget pack` lays it out: the nuspec at the root,
/// the OPC relationship naming it as the manifest, the content types.
fn nupkg() -> Vec<u8> {
    zip(&[
        ("Acme.Hello.nuspec", "<?xml version=\"1.0\"?><package xmlns=\"http://schemas.microsoft.com/packaging/2011/08/nuspec.xsd\"><metadata><id>Acme.Hello</id><version>1.0.0</version><authors>mc</authors><description>hello</description></metadata></package>"),
        ("content/hello.txt", "hello from mirrorcache\n"),
        ("_rels/.rels", "<?xml version=\"1.0\" encoding=\"utf-8\"?><Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\"><Relationship Type=\"http://schemas.microsoft.com/packaging/2010/07/manifest\" Target=\"/Acme.Hello.nuspec\" Id=\"R1\" /></Relationships>"),
        ("[Content_Types].xml", "<?xml version=\"1.0\" encoding=\"utf-8\"?><Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\"><Default Extension=\"rels\" ContentType=\"application/vnd.openxmlformats-package.relationships+xml\" /><Default Extension=\"nuspec\" ContentType=\"application/octet\" /><Default Extension=\"txt\" ContentType=\"application/octet\" /></Types>"),
    ])
}

/// The installed version of Debian's nuget, or `None` after a loud skip
/// (`nuget help` does not exit when its output is not a terminal, so the
/// package database is asked).
fn nuget_version() -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "nuget"])
        .output()
        .ok()
        .filter(|o| o.status.success() && Path::new("/usr/bin/nuget").exists());
    let found = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    available("nuget (installed by .ci/tools.sh)", found.is_some());
    found
}

/// `nuget install Acme.Hello` from `source` into `w/out{n}`, in a fresh home
/// (its machine cache empty); with `-Version 1.0.0` when `pinned`.
fn nuget_install(w: &Path, n: usize, source: &str, pinned: bool) {
    let home = w.join(format!("home{n}"));
    let out = w.join(format!("out{n}"));
    let mut cmd = Command::new("nuget");
    cmd.args([
        "install",
        "Acme.Hello",
        "-Source",
        source,
        "-NonInteractive",
    ])
    .arg("-OutputDirectory")
    .arg(&out)
    .env("HOME", &home)
    .env("XDG_CONFIG_HOME", home.join(".config"))
    .env("XDG_DATA_HOME", home.join(".local/share"))
    .stdin(std::process::Stdio::null());
    if pinned {
        cmd.args(["-Version", "1.0.0"]);
    }
    run(&mut cmd);
    let installed = out.join("Acme.Hello.1.0.0/content/hello.txt");
    assert_eq!(
        std::fs::read_to_string(&installed).unwrap_or_default(),
        "hello from mirrorcache\n",
        "{installed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nuget_installs_past_a_tampered_feed_then_from_the_cache_alone() {
    let Some(version) = nuget_version() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (tampering, good) = (MirrorServer::start().await, MirrorServer::start().await);
    let package = nupkg();
    for mirror in [&tampering, &good] {
        v2_feed(mirror, &[("1.0.0", "2024-01-01T00:00:00.000", &package)]);
    }
    tampering.put("/api/v2/package/Acme.Hello/1.0.0", tampered(&package));
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"nuget\"\nkind = \"nuget\"\nmirrors = {}\nstrategy = \"single\"\n",
        crate::support::toml_urls(&[&tampering, &good], "")
    ))
    .await;
    let source = proxy.url("/nuget/api/v2/");
    let upstream = || tampering.total() + good.total();

    tokio::task::block_in_place(|| nuget_install(w, 1, &source, true));
    tokio::task::block_in_place(|| nuget_install(w, 2, &source, false));
    let path = "/api/v2/package/Acme.Hello/1.0.0";
    assert_eq!((tampering.hits(path), good.hits(path)), (1, 1));
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    proxy.settle().await;
    let first = upstream();

    tampering.stop();
    good.stop();
    tokio::task::block_in_place(|| nuget_install(w, 3, &source, true));
    tokio::task::block_in_place(|| nuget_install(w, 4, &source, false));
    let second = upstream() - first;
    assert_eq!(second, 0);
    report("nuget", &version, first, second);
    proxy.stop().await;
}
