//! The `maven` kind (issue 22) against fixture repositories on 127.0.0.1:
//! two upstreams (one 404s, the other has it), path classes, sidecars as the
//! declared digests (fetched by the proxy before it accepts a file) and
//! sidecars answered from the bytes served, the negative cache, the version
//! policy, `maven-metadata.xml` filtered with its checksum recomputed, the
//! cooldown by the `.pom`'s `Last-Modified`, and Gradle module metadata.

use std::time::{Duration, SystemTime};

use sha1::Digest as _;

use crate::support::proxy::get;
use crate::support::{sha256_hex, tampered, test_bytes, toml_urls, MirrorServer, TestProxy};

const JAR: &str = "/m/org/example/lib/1.0/lib-1.0.jar";
const POM: &str = "/m/org/example/lib/1.0/lib-1.0.pom";

fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"mvn\"\nkind = \"maven\"\nmirrors = {}\nstrategy = \"single\"\n{extra}\n",
        toml_urls(mirrors, "/m")
    )
}

fn sha1_hex(bytes: &[u8]) -> String {
    hex::encode(sha1::Sha1::digest(bytes))
}

fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(md5::Md5::digest(bytes))
}

/// A release as Central serves it: the file and its `.sha1` and `.md5`.
fn publish(mirror: &MirrorServer, path: &str, bytes: &[u8]) {
    mirror.put(path, bytes.to_vec());
    mirror.put(&format!("{path}.sha1"), sha1_hex(bytes));
    mirror.put(&format!("{path}.md5"), md5_hex(bytes));
}

/// A request the remote's guard refuses: 403, and the reason in its body.
async fn refused(client: &reqwest::Client, url: &str) -> String {
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 403, "{url}");
    response.text().await.unwrap()
}

fn upstream_requests(mirrors: &[&MirrorServer]) -> usize {
    mirrors.iter().map(|m| m.total()).sum()
}

#[tokio::test]
async fn two_upstreams_one_404s_and_sidecars_come_from_the_served_bytes() {
    let (central, company) = (MirrorServer::start().await, MirrorServer::start().await);
    let jar = test_bytes(30_000, 1);
    let pom = b"<project><modelVersion>4.0.0</modelVersion></project>".to_vec();
    // Only the second upstream has the artifact: the first answers 404.
    publish(&company, JAR, &jar);
    publish(&company, POM, &pom);
    let proxy = TestProxy::start(&remote(&[&central, &company], "")).await;
    let client = reqwest::Client::new();

    let (status, cache, body) =
        get(&client, &proxy.url("/mvn/org/example/lib/1.0/lib-1.0.jar")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&jar));
    assert_eq!(central.hits(JAR), 1);
    assert_eq!(company.hits(JAR), 1);
    // The sidecar was read before the jar was accepted (the strongest the
    // mirror has: .sha512 and .sha256 are 404 there, .sha1 is not).
    assert_eq!(company.hits(&format!("{JAR}.sha1")), 1);

    // Every sidecar is answered from the jar's own bytes, the ones the mirror
    // lacks too, with no upstream request.
    proxy.settle().await;
    let before = upstream_requests(&[&central, &company]);
    for (suffix, expected) in [
        ("sha1", sha1_hex(&jar)),
        ("md5", md5_hex(&jar)),
        ("sha256", sha256_hex(&jar)),
        ("sha512", hex::encode(sha2::Sha512::digest(&jar))),
    ] {
        let url = proxy.url(&format!("/mvn/org/example/lib/1.0/lib-1.0.jar.{suffix}"));
        let (status, cache, body) = get(&client, &url).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "{suffix}");
        assert_eq!(
            String::from_utf8(body.unwrap().to_vec()).unwrap(),
            expected,
            "{suffix}"
        );
    }
    let (status, cache, _) = get(&client, &proxy.url("/mvn/org/example/lib/1.0/lib-1.0.jar")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(upstream_requests(&[&central, &company]), before);

    // A file neither has: 404, then remembered (negative_ttl) and answered
    // without asking either upstream again.
    let missing = proxy.url("/mvn/org/example/lib/9.9/lib-9.9.pom");
    let (status, _, _) = get(&client, &missing).await;
    assert_eq!(status, 404);
    let asked = upstream_requests(&[&central, &company]);
    let (status, _, _) = get(&client, &missing).await;
    assert_eq!(status, 404);
    assert_eq!(upstream_requests(&[&central, &company]), asked);
}

