//! `huggingface_hub` (pinned in `.ci/tools.sh`, in a venv of its own, with
//! `hf_xet` installed as pip installs it) through a `huggingface` remote on
//! the fixture hub and CDN (`tests/it/support/hf_hub.py`, which sends the
//! Xet headers and `xetHash` the real hub sends): `snapshot_download`'s
//! files have the fixture's sha256, again with the hub stopped; four
//! concurrent `hf_hub_download`s from fresh homes make one upstream fetch of
//! the LFS file; a tampered CDN is refused and nothing of it is kept.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::report;
use crate::support::{HubFixture, TestProxy};

/// The pinned client's version (also in `.ci/tools.sh`).
const HF_HUB_VERSION: &str = "2.4.0";

/// The venv's python, after a loud skip when `.ci/tools.sh` has not made it.
fn hf_python() -> Option<PathBuf> {
    crate::fixtures::venv_python(
        "MIRRORCACHE_HF_VENV",
        "hf-venv",
        "import huggingface_hub; print(huggingface_hub.__version__)",
        HF_HUB_VERSION,
    )
}

/// The client in a fresh home, with `HF_ENDPOINT` on the proxy's remote.
fn client(python: &Path, endpoint: &str, home: &Path, script: &str) -> Command {
    std::fs::create_dir_all(home).unwrap();
    let mut cmd = Command::new(python);
    cmd.args(["-c", script])
        .env("HF_ENDPOINT", endpoint)
        .env("HF_HOME", home)
        .env("HOME", home)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_DISABLE_XET")
        .env_remove("HF_HUB_OFFLINE");
    cmd
}

/// `snapshot_download(repo)`, printing each file's path and sha256 as JSON.
const SNAPSHOT: &str = r#"
import hashlib, json, os, sys
from huggingface_hub import snapshot_download
root = snapshot_download(sys.argv[1] if len(sys.argv) > 1 else "org/tiny-model")
out = {}
for d, _, files in os.walk(root):
    for f in files:
        p = os.path.join(d, f)
        out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
print(json.dumps(out))
"#;

/// `hf_hub_download` of the LFS file, printing its sha256.
const DOWNLOAD: &str = r#"
import hashlib
from huggingface_hub import hf_hub_download
path = hf_hub_download("org/tiny-model", "model.safetensors")
print(hashlib.sha256(open(path, "rb").read()).hexdigest())
"#;

fn expected_snapshot(hub: &HubFixture, repo: &str) -> serde_json::Value {
    let prefix = format!("{repo}/");
    let files: serde_json::Map<String, serde_json::Value> = hub
        .files
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.clone().into())))
        .collect();
    files.into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_download_through_the_proxy_then_with_the_hub_stopped() {
    let Some(python) = hf_python() else { return };
    let Some(mut hub) = HubFixture::start(4) else {
        return;
    };
    let proxy = TestProxy::start(&hub.remote("hf", "bearer_token = \"hf_fixture_token\"")).await;
    let work = tempfile::tempdir().unwrap();
    let endpoint = proxy.url("/hf");
    let expected = expected_snapshot(&hub, "org/tiny-model");

    let round = |n: usize| {
        let home = work.path().join(format!("home{n}"));
        let out = crate::run(&mut client(&python, &endpoint, &home, SNAPSHOT));
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    assert_eq!(round(1), expected, "round 1: the fixture's sha256s");
    proxy.settle().await;
    let log = hub.log().await;
    let first = hub.total().await;
    let mut endpoints: Vec<String> = log["hub"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let path = r["path"].as_str().unwrap();
            let path = path.split('?').next().unwrap();
            format!("{} {path}", r["method"].as_str().unwrap())
        })
        .collect();
    endpoints.sort();
    endpoints.dedup();
    println!(
        "ENDPOINTS huggingface_hub {HF_HUB_VERSION}:\n  {}",
        endpoints.join("\n  ")
    );
    assert!(
        endpoints.iter().all(|e| !e.contains("xet-read-token")),
        "the client went the Xet path: {endpoints:?}"
    );
    assert_eq!(log["cdn_authorization"], 0, "credentials reached the CDN");
    assert_eq!(hub.count("cdn", "GET", "/repos/").await, 1);

    // Round 2: a fresh home, the hub and its CDN stopped.
    hub.stop();
    assert_eq!(round(2), expected, "round 2: served from the cache alone");
    report(
        "huggingface_hub snapshot_download",
        HF_HUB_VERSION,
        first,
        0,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_concurrent_hf_hub_downloads_from_fresh_homes_make_one_upstream_fetch() {
    let Some(python) = hf_python() else { return };
    let Some(hub) = HubFixture::start(16) else {
        return;
    };
    let proxy = TestProxy::start(&hub.remote("hf", "")).await;
    let work = tempfile::tempdir().unwrap();
    let endpoint = proxy.url("/hf");
    let children: Vec<_> = (0..4)
        .map(|n| {
            let home = work.path().join(format!("home{n}"));
            client(&python, &endpoint, &home, DOWNLOAD)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sha = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(sha, hub.files["org/tiny-model/model.safetensors"]);
    }
    proxy.settle().await;
    let sha = &hub.files["org/tiny-model/model.safetensors"];
    assert_eq!(hub.count("cdn", "GET", sha).await, 1, "one CDN fetch");
    assert_eq!(
        hub.count("hub", "GET", "/resolve/main/model.safetensors")
            .await,
        1,
        "one hub request"
    );
    report(
        "huggingface_hub 4 concurrent hf_hub_download",
        HF_HUB_VERSION,
        hub.total().await,
        0,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_cdn_is_refused_and_nothing_of_it_is_kept() {
    let Some(python) = hf_python() else { return };
    let Some(hub) = HubFixture::start(4) else {
        return;
    };
    let proxy = TestProxy::start(&hub.remote("hf", "")).await;
    let work = tempfile::tempdir().unwrap();
    let endpoint = proxy.url("/hf");
    hub.tamper(true).await;
    let home = work.path().join("home1");
    let out = client(&python, &endpoint, &home, DOWNLOAD)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a tampered file was accepted");
    println!(
        "CLIENT-SAYS huggingface_hub on a tampered CDN: {}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
    proxy.settle().await;
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);

    hub.tamper(false).await;
    let home = work.path().join("home2");
    let sha = crate::run(&mut client(&python, &endpoint, &home, DOWNLOAD));
    assert_eq!(sha.trim(), hub.files["org/tiny-model/model.safetensors"]);
}
