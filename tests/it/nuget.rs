//! The `nuget` kind against two fixture NuGet feeds (v3 and v2) and a
//! search host (the remote's `files`), with NuGet.Client's and nuget 2.8's
//! requests imitated one by one: the service index re-pointed at the
//! proxy, registration documents (gzipped upstream and not) and the flat
//! container cached, a tampered package refused against its `packageHash`
//! and the next mirror used, search passed through, the same requests
//! answered with every origin stopped, and versions filtered by `deny` and
//! by `published` with the reason in the status line.

use std::time::{Duration, SystemTime};

use crate::guard::assert_refused_in_status_line;
use crate::support::nuget::{package_hash, v2_feed};
use crate::support::proxy::get;
use crate::support::{sha256_hex, tampered, test_bytes, Fault, MirrorServer, TestProxy};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn ago(ago: Duration) -> String {
    humantime::format_rfc3339_millis(SystemTime::now() - ago).to_string()
}

/// A v3 feed at the mirror's root, as api.nuget.org lays it out: its service index (search on `search`),
/// `Acme.Hello`'s registration (both spellings) and flat container, each
/// version `(version, published, package)`.
fn v3_feed(mirror: &MirrorServer, search: &MirrorServer, versions: &[(&str, &str, &[u8])]) {
    let base = mirror.url("");
    let index = serde_json::json!({"version": "3.0.0", "resources": [
        {"@id": format!("{base}/v3-flatcontainer/"), "@type": "PackageBaseAddress/3.0.0"},
        {"@id": format!("{base}/v3/registration5-gz-semver2/"), "@type": "RegistrationsBaseUrl/Versioned"},
        {"@id": format!("{base}/v3/registration5-semver1/"), "@type": "RegistrationsBaseUrl"},
        {"@id": search.url("/search/query"), "@type": "SearchQueryService"},
        {"@id": search.url("/search/autocomplete"), "@type": "SearchAutocompleteService"}
    ]});
    mirror.put("/v3/index.json", index.to_string());
    for registration in ["registration5-gz-semver2", "registration5-semver1"] {
        let leaves: Vec<serde_json::Value> = versions.iter().map(|(v, published, package)| serde_json::json!({
            "@id": format!("{base}/v3/{registration}/acme.hello/{v}.json"),
            "catalogEntry": {"@id": format!("{base}/catalog/acme.hello.{v}.json"), "id": "Acme.Hello",
                             "version": v, "published": published, "listed": true,
                             "packageHash": package_hash(package), "packageHashAlgorithm": "SHA512"},
            "packageContent": format!("{base}/v3-flatcontainer/acme.hello/{v}/acme.hello.{v}.nupkg")
        })).collect();
        let doc = serde_json::json!({"@id": format!("{base}/v3/{registration}/acme.hello/index.json"), "count": 1,
            "items": [{"count": leaves.len(), "lower": versions[0].0, "upper": versions[versions.len() - 1].0, "items": leaves}]});
        mirror.put(
            &format!("/v3/{registration}/acme.hello/index.json"),
            doc.to_string(),
        );
        for (v, published, _) in versions {
            let leaf = serde_json::json!({"@id": format!("{base}/v3/{registration}/acme.hello/{v}.json"),
                "catalogEntry": format!("{base}/catalog/acme.hello.{v}.json"), "published": published,
                "packageContent": format!("{base}/v3-flatcontainer/acme.hello/{v}/acme.hello.{v}.nupkg")});
            mirror.put(
                &format!("/v3/{registration}/acme.hello/{v}.json"),
                leaf.to_string(),
            );
        }
    }
    let listed: Vec<&str> = versions.iter().map(|(v, _, _)| *v).collect();
    mirror.put(
        "/v3-flatcontainer/acme.hello/index.json",
        serde_json::json!({"versions": listed}).to_string(),
    );
    for (v, _, package) in versions {
        mirror.put(
            &format!("/v3-flatcontainer/acme.hello/{v}/acme.hello.{v}.nupkg"),
            package.to_vec(),
        );
    }
}

fn remote(mirrors: &[&MirrorServer], prefix: &str, search: &MirrorServer, extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"nuget\"\nkind = \"nuget\"\nmirrors = {}\nfiles = [\"{}\"]\nstrategy = \"single\"\n{extra}",
        crate::support::toml_urls(mirrors, prefix),
        search.url("/search")
    )
}

