//! The `cran` kind (issue 47) against a fixture CRAN on 127.0.0.1: package
//! files immutable and indexes revalidated; a file's `MD5sum` in
//! `PACKAGES.gz`, read by the proxy itself when the client read only the
//! `.rds`, refuses a tampered first mirror; an archived version nothing
//! declares pinned on first use; a denied version and a too-young one
//! (`Date/Publication`) refused with the reason in the status line;
//! `warm` reading a `renv.lock`, an archived version found under
//! `Archive/`.

use md5::Digest as _;

use crate::support::proxy::{get, status_line, warm_fetches_all};
use crate::support::{sha256_hex, tampered, test_bytes, toml_urls, MirrorServer, TestProxy};

fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"cran\"\nkind = \"cran\"\nmirrors = {}\nstrategy = \"single\"\n{extra}\n",
        toml_urls(mirrors, "/c")
    )
}

fn gz(text: &str) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, text.as_bytes()).unwrap();
    gz.finish().unwrap()
}

/// A `PACKAGES` entry for `name` `version` with the MD5 of `file` and,
/// when given, its `Date/Publication`.
fn entry(name: &str, version: &str, file: &[u8], published: Option<&str>) -> String {
    let date = published.map_or(String::new(), |d| format!("Date/Publication: {d}\n"));
    format!(
        "Package: {name}\nVersion: {version}\nLicense: MIT\nMD5sum: {}\n{date}NeedsCompilation: no\n\n",
        hex::encode(md5::Md5::digest(file))
    )
}

/// Serves `packages` as the three index files on `mirror` (the `.rds` a
/// stand-in: the proxy never reads it).
fn serve_index(mirror: &MirrorServer, packages: &str) {
    mirror.put("/c/src/contrib/PACKAGES", packages.to_string());
    mirror.put("/c/src/contrib/PACKAGES.gz", gz(packages));
    mirror.put("/c/src/contrib/PACKAGES.rds", gz("X\n(an R object)"));
}

#[tokio::test]
async fn a_tampered_file_is_refused_by_the_md5_its_index_declares() {
    let (tampering, good) = (MirrorServer::start().await, MirrorServer::start().await);
    let (top, old) = (test_bytes(3_000, 71), test_bytes(3_000, 72));
    let packages = entry("mctop", "2.1-3", &top, None);
    for mirror in [&tampering, &good] {
        serve_index(mirror, &packages);
        mirror.put(
            "/c/src/contrib/Archive/mctop/mctop_2.0-1.tar.gz",
            old.clone(),
        );
    }
    tampering.put("/c/src/contrib/mctop_2.1-3.tar.gz", tampered(&top));
    good.put("/c/src/contrib/mctop_2.1-3.tar.gz", top.clone());
    let proxy = TestProxy::start(&remote(&[&tampering, &good], "")).await;
    let client = reqwest::Client::new();

    // R reads the .rds only; the proxy reads PACKAGES.gz for the MD5.
    let (status, _, _) = get(&client, &proxy.url("/cran/src/contrib/PACKAGES.rds")).await;
    assert_eq!(status, 200);
    let (status, _, body) = get(&client, &proxy.url("/cran/src/contrib/mctop_2.1-3.tar.gz")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&top));
    assert_eq!(tampering.hits("/c/src/contrib/PACKAGES.gz"), 1);
    assert_eq!(good.hits("/c/src/contrib/mctop_2.1-3.tar.gz"), 1);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    proxy.settle().await;
    // A hit: immutable, never asked again.
    let (status, cache, _) = get(&client, &proxy.url("/cran/src/contrib/mctop_2.1-3.tar.gz")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(good.hits("/c/src/contrib/mctop_2.1-3.tar.gz"), 1);

    // An archived version no index lists: pinned on first use.
    let (status, _, body) = get(
        &client,
        &proxy.url("/cran/src/contrib/Archive/mctop/mctop_2.0-1.tar.gz"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&old));
}