#[tokio::test]
async fn a_tampered_first_mirror_is_refused_by_its_own_sidecar() {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    let good = test_bytes(50_000, 2);
    // Same file name, other bytes, while its sidecar declares the real digest.
    a.put(JAR, tampered(&good));
    a.put(&format!("{JAR}.sha1"), sha1_hex(&good));
    publish(&b, JAR, &good);
    let proxy = TestProxy::start(&remote(&[&a, &b], "")).await;
    let client = reqwest::Client::new();
    let (status, _, body) = get(&client, &proxy.url("/mvn/org/example/lib/1.0/lib-1.0.jar")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&good));
    assert_eq!((a.hits(JAR), b.hits(JAR)), (1, 1));
    assert_eq!(
        proxy.metric("mirrorcache_integrity_failures_total").await,
        1.0
    );

    // The tampered mirror alone: 502 naming both digests, nothing cached.
    let only = TestProxy::start(&remote(&[&a], "")).await;
    let response = client
        .get(only.url("/mvn/org/example/lib/1.0/lib-1.0.jar"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    let text = response.text().await.unwrap();
    assert!(
        text.contains(&format!("sha1:{}", sha1_hex(&good))),
        "{text}"
    );
    assert!(
        text.contains(&format!("sha1:{}", sha1_hex(&tampered(&good)))),
        "{text}"
    );
    only.settle().await;
    let (status, _, _) = get(&client, &only.url("/mvn/org/example/lib/1.0/lib-1.0.jar")).await;
    assert_eq!(status, 502);
    assert_eq!(a.hits(JAR), 3);
}

const METADATA: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>
<metadata>
  <groupId>org.example</groupId>
  <artifactId>lib</artifactId>
  <versioning>
    <latest>1.1</latest>
    <release>1.1</release>
    <versions>
      <version>1.0</version>
      <version>1.1</version>
    </versions>
    <lastUpdated>20240101000000</lastUpdated>
  </versioning>
</metadata>
";

#[tokio::test]
async fn metadata_is_filtered_its_checksum_follows_and_a_denied_version_is_403() {
    let mirror = MirrorServer::start().await;
    publish(
        &mirror,
        "/m/org/example/lib/maven-metadata.xml",
        METADATA.as_bytes(),
    );
    publish(&mirror, JAR, &test_bytes(1000, 3));
    let jar11 = "/m/org/example/lib/1.1/lib-1.1.jar";
    publish(&mirror, jar11, &test_bytes(1000, 4));
    let proxy = TestProxy::start(&remote(&[&mirror], "deny = [\"org.example:lib@[1.1,)\"]")).await;
    let client = reqwest::Client::new();
    let (status, _, body) = get(
        &client,
        &proxy.url("/mvn/org/example/lib/maven-metadata.xml"),
    )
    .await;
    assert_eq!(status, 200);
    let body = body.unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        text.contains("<release>1.0</release>") && text.contains("<latest>1.0</latest>"),
        "{text}"
    );
    assert!(!text.contains("1.1"), "{text}");
    // The checksum is the filtered document's, not the mirror's.
    let (status, _, sha1) = get(
        &client,
        &proxy.url("/mvn/org/example/lib/maven-metadata.xml.sha1"),
    )
    .await;
    assert_eq!(status, 200);
    let sha1 = String::from_utf8(sha1.unwrap().to_vec()).unwrap();
    assert_eq!(sha1, sha1_hex(&body));
    assert_ne!(sha1, sha1_hex(METADATA.as_bytes()));

    // A pinned build never reads the metadata: the file itself is refused.
    let reason = refused(&client, &proxy.url("/mvn/org/example/lib/1.1/lib-1.1.jar")).await;
    assert!(
        reason.contains("org.example:lib@1.1") && reason.contains("deny"),
        "{reason}"
    );
    assert_eq!(mirror.hits(jar11), 0);
    let (status, _, _) = get(
        &client,
        &proxy.url("/mvn/org/example/lib/1.1/lib-1.1.jar.sha1"),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _, _) = get(&client, &proxy.url("/mvn/org/example/lib/1.0/lib-1.0.jar")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_young_release_is_refused_by_its_poms_last_modified() {
    let mirror = MirrorServer::start().await;
    publish(
        &mirror,
        "/m/org/example/lib/maven-metadata.xml",
        METADATA.as_bytes(),
    );
    let old = SystemTime::now() - Duration::from_secs(90 * 24 * 3600);
    mirror.put_dated(POM, b"<project/>".to_vec(), old);
    publish(&mirror, JAR, &test_bytes(1000, 5));
    mirror.put_dated(
        "/m/org/example/lib/1.1/lib-1.1.pom",
        b"<project/>".to_vec(),
        SystemTime::now(),
    );
    publish(
        &mirror,
        "/m/org/example/lib/1.1/lib-1.1.jar",
        &test_bytes(1000, 6),
    );
    let proxy = TestProxy::start(&remote(&[&mirror], "min_release_age = \"7d\"")).await;
    let client = reqwest::Client::new();
    let reason = refused(&client, &proxy.url("/mvn/org/example/lib/1.1/lib-1.1.jar")).await;
    assert!(
        reason.contains("min_release_age") && reason.contains("org.example:lib@1.1"),
        "{reason}"
    );
    let (status, _, body) = get(
        &client,
        &proxy.url("/mvn/org/example/lib/maven-metadata.xml"),
    )
    .await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body.unwrap().to_vec()).unwrap();
    assert!(
        text.contains("<release>1.0</release>") && !text.contains("1.1"),
        "{text}"
    );
    let (status, _, _) = get(&client, &proxy.url("/mvn/org/example/lib/1.0/lib-1.0.jar")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_version_policy_refuses_the_other_kind_without_asking_upstream() {
    let mirror = MirrorServer::start().await;
    let snapshot = "/m/org/example/lib/2.0-SNAPSHOT/lib-2.0-20240101.123456-1.jar";
    publish(&mirror, snapshot, &test_bytes(100, 7));
    publish(&mirror, JAR, &test_bytes(100, 8));
    let proxy = TestProxy::start(&remote(&[&mirror], "version_policy = \"releases\"")).await;
    let client = reqwest::Client::new();
    for path in [
        "/mvn/org/example/lib/2.0-SNAPSHOT/lib-2.0-20240101.123456-1.jar",
        "/mvn/org/example/lib/2.0-SNAPSHOT/maven-metadata.xml",
        "/mvn/org/example/lib/2.0-SNAPSHOT/lib-2.0-20240101.123456-1.jar.sha1",
    ] {
        let (status, _, _) = get(&client, &proxy.url(path)).await;
        assert_eq!(status, 404, "{path}");
    }
    assert_eq!(mirror.total(), 0);
    let (status, _, _) = get(&client, &proxy.url("/mvn/org/example/lib/1.0/lib-1.0.jar")).await;
    assert_eq!(status, 200);

    let snapshots = TestProxy::start(&remote(&[&mirror], "version_policy = \"snapshots\"")).await;
    let (status, _, _) = get(
        &client,
        &snapshots.url("/mvn/org/example/lib/1.0/lib-1.0.jar"),
    )
    .await;
    assert_eq!(status, 404);
    let url = "/mvn/org/example/lib/2.0-SNAPSHOT/lib-2.0-20240101.123456-1.jar";
    let (status, _, _) = get(&client, &snapshots.url(url)).await;
    assert_eq!(status, 200);

    // Only kinds with snapshots take the key; a bad value names itself.
    let npm = "[[remote]]\nname = \"n\"\nkind = \"npm\"\nmirrors = [\"http://127.0.0.1:1\"]\nversion_policy = \"releases\"\n";
    let error = mirrorcache::config::Config::parse(npm, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("t.toml:5:") && error.contains("remote[0].version_policy"),
        "{error}"
    );
    let bad = "[[remote]]\nname = \"m\"\nkind = \"maven\"\nmirrors = [\"http://127.0.0.1:1\"]\nversion_policy = \"nightly\"\n";
    let error = mirrorcache::config::Config::parse(bad, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("\"nightly\" is not a version policy"),
        "{error}"
    );
}

#[tokio::test]
async fn gradle_module_metadata_declares_the_files_it_lists() {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    let good = test_bytes(20_000, 9);
    let module = serde_json::json!({"formatVersion": "1.1", "variants": [{"name": "runtimeElements",
        "files": [{"name": "lib-1.0.jar", "url": "lib-1.0.jar", "size": good.len(),
                   "sha512": hex::encode(sha2::Sha512::digest(&good)),
                   "sha256": sha256_hex(&good), "sha1": sha1_hex(&good)}]}]});
    let module_path = "/m/org/example/lib/1.0/lib-1.0.module";
    for m in [&a, &b] {
        m.put(module_path, module.to_string());
    }
    // No sidecars anywhere: the module is what declares the jar.
    a.put(JAR, tampered(&good));
    b.put(JAR, good.clone());
    let proxy = TestProxy::start(&remote(&[&a, &b], "")).await;
    let client = reqwest::Client::new();
    let (status, _, _) = get(
        &client,
        &proxy.url("/mvn/org/example/lib/1.0/lib-1.0.module"),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _, body) = get(&client, &proxy.url("/mvn/org/example/lib/1.0/lib-1.0.jar")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&good));
    assert_eq!((a.hits(JAR), b.hits(JAR)), (1, 1));
    assert_eq!(
        proxy.metric("mirrorcache_integrity_failures_total").await,
        1.0
    );
}

#[tokio::test]
async fn writes_get_the_read_only_405() {
    let mirror = MirrorServer::start().await;
    let proxy = TestProxy::start(&remote(&[&mirror], "")).await;
    let response = reqwest::Client::new()
        .put(proxy.url("/mvn/org/example/lib/1.0/lib-1.0.jar"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(mirror.total(), 0);
}
