//! The `conda` kind (issue 47) against a fixture channel on 127.0.0.1:
//! package files immutable below `<channel>/<subdir>/`, repodata
//! revalidated; a record's `sha256` refuses a tampered first mirror; a
//! denied version and a too-young one (`timestamp`) taken out of
//! `repodata.json` and its `.zst` form, a package whose every record is
//! refused left listed and its file refused with the reason in the status
//! line; `warm` reading a `pixi.lock` and a `conda-lock.yml`.

use crate::support::proxy::{get, status_line, warm_fetches_all};
use crate::support::{sha256_hex, tampered, test_bytes, toml_urls, MirrorServer, TestProxy};

fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"conda\"\nkind = \"conda\"\nmirrors = {}\nstrategy = \"single\"\n{extra}\n",
        toml_urls(mirrors, "/c")
    )
}

/// A `repodata.json` of these (file, name, version, bytes, ms ago published).
fn repodata(records: &[(&str, &str, &str, &[u8], i64)]) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut packages = serde_json::Map::new();
    for (file, name, version, bytes, ago) in records {
        packages.insert(
            file.to_string(),
            serde_json::json!({"name": name, "version": version, "build": "0", "build_number": 0,
                "depends": [], "subdir": "noarch", "sha256": sha256_hex(bytes), "timestamp": now - ago}),
        );
    }
    serde_json::json!({"info": {"subdir": "noarch"}, "packages": {}, "packages.conda": packages})
        .to_string()
}

const DAY: i64 = 24 * 3600 * 1000;

#[tokio::test]
async fn a_tampered_package_is_refused_by_the_sha256_its_repodata_declares() {
    let (tampering, good) = (MirrorServer::start().await, MirrorServer::start().await);
    let leaf = test_bytes(4_000, 91);
    let doc = repodata(&[("mc-leaf-1.0-0.conda", "mc-leaf", "1.0", &leaf, 30 * DAY)]);
    for mirror in [&tampering, &good] {
        mirror.put("/c/forge/noarch/repodata.json", doc.clone());
    }
    tampering.put("/c/forge/noarch/mc-leaf-1.0-0.conda", tampered(&leaf));
    good.put("/c/forge/noarch/mc-leaf-1.0-0.conda", leaf.clone());
    let proxy = TestProxy::start(&remote(&[&tampering, &good], "")).await;
    let client = reqwest::Client::new();

    let (status, _, body) = get(&client, &proxy.url("/conda/forge/noarch/repodata.json")).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), doc.as_bytes());
    let (status, _, body) = get(
        &client,
        &proxy.url("/conda/forge/noarch/mc-leaf-1.0-0.conda"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&leaf));
    assert_eq!(good.hits("/c/forge/noarch/mc-leaf-1.0-0.conda"), 1);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    proxy.settle().await;
    let (_, cache, _) = get(
        &client,
        &proxy.url("/conda/forge/noarch/mc-leaf-1.0-0.conda"),
    )
    .await;
    assert_eq!(cache, "HIT");
}

