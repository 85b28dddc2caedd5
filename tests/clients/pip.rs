//! pip download and pip install through a `pypi` remote whose simple pages
//! link to a separate files origin, as pypi.org's do; and the fixture index
//! the other Python clients (uv, poetry) use: HTML and PEP 691 JSON pages by
//! `Accept`, with PEP 658 metadata files beside the wheels.

use std::process::Command;

use crate::support::{available, sha256_hex, MirrorServer, TestProxy};
use crate::{report, run, version};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_through_the_proxy_then_from_the_cache_alone() {
    let Some(pip) = version("pip", "--version") else {
        available("pip", false);
        return;
    };
    let Some(fixture) = PypiFixture::start().await else {
        return;
    };
    let w = fixture.work.path();
    let index_url = fixture.proxy.url("/pypi/simple/");

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

    let (first, second) = fixture.two_rounds(|n, _| round(n)).await;
    assert_eq!(second, 0);
    report("pip", &pip, first, second);
    fixture.proxy.stop().await;
}

/// Two wheels (mc-alpha depends on mc-beta) on a files origin, their simple
/// pages on an index origin (HTML, and PEP 691 JSON for clients that ask for
/// it; both declare PEP 658 `.metadata` files), and a proxy with a `pypi`
/// remote in front of both.
pub struct PypiFixture {
    pub work: tempfile::TempDir,
    pub index: MirrorServer,
    pub files: MirrorServer,
    pub proxy: TestProxy,
}

impl PypiFixture {
    /// Runs `round(n, index_url)` twice around stopping the origins; returns
    /// the upstream request counts of each round.
    pub async fn two_rounds(&self, round: impl Fn(usize, &str)) -> (usize, usize) {
        let (index, files) = (&self.index, &self.files);
        let index_url = self.proxy.url("/pypi/simple/");
        tokio::task::block_in_place(|| round(1, &index_url));
        let first = index.total() + files.total();
        assert_eq!(
            files.hits("/packages/mc_alpha-1.0-py3-none-any.whl"),
            1,
            "{:?}",
            files.requests()
        );
        index.stop();
        files.stop();
        tokio::task::block_in_place(|| round(2, &index_url));
        (first, index.total() + files.total() - first)
    }

    /// `None` after a loud skip when the wheels cannot be built here.
    pub async fn start() -> Option<PypiFixture> {
        // Building the fixture wheels needs `wheel` (or setuptools >= 70).
        if !crate::fixtures::can_build_wheels() {
            return None;
        }
        let work = tempfile::tempdir().unwrap();
        let w = work.path();
        for (name, deps) in [("mc-alpha", "['mc-beta']"), ("mc-beta", "[]")] {
            crate::fixtures::pip_wheel(w, name, deps);
        }

        let index = MirrorServer::start().await;
        let files = MirrorServer::start().await;
        for wheel in std::fs::read_dir(w.join("dist")).unwrap() {
            let wheel = wheel.unwrap();
            let file_name = wheel.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(wheel.path()).unwrap();
            let project = file_name.split('-').next().unwrap().replace('_', "-");
            let metadata = run(Command::new("python3")
                .args(["-c", "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nname = [n for n in z.namelist() if n.endswith('.dist-info/METADATA')][0]\nsys.stdout.write(z.read(name).decode())"])
                .arg(wheel.path()));
            let (sha, metadata_sha) = (sha256_hex(&bytes), sha256_hex(metadata.as_bytes()));
            let url = files.url(&format!("/packages/{file_name}"));
            let link = format!(
                "<a href=\"{url}#sha256={sha}\" data-requires-python=\"&gt;=3\" \
                 data-core-metadata=\"sha256={metadata_sha}\" data-dist-info-metadata=\"sha256={metadata_sha}\">{file_name}</a><br/>"
            );
            let html = format!(
                "<!DOCTYPE html><html><body><h1>Links for {project}</h1>{link}</body></html>"
            );
            let json = serde_json::json!({
                "meta": {"api-version": "1.1"},
                "name": project,
                "versions": ["1.0"],
                "files": [{
                    "filename": file_name, "url": url, "hashes": {"sha256": sha},
                    "requires-python": ">=3", "size": bytes.len(),
                    "core-metadata": {"sha256": metadata_sha},
                    "dist-info-metadata": {"sha256": metadata_sha},
                }],
            });
            let page = format!("/simple/{project}/");
            index.put_typed(&page, html, "text/html");
            index.put_negotiated(
                &page,
                "application/vnd.pypi.simple.v1+json",
                json.to_string(),
            );
            files.put_typed(
                &format!("/packages/{file_name}.metadata"),
                metadata,
                "application/octet-stream",
            );
            files.put_typed(
                &format!("/packages/{file_name}"),
                bytes,
                "application/octet-stream",
            );
        }
        let proxy = TestProxy::start(&format!(
            "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n",
            index.url(""),
            files.url("")
        ))
        .await;
        Some(PypiFixture {
            work,
            index,
            files,
            proxy,
        })
    }
}
