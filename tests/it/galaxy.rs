//! The `galaxy` kind (issue 49) against a fixture Galaxy on 127.0.0.1
//! answering what `ansible-galaxy` asks for (`ansible/galaxy/api.py`:
//! `available_versions` at `api/`, a collection, its `versions/` pages
//! with `?limit=`/`&offset=` and root-relative `links.next`, a version's
//! detail with `download_url` and `artifact.sha256`), tarballs on two dist
//! hosts (the remote's `files`), the first tampered; and the roles' v1 API.

use crate::support::proxy::{config_text, get, get_json, start_text};
use crate::support::{sha256_hex, tampered, test_bytes, MirrorServer};

const COLLECTION: &str = "/galaxy/api/v3/collections/acme/web";

fn remote(galaxy: &MirrorServer, files: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"ansible\"\nkind = \"galaxy\"\nmirrors = [\"{}\"]\nfiles = {}\nstrategy = \"single\"\n{extra}",
        galaxy.url("/galaxy"),
        crate::support::toml_urls(files, "/dl")
    )
}

/// `ms` ago, as Galaxy writes `created_at`.
fn ago(days: u64) -> String {
    let at = std::time::SystemTime::now() - std::time::Duration::from_secs(days * 24 * 3600);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// Version `version` of acme.web, its tarball `tarball` at `dist`'s `/dl/`.
fn put_version(
    galaxy: &MirrorServer,
    dist: &MirrorServer,
    version: &str,
    tarball: &[u8],
    days: u64,
) {
    let detail = serde_json::json!({
        "namespace": {"name": "acme"}, "collection": {"name": "web"}, "version": version,
        "href": format!("/galaxy/api/v3/collections/acme/web/versions/{version}/"),
        "download_url": dist.url(&format!("/dl/acme-web-{version}.tar.gz")),
        "artifact": {"filename": format!("acme-web-{version}.tar.gz"),
                     "sha256": sha256_hex(tarball), "size": tarball.len()},
        "metadata": {"dependencies": {}}, "created_at": ago(days),
    });
    galaxy.put(
        &format!("{COLLECTION}/versions/{version}/"),
        detail.to_string(),
    );
}

/// Two `versions/` pages of one version each, the next one root-relative
/// with its offset, as pulp_ansible links them.
fn put_pages(galaxy: &MirrorServer, days: [u64; 2]) {
    let item = |version: &str, days: u64| {
        serde_json::json!({"version": version, "created_at": ago(days),
            "href": format!("/galaxy/api/v3/collections/acme/web/versions/{version}/")})
    };
    let first = serde_json::json!({"meta": {"count": 2},
        "links": {"first": "/galaxy/api/v3/collections/acme/web/versions/?limit=1&offset=0",
                  "next": "/galaxy/api/v3/collections/acme/web/versions/?limit=1&offset=1"},
        "data": [item("1.1.0", days[0])]});
    let second = serde_json::json!({"meta": {"count": 2},
        "links": {"next": null, "previous": "/galaxy/api/v3/collections/acme/web/versions/?limit=1&offset=0"},
        "data": [item("1.0.0", days[1])]});
    galaxy.put(
        &format!("{COLLECTION}/versions/?limit=1"),
        first.to_string(),
    );
    galaxy.put(
        &format!("{COLLECTION}/versions/?limit=1&offset=1"),
        second.to_string(),
    );
}

#[tokio::test]
async fn pages_follow_through_the_proxy_and_tarballs_are_checked_against_artifact_sha256() {
    let (galaxy, tampering, dist) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    let tarball = test_bytes(20_000, 4);
    galaxy.put(
        "/galaxy/api/",
        r#"{"available_versions":{"v1":"v1/","v3":"v3/"}}"#,
    );
    put_pages(&galaxy, [30, 40]);
    put_version(&galaxy, &tampering, "1.1.0", &tarball, 30);
    tampering.put("/dl/acme-web-1.1.0.tar.gz", tampered(&tarball));
    dist.put("/dl/acme-web-1.1.0.tar.gz", tarball.clone());
    galaxy.put("/galaxy/api/v1/roles/", r#"{"results":[]}"#);
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config_text(
        dir.path(),
        &remote(&galaxy, &[&tampering, &dist], ""),
    ))
    .await;
    let host = format!("http://{}", running.local_addr);
    let base = format!("{host}/ansible");
    let client = reqwest::Client::new();

    // `ansible-galaxy` asks for `api` without its slash: one key.
    for root in ["api/", "api"] {
        let root = get_json(&client, &format!("{base}/{root}")).await;
        assert_eq!(root["available_versions"]["v3"], "v3/");
    }
    assert_eq!(galaxy.hits("/galaxy/api/"), 1);

    // `ansible-galaxy` puts `links.next` in place of its own path: it
    // stays root-relative, below the remote.
    let first = get_json(
        &client,
        &format!("{base}/api/v3/collections/acme/web/versions/?limit=1"),
    )
    .await;
    let next = first["links"]["next"].as_str().unwrap();
    assert_eq!(
        next,
        "/ansible/api/v3/collections/acme/web/versions/?limit=1&offset=1"
    );
    let second = get_json(&client, &format!("{host}{next}")).await;
    assert_eq!(second["data"][0]["version"], "1.0.0");
    assert_eq!(galaxy.hits(&format!("{COLLECTION}/versions/")), 2);

    let detail = get_json(
        &client,
        &format!("{base}/api/v3/collections/acme/web/versions/1.1.0/"),
    )
    .await;
    let download = detail["download_url"].as_str().unwrap();
    assert_eq!(download, format!("{base}/~files/acme-web-1.1.0.tar.gz"));
    assert_eq!(detail["artifact"]["sha256"], sha256_hex(&tarball));
    let (status, _, body) = get(&client, download).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&tarball));
    assert_eq!(tampering.hits("/dl/acme-web-1.1.0.tar.gz"), 1);
    assert_eq!(dist.hits("/dl/acme-web-1.1.0.tar.gz"), 1);

    // The roles' v1 API is passed through, never cached.
    for _ in 0..2 {
        let (status, cache, _) = get(&client, &format!("{base}/api/v1/roles/")).await;
        assert_eq!((status, cache.as_str()), (200, "PASS"));
    }
    assert_eq!(galaxy.hits("/galaxy/api/v1/roles/"), 2);

    // Served from the cache with every origin down.
    running.proxy.fills.wait_idle().await;
    for server in [&galaxy, &tampering, &dist] {
        server.stop();
    }
    let (status, _, body) = get(&client, download).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&tarball));
    let again = get_json(&client, &format!("{host}{next}")).await;
    assert_eq!(again["data"][0]["version"], "1.0.0");
}

