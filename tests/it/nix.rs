//! The `nix` kind (issue 49) against two fixture binary caches on
//! 127.0.0.1 as the remote's mirrors, serving what Nix's
//! `libstore/http-binary-cache-store.cc` and `binary-cache-store.cc` ask
//! for: `nix-cache-info`, `{hash}.narinfo` (whose `URL:` names the NAR and
//! whose `FileHash`, in Nix's base-32, and `FileSize` declare its bytes) and
//! `nar/{filehash}.nar.xz`. The first cache lacks one narinfo and serves a
//! tampered NAR: the narinfo is asked of the second, the NAR refused and
//! fetched there; a narinfo neither has is asked once per `negative_ttl`;
//! narinfos reach the client as the cache wrote them, signatures and all.

use crate::support::proxy::{config_text, get, start_text};
use crate::support::{sha256_hex, tampered, test_bytes, MirrorServer};

/// `bytes`' sha256 in Nix's base-32 (`nix-hash --to-base32`): the last
/// digit holds the lowest five bits of the first byte.
fn nix_base32(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 32] = b"0123456789abcdfghijklmnpqrsvwxyz";
    let len = (bytes.len() * 8 - 1) / 5 + 1;
    (0..len)
        .rev()
        .map(|n| {
            let (i, j) = (n * 5 / 8, n * 5 % 8);
            let low = u16::from(bytes[i]) >> j;
            let high = bytes.get(i + 1).map_or(0, |b| u16::from(*b) << (8 - j));
            DIGITS[usize::from((low | high) & 0x1f)] as char
        })
        .collect()
}

/// A narinfo for the store path with hash part `hash` whose NAR is `nar`.
fn narinfo(hash: &str, name: &str, nar: &[u8]) -> (String, String) {
    let digest = hex::decode(sha256_hex(nar)).unwrap();
    let file = format!("nar/{}.nar.xz", nix_base32(&digest));
    let text = format!(
        "StorePath: /nix/store/{hash}-{name}\nURL: {file}\nCompression: xz\nFileHash: sha256:{}\nFileSize: {}\nNarHash: sha256:{}\nNarSize: 1\nReferences: \nSig: mc-test-1:bm90IGNoZWNrZWQgYnkgdGhlIHByb3h5\n",
        nix_base32(&digest),
        nar.len(),
        nix_base32(&digest),
    );
    (text, file)
}

const TOP: &str = "0ns5acvw1mrg3bqj9waibc7k75c09kwk";
const LEAF: &str = "w4q1g26yhsv3bwkzcm7j80ldmqib5b3k";
const ABSENT: &str = "00000000000000000000000000000000";

#[test]
fn nix_base32_is_nix_hash_s() {
    // `nix-hash --type sha256 --to-base32` of the empty string's sha256.
    let empty = hex::decode(sha256_hex(b"")).unwrap();
    assert_eq!(
        nix_base32(&empty),
        "0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73"
    );
}

