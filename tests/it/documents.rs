//! Documents built once: a burst of GETs and HEADs of one large packument,
//! for a public base it was not built for yet, shares one build. Measured on
//! the real binary, whose peak RSS is reset just before the burst.

use sha2::{Digest as _, Sha256};

use crate::support::proxy::config_text;
use crate::support::{BinaryProxy, MirrorServer};

/// `VmHWM` or `VmRSS` of a process, in bytes.
fn memory(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// An npm packument of about `size` bytes: versions whose tarballs are on
/// `mirror` (rewritten through the proxy on the way out).
fn packument(mirror: &str, size: usize) -> Vec<u8> {
    let mut versions = Vec::new();
    let mut times = Vec::new();
    let mut total = 0;
    let mut n = 0;
    let padding = "x".repeat(300);
    while total < size {
        let version = format!("1.0.{n}");
        let entry = format!(
            "\"{version}\":{{\"name\":\"big\",\"version\":\"{version}\",\"description\":\"{padding}\",\
             \"dist\":{{\"tarball\":\"{mirror}/big/-/big-{version}.tgz\",\
             \"shasum\":\"{:040x}\"}}}}",
            n
        );
        total += entry.len() + 40;
        versions.push(entry);
        times.push(format!("\"{version}\":\"2020-01-01T00:00:00.000Z\""));
        n += 1;
    }
    format!(
        "{{\"name\":\"big\",\"dist-tags\":{{\"latest\":\"1.0.{}\"}},\"versions\":{{{}}},\"time\":{{{}}}}}",
        n - 1,
        versions.join(","),
        times.join(",")
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_gets_and_heads_of_a_large_document_shares_one_build() {
    const SIZE: usize = 20 * 1024 * 1024;
    let mirror = MirrorServer::start().await;
    let doc = packument(&mirror.url(""), SIZE);
    mirror.put_typed("/big", doc, "application/json");
    let dir = tempfile::tempdir().unwrap();
    let remote = format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n",
        mirror.url("")
    );
    let proxy = BinaryProxy::start(dir.path(), &config_text(dir.path(), &remote)).await;
    let client = reqwest::Client::new();
    // Fetched, learned and served once (for 127.0.0.1) before the burst.
    let first = client.get(proxy.url("/npm/big")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    first.bytes().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    // The burst asks for it rewritten for another base (`localhost`).
    let pid = proxy.pid();
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let idle = memory(pid, "VmRSS:");
    let url = proxy.url("/npm/big").replace("127.0.0.1", "localhost");
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..100 {
        let (client, url) = (client.clone(), url.clone());
        burst.spawn(async move {
            let request = if i % 2 == 0 {
                client.get(&url)
            } else {
                client.head(&url)
            };
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let length = response.headers()["content-length"]
                .to_str()
                .unwrap()
                .to_string();
            let body = response.bytes().await.unwrap();
            (
                i % 2 == 0,
                status,
                length,
                hex::encode(Sha256::digest(&body)),
                body.len(),
            )
        });
    }
    let mut lengths = std::collections::HashSet::new();
    let mut digests = std::collections::HashSet::new();
    while let Some(answer) = burst.join_next().await {
        let (get, status, length, digest, len) = answer.unwrap();
        assert_eq!(status, 200);
        lengths.insert(length);
        if get {
            digests.insert(digest);
            assert!(len > SIZE / 2);
        } else {
            assert_eq!(len, 0);
        }
    }
    // Every GET got the same bytes; every HEAD the same length.
    assert_eq!(digests.len(), 1, "{digests:?}");
    assert_eq!(lengths.len(), 1, "{lengths:?}");
    let peak = memory(pid, "VmHWM:");
    let grown = peak.saturating_sub(idle);
    eprintln!(
        "idle RSS {} MiB, peak {} MiB, grown {} MiB for a {} MiB document",
        idle >> 20,
        peak >> 20,
        grown >> 20,
        SIZE >> 20
    );
    assert!(
        grown < 4 * SIZE as u64,
        "the burst grew the RSS by {grown} bytes"
    );
    assert_eq!(mirror.hits("/big"), 1);
}
