//! apt-get update and apt-get download through an `apt` remote, from a
//! repository built with dpkg-deb and dpkg-scanpackages.

use std::path::Path;
use std::process::Command;

use crate::support::{available, sha256_hex, MirrorServer, TestProxy};
use crate::{report, run, version, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apt_get_through_the_proxy_then_from_the_cache_alone() {
    let Some(apt) = apt_tools() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let repo = AptRepo::build(w);
    let origin = MirrorServer::start().await;
    repo.serve(&origin);
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"debian\"\nkind = \"apt\"\nmirrors = [\"{}\"]\n",
        origin.url("/debian")
    ))
    .await;

    let round = |n: usize| {
        let root = w.join(format!("apt{n}"));
        apt_get(&root, &proxy, &["update"]).unwrap();
        apt_get(&root, &proxy, &["download", "mc-hello"]).unwrap();
        let got = std::fs::read(root.join("download/mc-hello_1.0_all.deb")).unwrap();
        assert_eq!(sha256_hex(&got), sha256_hex(&repo.deb));
    };
    tokio::task::block_in_place(|| round(1));
    let first = origin.total();
    assert_eq!(
        origin.hits("/debian/pool/main/mc-hello_1.0_all.deb"),
        1,
        "{:?}",
        origin.requests()
    );
    origin.stop();
    tokio::task::block_in_place(|| round(2));
    let second = origin.total() - first;
    assert_eq!(second, 0);
    report("apt-get", &apt, first, second);
    proxy.stop().await;
}

/// apt-get's version, or `None` after a loud skip when apt-get or
/// dpkg-scanpackages is missing.
pub fn apt_tools() -> Option<String> {
    let tools = version("apt-get", "--version").zip(version("dpkg-scanpackages", "--version"));
    if tools.is_none() {
        available("apt-get and dpkg-scanpackages (dpkg-dev)", false);
    }
    tools.map(|(apt, _)| apt)
}

/// A one-package repository (`mc-hello` 1.0) built with dpkg-deb and
/// dpkg-scanpackages: its `.deb`, `Packages` and `Release`.
pub struct AptRepo {
    pub deb: Vec<u8>,
    pub packages: String,
    pub release: String,
}

pub const DEB: &str = "/debian/pool/main/mc-hello_1.0_all.deb";

impl AptRepo {
    pub fn build(w: &Path) -> AptRepo {
        let repo = w.join("repo");
        let pkg = w.join("pkg");
        write(
            &pkg.join("DEBIAN/control"),
            "Package: mc-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: Test <test@example.invalid>\nDescription: mirrorcache test package\n",
        );
        write(&pkg.join("usr/share/doc/mc-hello/README"), "hello\n");
        std::fs::create_dir_all(repo.join("pool/main")).unwrap();
        run(Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group"])
            .arg(&pkg)
            .arg(repo.join("pool/main/mc-hello_1.0_all.deb")));
        let packages = run(Command::new("dpkg-scanpackages")
            .args(["pool", "/dev/null"])
            .current_dir(&repo));
        let release = format!(
            "Origin: mc\nLabel: mc\nSuite: stable\nCodename: stable\nArchitectures: amd64 all\nComponents: main\nDate: Sun, 29 Nov 2026 00:00:00 UTC\nSHA256:\n {} {} main/binary-amd64/Packages\n",
            sha256_hex(packages.as_bytes()),
            packages.len()
        );
        let deb = std::fs::read(repo.join("pool/main/mc-hello_1.0_all.deb")).unwrap();
        AptRepo {
            deb,
            packages,
            release,
        }
    }

    /// Serves the repository under `/debian` on `origin`.
    pub fn serve(&self, origin: &MirrorServer) {
        origin.put_typed(
            "/debian/dists/stable/main/binary-amd64/Packages",
            self.packages.clone(),
            "text/plain",
        );
        origin.put_typed(
            "/debian/dists/stable/Release",
            self.release.clone(),
            "text/plain",
        );
        origin.put_typed(
            DEB,
            self.deb.clone(),
            "application/vnd.debian.binary-package",
        );
    }
}

/// Runs apt-get with `args` in a throwaway root (`root`) whose only source
/// is the proxy's `debian` remote; its combined output, `Err` if it failed.
pub fn apt_get(root: &Path, proxy: &TestProxy, args: &[&str]) -> Result<String, String> {
    apt_get_from(root, &proxy.url("/debian"), &[], args)
}

/// [`apt_get`] with the source at `source` (a URL) and extra `-o` options.
pub fn apt_get_from(
    root: &Path,
    source: &str,
    options: &[String],
    args: &[&str],
) -> Result<String, String> {
    for dir in ["lists/partial", "cache/archives/partial", "download"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    write(
        &root.join("sources.list"),
        &format!("deb [trusted=yes arch=amd64] {source} stable main\n"),
    );
    if !root.join("status").exists() {
        write(&root.join("status"), "");
    }
    let mut cmd = Command::new("apt-get");
    for (key, dir) in [
        ("Dir::Etc::SourceList", root.join("sources.list")),
        ("Dir::State::Lists", root.join("lists")),
        ("Dir::Cache", root.join("cache")),
        ("Dir::State::status", root.join("status")),
    ] {
        cmd.arg("-o").arg(format!("{key}={}", dir.display()));
    }
    cmd.args([
        "-o",
        "Dir::Etc::SourceParts=/nonexistent",
        "-o",
        "Debug::NoLocking=1",
        "-o",
        "APT::Sandbox::User=root",
        "-o",
        "Acquire::Languages=none",
        "-o",
        "Acquire::Retries=0",
    ]);
    for option in options {
        cmd.arg("-o").arg(option);
    }
    cmd.args(args).current_dir(root.join("download"));
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}