#[tokio::test]
async fn nars_are_checked_against_their_narinfo_and_the_next_cache_answers_what_one_lacks() {
    let (first, second) = (MirrorServer::start().await, MirrorServer::start().await);
    let (top_nar, leaf_nar) = (test_bytes(70_000, 1), test_bytes(3_000, 2));
    let (top_info, top_file) = narinfo(TOP, "mc-top", &top_nar);
    let (leaf_info, leaf_file) = narinfo(LEAF, "mc-leaf", &leaf_nar);
    for cache in [&first, &second] {
        cache.put(
            "/cache/nix-cache-info",
            "StoreDir: /nix/store\nPriority: 40\n",
        );
        cache.put(&format!("/cache/{TOP}.narinfo"), top_info.clone());
        cache.put(&format!("/cache/{leaf_file}"), leaf_nar.clone());
    }
    // The first cache lacks the leaf's narinfo and has other bytes for the top's NAR.
    second.put(&format!("/cache/{LEAF}.narinfo"), leaf_info.clone());
    first.put(&format!("/cache/{top_file}"), tampered(&top_nar));
    second.put(&format!("/cache/{top_file}"), top_nar.clone());
    let remote = format!(
        "[[remote]]\nname = \"nix\"\nkind = \"nix\"\nmirrors = {}\nstrategy = \"single\"\nrequire_declared_hash = true\n",
        crate::support::toml_urls(&[&first, &second], "/cache")
    );
    let output = crate::support::binary::check(&remote);
    assert!(output.status.success(), "{output:?}");
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config_text(dir.path(), &remote)).await;
    let base = format!("http://{}/nix", running.local_addr);
    let client = reqwest::Client::new();

    // A narinfo as the cache wrote it: its signature is the client's to check.
    let (status, _, body) = get(&client, &format!("{base}/{TOP}.narinfo")).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), top_info.as_bytes());
    let (status, _, body) = get(&client, &format!("{base}/{top_file}")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&top_nar));
    assert_eq!(first.hits(&format!("/cache/{top_file}")), 1);
    assert_eq!(second.hits(&format!("/cache/{top_file}")), 1);

    // The first cache's 404 asks the second.
    let (status, _, body) = get(&client, &format!("{base}/{LEAF}.narinfo")).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), leaf_info.as_bytes());
    assert_eq!(first.hits(&format!("/cache/{LEAF}.narinfo")), 1);
    let (status, _, body) = get(&client, &format!("{base}/{leaf_file}")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&leaf_nar));

    // A narinfo no cache has: asked of each once, then remembered.
    for _ in 0..3 {
        let (status, _, _) = get(&client, &format!("{base}/{ABSENT}.narinfo")).await;
        assert_eq!(status, 404);
    }
    let absent = format!("/cache/{ABSENT}.narinfo");
    assert_eq!((first.hits(&absent), second.hits(&absent)), (1, 1));

    // NARs are immutable: served from the cache with both caches down.
    running.proxy.fills.wait_idle().await;
    first.stop();
    second.stop();
    let (status, cache, body) = get(&client, &format!("{base}/{top_file}")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&top_nar));
}

/// A NAR no narinfo declared is refused under `require_declared_hash`, and
/// one whose narinfo declares other bytes on every cache is a 502 that
/// names both digests and leaves nothing cached.
#[tokio::test]
async fn a_nar_nothing_declared_or_every_cache_tampered_is_never_served() {
    let cache = MirrorServer::start().await;
    let nar = test_bytes(5_000, 3);
    let (info, file) = narinfo(TOP, "mc-top", &nar);
    cache.put(&format!("/cache/{TOP}.narinfo"), info);
    cache.put(&format!("/cache/{file}"), tampered(&nar));
    cache.put("/cache/nar/undeclared.nar.xz", nar.clone());
    let remote = format!(
        "[[remote]]\nname = \"nix\"\nkind = \"nix\"\nmirrors = [\"{}\"]\nrequire_declared_hash = true\n",
        cache.url("/cache")
    );
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config_text(dir.path(), &remote)).await;
    let base = format!("http://{}/nix", running.local_addr);
    let client = reqwest::Client::new();

    let (status, _, _) = get(&client, &format!("{base}/nar/undeclared.nar.xz")).await;
    assert_eq!(status, 403);
    assert_eq!(cache.hits("/cache/nar/undeclared.nar.xz"), 0);

    let (status, _, _) = get(&client, &format!("{base}/{TOP}.narinfo")).await;
    assert_eq!(status, 200);
    let (status, _, body) = get(&client, &format!("{base}/{file}")).await;
    assert_eq!(status, 502);
    let said = String::from_utf8_lossy(&body.unwrap()).to_string();
    assert!(said.contains(&sha256_hex(&nar)), "{said}");
    // Nothing was kept: the next request asks again.
    running.proxy.fills.wait_idle().await;
    let (status, _, _) = get(&client, &format!("{base}/{file}")).await;
    assert_eq!(status, 502);
    assert_eq!(cache.hits(&format!("/cache/{file}")), 2);
}

#[test]
fn check_refuses_package_rules_on_a_nix_remote_naming_the_line() {
    let output = crate::support::binary::check(
        "[[remote]]\nname = \"nix\"\nkind = \"nix\"\nmirrors = [\"https://cache.nixos.org\"]\ndeny = [\"hello\"]\n",
    );
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        said.contains(":5:") && said.contains("cannot tell packages apart"),
        "{said}"
    );
}
