//! The `hex` kind (issue 47) against a fixture Hex repository on
//! 127.0.0.1: the signed registry passed through byte for byte and
//! revalidated, tarballs immutable; a release's `outer_checksum` refuses a
//! tampered first mirror, also when the client asks for the tarball alone
//! (the proxy reads `packages/<name>` itself); a denied release and a
//! too-young one (`published_at`) refused with the reason; `warm` reading a
//! `rebar.lock` and a `mix.lock`.

use prost::Message as _;
use sha2::Digest as _;

use crate::support::hex_registry::{signed, Package, Release, Timestamp};
use crate::support::proxy::{get, warm_fetches_all};
use crate::support::{sha256_hex, tampered, test_bytes, toml_urls, MirrorServer, TestProxy};

/// `packages/<name>` for these (version, tarball, seconds ago published).
fn registry(name: &str, releases: &[(&str, &[u8], Option<u64>)]) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let package = Package {
        releases: releases
            .iter()
            .map(|(version, tarball, ago)| Release {
                version: version.to_string(),
                inner_checksum: vec![0; 32],
                dependencies: Vec::new(),
                outer_checksum: Some(sha2::Sha256::digest(tarball).to_vec()),
                published_at: ago.map(|ago| Timestamp {
                    seconds: (now - ago) as i64,
                    nanos: 0,
                }),
            })
            .collect(),
        name: name.into(),
        repository: "hexpm".into(),
    };
    signed(package.encode_to_vec(), vec![7; 256])
}

fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"hex\"\nkind = \"hex\"\nmirrors = {}\nstrategy = \"single\"\n{extra}\n",
        toml_urls(mirrors, "/h")
    )
}

#[tokio::test]
async fn a_tampered_tarball_is_refused_by_the_outer_checksum_of_the_signed_registry() {
    let (tampering, good) = (MirrorServer::start().await, MirrorServer::start().await);
    let leaf = test_bytes(5_000, 81);
    let document = registry("mc_leaf", &[("1.0.0", &leaf, None)]);
    for mirror in [&tampering, &good] {
        mirror.put("/h/packages/mc_leaf", document.clone());
    }
    tampering.put("/h/tarballs/mc_leaf-1.0.0.tar", tampered(&leaf));
    good.put("/h/tarballs/mc_leaf-1.0.0.tar", leaf.clone());
    let proxy = TestProxy::start(&remote(&[&tampering, &good], "")).await;
    let client = reqwest::Client::new();

    // A locked project asks for the tarball alone: the proxy reads the
    // registry document itself, and the second mirror's bytes are served.
    let (status, _, body) = get(&client, &proxy.url("/hex/tarballs/mc_leaf-1.0.0.tar")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&leaf));
    assert_eq!(tampering.hits("/h/packages/mc_leaf"), 1);
    assert_eq!(good.hits("/h/tarballs/mc_leaf-1.0.0.tar"), 1);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    // The signed registry, byte for byte (the client checks its signature).
    let (status, _, body) = get(&client, &proxy.url("/hex/packages/mc_leaf")).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), document);
    proxy.settle().await;
    let (_, cache, _) = get(&client, &proxy.url("/hex/tarballs/mc_leaf-1.0.0.tar")).await;
    assert_eq!(cache, "HIT");
}

#[tokio::test]
async fn a_denied_or_too_young_release_is_refused_with_the_reason() {
    let mirror = MirrorServer::start().await;
    let (old, young, bad) = (
        test_bytes(500, 82),
        test_bytes(500, 83),
        test_bytes(500, 84),
    );
    mirror.put(
        "/h/packages/mc_leaf",
        registry(
            "mc_leaf",
            &[
                ("1.0.0", &old, Some(90 * 86_400)),
                ("1.1.0", &young, Some(3_600)),
            ],
        ),
    );
    mirror.put(
        "/h/packages/mc_bad",
        registry("mc_bad", &[("2.0.0", &bad, None)]),
    );
    mirror.put("/h/tarballs/mc_leaf-1.0.0.tar", old);
    mirror.put("/h/tarballs/mc_leaf-1.1.0.tar", young);
    mirror.put("/h/tarballs/mc_bad-2.0.0.tar", bad);
    let extra = "deny = [\"mc_bad@>= 2.0.0 and < 3.0.0\"]\nmin_release_age = \"7d\"";
    let proxy = TestProxy::start(&remote(&[&mirror], extra)).await;
    let client = reqwest::Client::new();

    let (status, _, body) = get(&client, &proxy.url("/hex/tarballs/mc_bad-2.0.0.tar")).await;
    assert_eq!(status, 403);
    let said = String::from_utf8_lossy(&body.unwrap()).to_string();
    assert!(
        said.contains("mc_bad@2.0.0 is refused by this proxy"),
        "{said}"
    );
    let (status, _, body) = get(&client, &proxy.url("/hex/tarballs/mc_leaf-1.1.0.tar")).await;
    assert_eq!(status, 403);
    let said = String::from_utf8_lossy(&body.unwrap()).to_string();
    assert!(said.contains("min_release_age"), "{said}");
    let (status, _, _) = get(&client, &proxy.url("/hex/tarballs/mc_leaf-1.0.0.tar")).await;
    assert_eq!(status, 200);
    assert_eq!(mirror.hits("/h/tarballs/mc_bad-2.0.0.tar"), 0);
    assert_eq!(mirror.hits("/h/tarballs/mc_leaf-1.1.0.tar"), 0);
    // The registry is signed: served whole, refused releases and all.
    let (status, _, _) = get(&client, &proxy.url("/hex/packages/mc_bad")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn warm_fetches_the_tarballs_a_rebar_lock_and_a_mix_lock_name() {
    let mirror = MirrorServer::start().await;
    let (cowboy, jason) = (test_bytes(2_000, 85), test_bytes(2_000, 86));
    mirror.put("/h/tarballs/cowboy-2.9.0.tar", cowboy.clone());
    mirror.put("/h/tarballs/jason-1.4.1.tar", jason.clone());
    let proxy = TestProxy::start(&remote(&[&mirror], "")).await;
    let dir = tempfile::tempdir().unwrap();
    let rebar = dir.path().join("rebar.lock");
    std::fs::write(
        &rebar,
        format!(
            "{{\"1.2.0\",\n[{{<<\"cowboy\">>,{{pkg,<<\"cowboy\">>,<<\"2.9.0\">>}},0}}]}}.\n\
             [\n{{pkg_hash_ext,[\n {{<<\"cowboy\">>, <<\"{}\">>}}]}}\n].\n",
            sha256_hex(&cowboy).to_ascii_uppercase()
        ),
    )
    .unwrap();
    let mix = dir.path().join("mix.lock");
    std::fs::write(
        &mix,
        format!(
            "%{{\n  \"jason\": {{:hex, :jason, \"1.4.1\", \"{}\", [:mix], [], \"hexpm\", \"{}\"}},\n}}\n",
            "00".repeat(32),
            sha256_hex(&jason)
        ),
    )
    .unwrap();
    warm_fetches_all(&proxy.url(""), "hex", vec![rebar, mix], 2).await;
}
