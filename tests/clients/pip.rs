//! pip download and pip install through a `pypi` remote whose simple pages
//! link to a separate files origin, as pypi.org's do.

use std::process::Command;

use crate::support::{available, sha256_hex, MirrorServer, TestProxy};
use crate::{report, run, version, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_through_the_proxy_then_from_the_cache_alone() {
    let Some(pip) = version("pip", "--version") else {
        available("pip", false);
        return;
    };
    // Building the fixture wheels needs `wheel` (or setuptools >= 70).
    let can_build = Command::new("python3")
        .args(["-c", "import setuptools, sys\ntry:\n import wheel\nexcept ImportError:\n sys.exit(int(setuptools.__version__.split('.')[0]) < 70)"])
        .status()
        .is_ok_and(|s| s.success());
    if !available(
        "python's `wheel` package (pip install wheel), to build fixture wheels",
        can_build,
    ) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    for (name, deps) in [("mc-alpha", "['mc-beta']"), ("mc-beta", "[]")] {
        let module = name.replace('-', "_");
        write(
            &w.join(name).join("setup.py"),
            &format!("from setuptools import setup\nsetup(name='{name}', version='1.0', py_modules=['{module}'], install_requires={deps})\n"),
        );
        write(&w.join(name).join(format!("{module}.py")), "VALUE = 1\n");
        run(Command::new("pip")
            .args([
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--disable-pip-version-check",
                "-q",
                "-w",
            ])
            .arg(w.join("dist"))
            .arg(w.join(name))
            .env("PIP_CONFIG_FILE", "/dev/null"));
    }

    let index = MirrorServer::start().await;
    let files = MirrorServer::start().await;
    let mut pages: Vec<(String, String)> = Vec::new();
    for wheel in std::fs::read_dir(w.join("dist")).unwrap() {
        let wheel = wheel.unwrap();
        let file_name = wheel.file_name().to_string_lossy().into_owned();
        let bytes = std::fs::read(wheel.path()).unwrap();
        let project = file_name.split('-').next().unwrap().replace('_', "-");
        let link = format!(
            "<a href=\"{}/packages/{file_name}#sha256={}\" data-requires-python=\"&gt;=3\">{file_name}</a><br/>",
            files.url(""),
            sha256_hex(&bytes)
        );
        files.put_typed(
            &format!("/packages/{file_name}"),
            bytes,
            "application/octet-stream",
        );
        pages.push((project, link));
    }
    for (project, link) in &pages {
        let html =
            format!("<!DOCTYPE html><html><body><h1>Links for {project}</h1>{link}</body></html>");
        index.put_typed(&format!("/simple/{project}/"), html, "text/html");
    }
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n",
        index.url(""),
        files.url("")
    ))
    .await;
    let index_url = proxy.url("/pypi/simple/");

    let round = |n: usize| {
        let home = w.join(format!("home{n}"));
        std::fs::create_dir_all(&home).unwrap();
        let pip = |args: &[&str], dir: &std::path::Path| {
            let mut cmd = Command::new("pip");
            cmd.args(args)
                .arg(dir)
                .args([
                    "--no-cache-dir",
                    "--disable-pip-version-check",
                    "--index-url",
                    &index_url,
                    "mc-alpha",
                ])
                .env("HOME", &home)
                .env("PIP_CONFIG_FILE", "/dev/null");
            run(&mut cmd)
        };
        pip(&["download", "-d"], &w.join(format!("download{n}")));
        pip(&["install", "--target"], &w.join(format!("target{n}")));
        let mut got: Vec<String> = std::fs::read_dir(w.join(format!("download{n}")))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                "mc_alpha-1.0-py3-none-any.whl",
                "mc_beta-1.0-py3-none-any.whl"
            ]
        );
        assert!(w.join(format!("target{n}/mc_beta.py")).exists());
    };

    tokio::task::block_in_place(|| round(1));
    let first = index.total() + files.total();
    assert_eq!(
        files.hits("/packages/mc_alpha-1.0-py3-none-any.whl"),
        1,
        "{:?}",
        files.requests()
    );
    index.stop();
    files.stop();
    tokio::task::block_in_place(|| round(2));
    let second = index.total() + files.total() - first;
    assert_eq!(second, 0);
    report("pip", &pip, first, second);
    proxy.stop().await;
}