#[tokio::test]
async fn a_denied_or_too_young_version_is_refused_with_the_reason_in_the_status_line() {
    let mirror = MirrorServer::start().await;
    let (top, leaf, fresh) = (
        test_bytes(1_000, 73),
        test_bytes(1_000, 74),
        test_bytes(1_000, 75),
    );
    let young = humantime::format_rfc3339_seconds(
        std::time::SystemTime::now() - std::time::Duration::from_secs(3600),
    )
    .to_string()
    .replace('T', " ")
    .replace('Z', " UTC");
    let packages = format!(
        "{}{}{}",
        entry("mctop", "2.1-3", &top, None),
        entry("mcleaf", "1.0.0", &leaf, Some("2020-01-01 00:00:00 UTC")),
        entry("mcfresh", "0.2", &fresh, Some(&young)),
    );
    serve_index(&mirror, &packages);
    mirror.put("/c/src/contrib/mctop_2.1-3.tar.gz", top);
    mirror.put("/c/src/contrib/mcleaf_1.0.0.tar.gz", leaf);
    mirror.put("/c/src/contrib/mcfresh_0.2.tar.gz", fresh);
    let extra = "deny = [\"mctop@>= 2.1\"]\nmin_release_age = \"7d\"";
    let proxy = TestProxy::start(&remote(&[&mirror], extra)).await;
    let client = reqwest::Client::new();

    // R's wget download method prints the reason phrase.
    let line = status_line(&proxy.base, "/cran/src/contrib/mctop_2.1-3.tar.gz").await;
    assert_eq!(
        line,
        "HTTP/1.1 403 mctop@2.1-3 is refused by this proxy: it matches the deny rule \"mctop@>= 2.1\""
    );
    let line = status_line(&proxy.base, "/cran/src/contrib/mcfresh_0.2.tar.gz").await;
    assert!(
        line.starts_with("HTTP/1.1 403 mcfresh@0.2 was published")
            && line.contains("min_release_age"),
        "{line}"
    );
    assert_eq!(mirror.hits("/c/src/contrib/mctop_2.1-3.tar.gz"), 0);
    assert_eq!(mirror.hits("/c/src/contrib/mcfresh_0.2.tar.gz"), 0);
    // Old enough, and not denied.
    let (status, _, _) = get(&client, &proxy.url("/cran/src/contrib/mcleaf_1.0.0.tar.gz")).await;
    assert_eq!(status, 200);
    // The index is served as the upstream wrote it.
    let (status, _, body) = get(&client, &proxy.url("/cran/src/contrib/PACKAGES")).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), packages.as_bytes());
}

#[tokio::test]
async fn warm_fetches_the_packages_a_renv_lock_names() {
    let mirror = MirrorServer::start().await;
    let (leaf, old) = (test_bytes(2_000, 76), test_bytes(2_000, 77));
    serve_index(&mirror, &entry("mcleaf", "1.0.0", &leaf, None));
    mirror.put("/c/src/contrib/mcleaf_1.0.0.tar.gz", leaf);
    mirror.put("/c/src/contrib/Archive/mctop/mctop_2.0-1.tar.gz", old);
    let proxy = TestProxy::start(&remote(&[&mirror], "")).await;
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("renv.lock");
    let text = serde_json::json!({
        "R": {"Version": "4.2.2", "Repositories": [{"Name": "CRAN", "URL": proxy.url("/cran")}]},
        "Packages": {
            "mcleaf": {"Package": "mcleaf", "Version": "1.0.0", "Source": "Repository", "Repository": "CRAN"},
            "mctop": {"Package": "mctop", "Version": "2.0-1", "Source": "Repository", "Repository": "CRAN"}
        }
    });
    std::fs::write(&lock, text.to_string()).unwrap();
    warm_fetches_all(&proxy.url(""), "cran", vec![lock], 2).await;
    assert_eq!(
        mirror.hits("/c/src/contrib/Archive/mctop/mctop_2.0-1.tar.gz"),
        1
    );
}
