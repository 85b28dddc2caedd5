//! apt-get update and apt-get download through an `apt` remote, from a
//! repository built with dpkg-deb and dpkg-scanpackages.

use std::process::Command;

use crate::support::{available, sha256_hex, MirrorServer, TestProxy};
use crate::{report, run, version, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apt_get_through_the_proxy_then_from_the_cache_alone() {
    let tools = version("apt-get", "--version").zip(version("dpkg-scanpackages", "--version"));
    let Some((apt, _)) = tools else {
        available("apt-get and dpkg-scanpackages (dpkg-dev)", false);
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
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

    let origin = MirrorServer::start().await;
    origin.put_typed(
        "/debian/dists/stable/main/binary-amd64/Packages",
        packages,
        "text/plain",
    );
    origin.put_typed("/debian/dists/stable/Release", release, "text/plain");
    let deb = std::fs::read(repo.join("pool/main/mc-hello_1.0_all.deb")).unwrap();
    origin.put_typed(
        "/debian/pool/main/mc-hello_1.0_all.deb",
        deb.clone(),
        "application/vnd.debian.binary-package",
    );
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"debian\"\nkind = \"apt\"\nmirrors = [\"{}\"]\n",
        origin.url("/debian")
    ))
    .await;
    let source = format!(
        "deb [trusted=yes arch=amd64] {} stable main\n",
        proxy.url("/debian")
    );

    let round = |n: usize| {
        let root = w.join(format!("apt{n}"));
        for dir in ["lists/partial", "cache/archives/partial", "download"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        write(&root.join("sources.list"), &source);
        write(&root.join("status"), "");
        let apt_get = |args: &[&str]| {
            let mut cmd = Command::new("apt-get");
            cmd.arg("-o").arg(format!(
                "Dir::Etc::SourceList={}",
                root.join("sources.list").display()
            ));
            cmd.args(["-o", "Dir::Etc::SourceParts=/nonexistent"]);
            cmd.arg("-o").arg(format!(
                "Dir::State::Lists={}",
                root.join("lists").display()
            ));
            cmd.arg("-o")
                .arg(format!("Dir::Cache={}", root.join("cache").display()));
            cmd.arg("-o").arg(format!(
                "Dir::State::status={}",
                root.join("status").display()
            ));
            cmd.args([
                "-o",
                "Debug::NoLocking=1",
                "-o",
                "APT::Sandbox::User=root",
                "-o",
                "Acquire::Languages=none",
            ]);
            cmd.args(args).current_dir(root.join("download"));
            run(&mut cmd)
        };
        apt_get(&["update"]);
        apt_get(&["download", "mc-hello"]);
        let got = std::fs::read(root.join("download/mc-hello_1.0_all.deb")).unwrap();
        assert_eq!(sha256_hex(&got), sha256_hex(&deb));
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