/// `min_release_age` by each version's `created_at` and `deny` with a
/// Galaxy specifier: the young version leaves the `versions/` pages, its
/// detail and its tarball are 403 with the reason in Galaxy's error JSON.
#[tokio::test]
async fn the_cooldown_and_deny_take_versions_out_and_refuse_their_detail_and_tarball() {
    let (galaxy, dist) = (MirrorServer::start().await, MirrorServer::start().await);
    let (young, old) = (test_bytes(3_000, 5), test_bytes(3_000, 6));
    put_pages(&galaxy, [1, 40]);
    put_version(&galaxy, &dist, "1.1.0", &young, 1);
    put_version(&galaxy, &dist, "1.0.0", &old, 40);
    dist.put("/dl/acme-web-1.1.0.tar.gz", young);
    dist.put("/dl/acme-web-1.0.0.tar.gz", old);
    let config = remote(
        &galaxy,
        &[&dist],
        "min_release_age = \"7d\"\ndeny = [\"acme.other@>=1.0.0,<2.0.0\"]\n",
    );
    let output = crate::support::binary::check(&config);
    assert!(output.status.success(), "{output:?}");
    let dir = tempfile::tempdir().unwrap();
    let running = start_text(&config_text(dir.path(), &config)).await;
    let base = format!("http://{}/ansible", running.local_addr);
    let client = reqwest::Client::new();

    let first = get_json(
        &client,
        &format!("{base}/api/v3/collections/acme/web/versions/?limit=1"),
    )
    .await;
    assert_eq!(first["data"].as_array().unwrap().len(), 0);
    let response = client
        .get(format!(
            "{base}/api/v3/collections/acme/web/versions/1.1.0/"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let said: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    let detail = said["errors"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("acme.web") && detail.contains("1.1.0"),
        "{detail}"
    );
    let (status, _, _) = get(&client, &format!("{base}/~files/acme-web-1.1.0.tar.gz")).await;
    assert_eq!(status, 403);
    assert_eq!(dist.hits("/dl/acme-web-1.1.0.tar.gz"), 0);
    let (status, _, _) = get(&client, &format!("{base}/~files/acme-web-1.0.0.tar.gz")).await;
    assert_eq!(status, 200);

    let bad = remote(&galaxy, &[&dist], "deny = [\"acme.web@>=one\"]\n");
    let output = crate::support::binary::check(&bad);
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        said.contains("remote[0].deny[0]") && said.contains("Galaxy version"),
        "{said}"
    );
}
