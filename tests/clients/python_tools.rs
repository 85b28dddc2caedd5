//! uv and poetry through the `pypi` remote, against pip's fixture index:
//! uv asks for PEP 691 JSON pages and reads PEP 658 metadata; poetry reads
//! the HTML pages and writes the proxy (never the origin) into its lockfile.
//! The second round, in fresh caches with both origins stopped, installs
//! from the proxy's cache alone.

use std::path::Path;
use std::process::Command;

use crate::pip::PypiFixture;
use crate::{client, report, run, write};

fn find(dir: &Path, name: &str) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name() == name || (e.path().is_dir() && find(&e.path(), name)))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uv_pip_install_through_the_proxy_then_from_the_cache_alone() {
    let Some(uv) = client("uv", "--version") else {
        return;
    };
    let Some(fixture) = PypiFixture::start().await else {
        return;
    };
    let w = fixture.work.path().to_path_buf();
    let (first, second) = fixture
        .two_rounds(|n, index_url| {
            let target = w.join(format!("uvtarget{n}"));
            run(Command::new("uv")
                .args(["pip", "install", "--no-config", "--python", "python3"])
                .args(["--index-url", index_url, "--target"])
                .arg(&target)
                .arg("mc-alpha")
                .env("UV_CACHE_DIR", w.join(format!("uvcache{n}")))
                .env("HOME", w.join(format!("home{n}"))));
            assert!(target.join("mc_beta.py").exists());
            if n == 1 {
                // uv asked for the JSON pages (PEP 691): the proxy fetched that variant.
                let asked = fixture.index.last_request().unwrap();
                let accept = asked.headers["accept"].to_str().unwrap();
                assert!(
                    accept.contains("application/vnd.pypi.simple.v1+json"),
                    "{accept}"
                );
            }
        })
        .await;
    // ...and read the metadata files (PEP 658) rather than the wheels for resolution.
    assert_eq!(
        fixture
            .files
            .hits("/packages/mc_alpha-1.0-py3-none-any.whl.metadata"),
        1,
        "{:?}",
        fixture.files.requests()
    );
    assert_eq!(second, 0);
    report("uv", &uv, first, second);
    fixture.proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poetry_install_through_the_proxy_then_from_the_cache_alone() {
    let Some(poetry) = client("poetry", "--version") else {
        return;
    };
    let Some(fixture) = PypiFixture::start().await else {
        return;
    };
    let w = fixture.work.path().to_path_buf();
    let origin = fixture.files.url("");
    let (first, second) = fixture.two_rounds(|n, index_url| {
        let project = w.join(format!("poetryproject{n}"));
        write(
            &project.join("pyproject.toml"),
            &format!(
                "[project]\nname = \"consumer\"\nversion = \"0.0.0\"\nrequires-python = \">=3.9\"\n\
                 dependencies = [\"mc-alpha\"]\n\n[tool.poetry]\npackage-mode = false\n\n\
                 [[tool.poetry.source]]\nname = \"mc\"\nurl = \"{index_url}\"\npriority = \"primary\"\n"
            ),
        );
        let poetry = |args: &[&str]| {
            let mut cmd = Command::new("poetry");
            cmd.args(args)
                .arg("--no-interaction")
                .current_dir(&project)
                .env("HOME", w.join(format!("home{n}")))
                .env("POETRY_CACHE_DIR", w.join(format!("poetrycache{n}")))
                .env("POETRY_CONFIG_DIR", w.join(format!("poetryconfig{n}")))
                .env("POETRY_VIRTUALENVS_IN_PROJECT", "true")
                .env("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring");
            cmd
        };
        run(&mut poetry(&["lock"]));
        run(&mut poetry(&["install"]));
        assert!(find(&project.join(".venv"), "mc_beta.py"));
        let lock = std::fs::read_to_string(project.join("poetry.lock")).unwrap();
        assert!(lock.contains(index_url.trim_end_matches('/')), "{lock}");
        assert!(!lock.contains(&origin), "the lockfile names the origin:\n{lock}");
    })
    .await;
    assert_eq!(second, 0);
    report("poetry", &poetry, first, second);
    fixture.proxy.stop().await;
}
