//! Bounded learning: an index whose digests are learned is read as a
//! stream with a bound on what it unpacks to (`max_learned_size`), so a
//! bomb from a broken or hostile mirror costs the proxy a bounded amount of
//! memory, and is still served as the mirror sent it.

use std::io::Read as _;

use crate::support::binary::BinaryProxy;
use crate::support::proxy::config_text;
use crate::support::{sha256_hex, wait_until, MirrorServer};

const PACKAGES: &str = "dists/stable/main/binary-amd64/Packages.xz";

/// The process's peak resident set (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// A `Packages.xz` of about 300 KB that unpacks to 2 GiB of well-formed
/// paragraphs: 256 concatenated xz streams of 8 MiB each.
fn packages_bomb() -> Vec<u8> {
    let hex = "ab".repeat(32);
    let paragraph = format!(
        "Package: p\nFilename: pool/main/p/p_1_all.deb\nSHA256: {hex}\nDescription: {}\n\n",
        "x".repeat(1000)
    );
    let chunk = paragraph.repeat(8 * 1024 * 1024 / paragraph.len());
    let mut one = Vec::new();
    liblzma::read::XzEncoder::new(chunk.as_bytes(), 6)
        .read_to_end(&mut one)
        .unwrap();
    one.repeat(256)
}

#[tokio::test]
async fn a_packages_xz_bomb_is_served_as_sent_and_learning_it_stays_small() {
    let bomb = packages_bomb();
    assert!(bomb.len() < 1024 * 1024, "{}", bomb.len());
    let mirror = MirrorServer::start().await;
    mirror.put(&format!("/debian/{PACKAGES}"), bomb.clone());
    let dir = tempfile::tempdir().unwrap();
    let remote = format!(
        "[[remote]]\nname = \"debian\"\nkind = \"apt\"\nmirrors = [\"{}\"]\nmax_learned_size = \"128 MiB\"\n",
        mirror.url("/debian")
    );
    let proxy = BinaryProxy::start(dir.path(), &config_text(dir.path(), &remote)).await;
    let before = peak_rss(proxy.pid());

    let client = reqwest::Client::new();
    let response = client
        .get(proxy.url(&format!("/debian/{PACKAGES}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.unwrap();
    assert_eq!(
        sha256_hex(&body),
        sha256_hex(&bomb),
        "served as the mirror sent it"
    );

    wait_until(
        "the learning to stop with a warning naming the document",
        async || proxy.log().contains("stopped learning") && proxy.log().contains(PACKAGES),
    )
    .await;
    let log = proxy.log();
    let warning = log
        .lines()
        .find(|l| l.contains("stopped learning"))
        .unwrap();
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("max_learned_size"), "{warning}");
    let peak = peak_rss(proxy.pid());
    // Unpacked whole, it would be 2 GiB; up to the bound, 128 MiB.
    let grown = peak.saturating_sub(before);
    assert!(
        grown < 64 * 1024 * 1024,
        "peak RSS grew by {} MiB (from {} MiB)",
        grown >> 20,
        before >> 20
    );
    eprintln!(
        "peak RSS {} MiB (before the bomb {} MiB)",
        peak >> 20,
        before >> 20
    );
    // Still served (a hit now), and the proxy goes on.
    let again = client
        .get(proxy.url(&format!("/debian/{PACKAGES}")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.headers()["x-cache-status"], "HIT");
    assert_eq!(sha256_hex(&again.bytes().await.unwrap()), sha256_hex(&bomb));
}