/// The resource of `type` in a service index.
fn resource(index: &serde_json::Value, kind: &str) -> String {
    let found = index["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["@type"] == kind);
    found.unwrap()["@id"].as_str().unwrap().to_string()
}

async fn fetch(client: &reqwest::Client, url: &str) -> Vec<u8> {
    let (status, _, body) = get(client, url).await;
    assert_eq!(status, 200, "{url}");
    body.unwrap().to_vec()
}

/// NuGet.Client's requests for `nuget install Acme.Hello -Version 1.0.0`
/// against a v3 source, then a restore's: the service index
/// (`NuGet.Protocol/Providers/ServiceIndexResourceV3Provider.cs`), the
/// registration index under `RegistrationsBaseUrl/Versioned`
/// (`Providers/RegistrationResourceV3Provider.cs`, `ServiceTypes.cs`), the
/// package from `PackageBaseAddress` as `{id}/{version}/{id}.{version}.nupkg`
/// in lower case (`Resources/DownloadResourceV3.cs`, `GetDownloadUrl`), and
/// the flat container's version list `{id}/index.json`
/// (`RemoteRepositories/HttpFileSystemBasedFindPackageByIdResource.cs`).
/// Returns the package's bytes.
async fn nuget_v3_install(client: &reqwest::Client, source: &str) -> Vec<u8> {
    let index: serde_json::Value = serde_json::from_slice(&fetch(client, source).await).unwrap();
    let registrations = resource(&index, "RegistrationsBaseUrl/Versioned");
    let flat = resource(&index, "PackageBaseAddress/3.0.0");
    let registration: serde_json::Value = serde_json::from_slice(
        &fetch(client, &format!("{registrations}acme.hello/index.json")).await,
    )
    .unwrap();
    let leaf = &registration["items"][0]["items"][0];
    assert_eq!(leaf["catalogEntry"]["version"], "1.0.0");
    let package = fetch(
        client,
        &format!("{flat}acme.hello/1.0.0/acme.hello.1.0.0.nupkg"),
    )
    .await;
    let listed: serde_json::Value =
        serde_json::from_slice(&fetch(client, &format!("{flat}acme.hello/index.json")).await)
            .unwrap();
    assert_eq!(listed["versions"][0], "1.0.0");
    package
}

#[tokio::test]
async fn nuget_v3_installs_past_a_tampered_package_then_with_every_origin_stopped() {
    let (tampering, good, search) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    let package = test_bytes(40_000, 60);
    let published = ago(60 * DAY);
    for mirror in [&tampering, &good] {
        v3_feed(mirror, &search, &[("1.0.0", &published, &package)]);
    }
    tampering.put(
        "/v3-flatcontainer/acme.hello/1.0.0/acme.hello.1.0.0.nupkg",
        tampered(&package),
    );
    search.put(
        "/search/query",
        r#"{"totalHits":1,"data":[{"id":"Acme.Hello","version":"1.0.0"}]}"#,
    );
    let proxy = TestProxy::start(&remote(&[&tampering, &good], "", &search, "")).await;
    let source = proxy.url("/nuget/v3/index.json");
    let client = reqwest::Client::new();

    // The registration index comes gzipped, as api.nuget.org sends it.
    tampering.set_fault(Fault::Encoded("gzip"));
    let index: serde_json::Value = serde_json::from_slice(&fetch(&client, &source).await).unwrap();
    let registrations = resource(&index, "RegistrationsBaseUrl/Versioned");
    assert_eq!(
        registrations,
        proxy.url("/nuget/v3/registration5-gz-semver2/")
    );
    assert_eq!(
        resource(&index, "SearchQueryService"),
        proxy.url("/nuget/~files/query")
    );
    let registration = fetch(&client, &format!("{registrations}acme.hello/index.json")).await;
    tampering.set_fault(Fault::None);
    let registration: serde_json::Value = serde_json::from_slice(&registration).unwrap();
    assert_eq!(
        registration["items"][0]["items"][0]["packageContent"],
        proxy.url("/nuget/v3-flatcontainer/acme.hello/1.0.0/acme.hello.1.0.0.nupkg")
    );
    let got = nuget_v3_install(&client, &source).await;
    assert_eq!(sha256_hex(&got), sha256_hex(&package));
    let path = "/v3-flatcontainer/acme.hello/1.0.0/acme.hello.1.0.0.nupkg";
    assert_eq!((tampering.hits(path), good.hits(path)), (1, 1));
    // The registration without gzip, and search passed through.
    let plain = fetch(
        &client,
        &proxy.url("/nuget/v3/registration5-semver1/acme.hello/index.json"),
    )
    .await;
    assert!(String::from_utf8(plain)
        .unwrap()
        .contains(&proxy.url("/nuget/v3-flatcontainer/")));
    let query = format!(
        "{}?q=acme&skip=0&take=20&prerelease=true&semVerLevel=2.0.0",
        resource(&index, "SearchQueryService")
    );
    let response = client.get(&query).send().await.unwrap();
    assert_eq!(response.headers()["x-cache-status"], "PASS");
    assert_eq!(
        search.last_request().unwrap().target,
        "/search/query?q=acme&skip=0&take=20&prerelease=true&semVerLevel=2.0.0"
    );
    proxy.settle().await;
    let cold: usize = [&tampering, &good].iter().map(|m| m.total()).sum();
    // index, two registrations, the package from both, the version list.
    assert_eq!(cold, 6, "{:?} {:?}", tampering.requests(), good.requests());

    for mirror in [&tampering, &good, &search] {
        mirror.stop();
    }
    let again = nuget_v3_install(&client, &source).await;
    assert_eq!(sha256_hex(&again), sha256_hex(&package));
    let after: usize = [&tampering, &good].iter().map(|m| m.total()).sum();
    assert_eq!(after, cold, "no request reached an origin");
    proxy.stop().await;
}

/// nuget 2.8's requests for `nuget install Acme.Hello -Version 1.0.0 -Source
/// …/api/v2/` (Debian's NuGet.Core, seen on the wire: `tests/clients/nuget.rs`
/// runs it): the service document at the source URL, the entry
/// `Packages(Id='Acme.Hello',Version='1.0.0')` with its quotes escaped, the
/// package at the entry's `<content src>`; without `-Version`,
/// `FindPackagesById()` with its query first. NuGet.Client reads the same
/// documents (`NuGet.Protocol/LegacyFeed/V2FeedParser.cs`,
/// `V2FeedQueryBuilder.cs`).
async fn nuget_v2_install(client: &reqwest::Client, source: &str) -> Vec<u8> {
    let service = String::from_utf8(fetch(client, source).await).unwrap();
    assert!(
        service.contains(&format!("xml:base=\"{source}")),
        "{service}"
    );
    let by_id = fetch(client, &format!("{source}FindPackagesById()?$filter=IsLatestVersion&$orderby=Version%20desc&$top=1&id=%27Acme.Hello%27")).await;
    assert!(String::from_utf8(by_id)
        .unwrap()
        .contains("<d:Version>1.0.0</d:Version>"));
    let entry = String::from_utf8(
        fetch(
            client,
            &format!("{source}Packages(Id=%27Acme.Hello%27,Version=%271.0.0%27)"),
        )
        .await,
    )
    .unwrap();
    let src = entry
        .split("src=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(src.starts_with(source), "{src}");
    fetch(client, src).await
}

#[tokio::test]
async fn nuget_v2_installs_past_a_tampered_package_then_with_every_origin_stopped() {
    let (tampering, good, search) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    let package = test_bytes(40_000, 61);
    for mirror in [&tampering, &good] {
        v2_feed(mirror, &[("1.0.0", "2024-01-01T00:00:00.000", &package)]);
    }
    tampering.put("/api/v2/package/Acme.Hello/1.0.0", tampered(&package));
    let proxy = TestProxy::start(&remote(&[&tampering, &good], "", &search, "")).await;
    let source = proxy.url("/nuget/api/v2/");
    let client = reqwest::Client::new();
    let got = nuget_v2_install(&client, &source).await;
    assert_eq!(sha256_hex(&got), sha256_hex(&package));
    let path = "/api/v2/package/Acme.Hello/1.0.0";
    assert_eq!((tampering.hits(path), good.hits(path)), (1, 1));
    proxy.settle().await;
    let cold: usize = [&tampering, &good].iter().map(|m| m.total()).sum();
    assert_eq!(cold, 5, "{:?} {:?}", tampering.requests(), good.requests());
    for mirror in [&tampering, &good] {
        mirror.stop();
    }
    let again = nuget_v2_install(&client, &source).await;
    assert_eq!(sha256_hex(&again), sha256_hex(&package));
    let after: usize = [&tampering, &good].iter().map(|m| m.total()).sum();
    assert_eq!(after, cold, "no request reached an origin");
    proxy.stop().await;
}

/// `deny` by a NuGet interval and a cooldown by `published`: the
/// registration and the v2 feed lose the refused versions, the flat
/// container's version list loses them too (dated by each version's
/// registration leaf), and a refused package is 403 with the reason in the
/// status line, on v3 and v2, without a request for it upstream.
#[tokio::test]
async fn refused_versions_leave_every_listing_and_their_packages_are_403_with_the_reason() {
    let (feed, search) = (MirrorServer::start().await, MirrorServer::start().await);
    let (old, young, denied) = (
        test_bytes(1_000, 62),
        test_bytes(1_000, 63),
        test_bytes(1_000, 64),
    );
    let versions: [(&str, &str, &[u8]); 3] = [
        ("0.9.0", &ago(90 * DAY), &denied),
        ("1.0.0", &ago(60 * DAY), &old),
        ("2.0.0", &ago(DAY), &young),
    ];
    let (v0, v1, v2) = (
        versions[0].1.to_string(),
        versions[1].1.to_string(),
        versions[2].1.to_string(),
    );
    v3_feed(&feed, &search, &versions);
    let zoneless = |t: &str| t.trim_end_matches('Z').to_string();
    v2_feed(
        &feed,
        &[
            ("0.9.0", &zoneless(&v0), &denied),
            ("1.0.0", &zoneless(&v1), &old),
            ("2.0.0", &zoneless(&v2), &young),
        ],
    );
    let extra = "deny = [\"acme.hello@(,1.0)\"]\nmin_release_age = \"7d\"\n";
    let config = remote(&[&feed], "", &search, extra);
    crate::support::binary::assert_check_passes(&config);
    let proxy = TestProxy::start(&config).await;
    let client = reqwest::Client::new();
    let text =
        async |path: &str| String::from_utf8(fetch(&client, &proxy.url(path)).await).unwrap();

    let registration = text("/nuget/v3/registration5-gz-semver2/acme.hello/index.json").await;
    assert!(
        registration.contains("acme.hello.1.0.0.nupkg"),
        "{registration}"
    );
    assert!(
        !registration.contains("acme.hello.2.0.0.nupkg")
            && !registration.contains("acme.hello.0.9.0.nupkg"),
        "{registration}"
    );
    let listed = text("/nuget/v3-flatcontainer/acme.hello/index.json").await;
    assert_eq!(listed, r#"{"versions":["1.0.0"]}"#);
    let feed_text = text("/nuget/api/v2/FindPackagesById()?id=%27Acme.Hello%27").await;
    assert!(
        feed_text.contains("<d:Version>1.0.0") && !feed_text.contains("<d:Version>2.0.0"),
        "{feed_text}"
    );

    assert_refused_in_status_line(
        &proxy.base,
        "/nuget/v3-flatcontainer/acme.hello/2.0.0/acme.hello.2.0.0.nupkg",
        "acme.hello@2.0.0 was published 1day ago",
    )
    .await;
    assert_refused_in_status_line(
        &proxy.base,
        "/nuget/api/v2/package/Acme.Hello/0.9.0",
        "Acme.Hello@0.9.0 is refused by this proxy: it matches the deny rule",
    )
    .await;
    assert_refused_in_status_line(
        &proxy.base,
        "/nuget/api/v2/Packages(Id=%27Acme.Hello%27,Version=%272.0.0%27)",
        "was published 1day ago",
    )
    .await;
    assert_eq!(
        feed.hits("/v3-flatcontainer/acme.hello/2.0.0/acme.hello.2.0.0.nupkg"),
        0
    );
    assert_eq!(feed.hits("/api/v2/package/Acme.Hello/0.9.0"), 0);
    proxy.stop().await;
}

/// `warm` reads a `packages.lock.json`: each resolved package (once, however
/// many frameworks list it) fetched from the flat container and checked
/// against its `contentHash`; a project reference has nothing to fetch.
#[tokio::test]
async fn warm_fetches_the_packages_a_packages_lock_names() {
    let (feed, search) = (MirrorServer::start().await, MirrorServer::start().await);
    let package = test_bytes(5_000, 65);
    v3_feed(&feed, &search, &[("1.0.0", &ago(60 * DAY), &package)]);
    let dir = tempfile::tempdir().unwrap();
    let proxy = TestProxy::start_in(dir.path(), &remote(&[&feed], "", &search, "")).await;
    let lock = dir.path().join("packages.lock.json");
    let resolved = serde_json::json!({"type": "Direct", "requested": "[1.0.0, )", "resolved": "1.0.0",
                                      "contentHash": package_hash(&package)});
    let locked = serde_json::json!({"version": 1, "dependencies": {
        "net8.0": {"Acme.Hello": resolved, "App.Lib": {"type": "Project"}},
        "net6.0": {"Acme.Hello": resolved}}});
    std::fs::write(&lock, locked.to_string()).unwrap();
    let summary = crate::support::proxy::warm(&proxy.base, "nuget", lock).await;
    assert_eq!((summary.fetched, summary.cached), (1, 0), "{summary}");
    assert!(summary.failed.is_empty(), "{summary}");
    assert_eq!(
        feed.hits("/v3-flatcontainer/acme.hello/1.0.0/acme.hello.1.0.0.nupkg"),
        1
    );
    proxy.stop().await;
}