#[tokio::test]
async fn refused_records_leave_repodata_but_a_package_with_none_left_stays_listed() {
    let mirror = MirrorServer::start().await;
    let (old, new, young, bad) = (
        test_bytes(300, 92),
        test_bytes(300, 93),
        test_bytes(300, 94),
        test_bytes(300, 95),
    );
    let doc = repodata(&[
        ("mc-leaf-1.0-0.conda", "mc-leaf", "1.0", &old, 30 * DAY),
        ("mc-leaf-2.0-0.conda", "mc-leaf", "2.0", &new, 30 * DAY),
        ("mc-leaf-2.1-0.conda", "mc-leaf", "2.1", &young, DAY),
        ("mc-bad-1.0-0.conda", "mc-bad", "1.0", &bad, 30 * DAY),
    ]);
    mirror.put("/c/forge/noarch/repodata.json", doc.clone());
    mirror.put(
        "/c/forge/noarch/repodata.json.zst",
        zstd::stream::encode_all(doc.as_bytes(), 3).unwrap(),
    );
    mirror.put("/c/forge/noarch/mc-bad-1.0-0.conda", bad);
    mirror.put("/c/forge/noarch/mc-leaf-2.1-0.conda", young);
    let extra = "deny = [\"mc-leaf@>=2,<2.1\", \"mc-bad\"]\nmin_release_age = \"7d\"";
    let proxy = TestProxy::start(&remote(&[&mirror], extra)).await;
    let client = reqwest::Client::new();

    let (status, _, body) = get(&client, &proxy.url("/conda/forge/noarch/repodata.json")).await;
    assert_eq!(status, 200);
    let served = String::from_utf8(body.unwrap().to_vec()).unwrap();
    assert!(served.contains("mc-leaf-1.0-0.conda"), "{served}");
    assert!(!served.contains("mc-leaf-2.0-0.conda") && !served.contains("mc-leaf-2.1-0.conda"));
    assert!(served.contains("mc-bad-1.0-0.conda"), "{served}");
    // The .zst form, filtered alike and recompressed.
    let (status, _, body) = get(&client, &proxy.url("/conda/forge/noarch/repodata.json.zst")).await;
    assert_eq!(status, 200);
    let unpacked = zstd::stream::decode_all(&body.unwrap()[..]).unwrap();
    assert_eq!(String::from_utf8(unpacked).unwrap(), served);
    // The package left listed: its file refused, the reason in the status line.
    let line = status_line(&proxy.base, "/conda/forge/noarch/mc-bad-1.0-0.conda").await;
    assert_eq!(
        line,
        "HTTP/1.1 403 mc-bad@1.0 is refused by this proxy: it matches the deny rule \"mc-bad\""
    );
    let line = status_line(&proxy.base, "/conda/forge/noarch/mc-leaf-2.1-0.conda").await;
    assert!(line.contains("min_release_age"), "{line}");
    assert_eq!(mirror.hits("/c/forge/noarch/mc-bad-1.0-0.conda"), 0);
    assert_eq!(mirror.hits("/c/forge/noarch/mc-leaf-2.1-0.conda"), 0);
}

#[tokio::test]
async fn warm_fetches_the_packages_a_pixi_lock_and_a_conda_lock_name() {
    let mirror = MirrorServer::start().await;
    let (leaf, top) = (test_bytes(1_000, 96), test_bytes(1_000, 97));
    mirror.put("/c/forge/noarch/mc-leaf-1.0-0.conda", leaf.clone());
    mirror.put("/c/forge/noarch/mc-top-1.0-0.tar.bz2", top.clone());
    let proxy = TestProxy::start(&remote(&[&mirror], "")).await;
    let dir = tempfile::tempdir().unwrap();
    let channel = mirror.url("/c/forge");
    let pixi = dir.path().join("pixi.lock");
    std::fs::write(
        &pixi,
        format!(
            "version: 6\nenvironments:\n  default:\n    channels:\n    - url: {channel}/\n\
             packages:\n- conda: {channel}/noarch/mc-leaf-1.0-0.conda\n  sha256: {}\n  size: 1000\n",
            sha256_hex(&leaf)
        ),
    )
    .unwrap();
    let conda_lock = dir.path().join("conda-lock.yml");
    std::fs::write(
        &conda_lock,
        format!(
            "version: 1\npackage:\n- name: mc-top\n  version: '1.0'\n  manager: conda\n  platform: noarch\n\
             \x20 url: {channel}/noarch/mc-top-1.0-0.tar.bz2\n  hash:\n    sha256: {}\n",
            sha256_hex(&top)
        ),
    )
    .unwrap();
    warm_fetches_all(&proxy.url(""), "conda", vec![pixi, conda_lock], 2).await;
    assert_eq!(mirror.hits("/c/forge/noarch/mc-top-1.0-0.tar.bz2"), 1);
}
