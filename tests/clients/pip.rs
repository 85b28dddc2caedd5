//! pip download and pip install through a `pypi` remote whose simple pages
//! link to a separate files origin, as pypi.org's do.

use std::process::Command;

use crate::support::{sha256_hex, MirrorServer, TestProxy};
use crate::{report, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_through_the_proxy_then_from_the_cache_alone() {
    let Some(pip) = crate::fixtures::tool("pip", "--version") else {
        return;
    };
    // Building the fixture wheels needs `wheel` (or setuptools >= 70).
    if !crate::fixtures::can_build_wheels() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    for (name, deps) in [("mc-alpha", "['mc-beta']"), ("mc-beta", "[]")] {
        crate::fixtures::pip_wheel(w, name, deps);
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
