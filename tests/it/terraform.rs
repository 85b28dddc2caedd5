//! The `terraform` kind against two fixture registries (one Terraform-like,
//! whose services document gives root-relative URLs, one OpenTofu-like,
//! with absolute ones) whose `download_url`s are on a third host (the
//! remote's first `files` mirror, a fourth its copy), with `tofu init`'s
//! requests imitated one by one, from OpenTofu's source
//! (`internal/getproviders`):
//!
//! - against a network mirror (`provider_installation { network_mirror {
//!   url = "…" } }`): `HTTPMirrorSource.AvailableVersions` asks
//!   `{hostname}/{namespace}/{type}/index.json` and
//!   `HTTPMirrorSource.PackageMeta` `…/{version}.json`
//!   (`http_mirror_source.go`, both with `X-Terraform-Version` and a
//!   `Content-Type` that must be `application/json`), then
//!   `PackageHTTPURL.InstallProviderPackage` GETs the archive's `url`
//!   resolved against the `{version}.json` URL
//!   (`package_location_http_archive.go`), and `packageHashAuthentication`
//!   checks it against the `zh:` hashes (`package_authentication.go`);
//! - against the registry itself: `RegistrySource` discovers the host's
//!   `providers.v1` (`registry_source.go`, `services.Discover`), then
//!   `registryClient.ProviderVersions` asks `{ns}/{type}/versions` and
//!   `registryClient.PackageMeta` `{ns}/{type}/{version}/download/{os}/{arch}`,
//!   `shasums_url` and `shasums_signature_url` (`registry_client.go`); the
//!   archive at `download_url` must be the `shasum`, which the `SHA256SUMS`
//!   document must list for its `filename`
//!   (`NewArchiveChecksumAuthentication`,
//!   `NewMatchingChecksumAuthentication`), and the signature is checked with
//!   the answer's `signing_keys` (`NewSignatureAuthentication`), so it must
//!   arrive untouched;
//! - a module: `Client.ModulePackageLocation` (`internal/registry/client.go`)
//!   asks `…/{version}/download` and takes `X-Terraform-Get` from a 204 (or
//!   from a 200 whose JSON has no `location`).
//!
//! Cold, then with every origin stopped (no upstream request); a tampered
//! archive refused and the next `files` mirror used; a provider only the
//! second registry has; a refused version with the reason in the status
//! line; a hostname not in `hostnames` 404; a 60 MB provider through the
//! real binary with its peak RSS.

use serde_json::{json, Value};
use url::Url;

use crate::fanout::peak_rss_kib;
use crate::guard::assert_refused_in_status_line;
use crate::support::proxy::{config_text, get, status_line};
use crate::support::{sha256_hex, tampered, test_bytes, BinaryProxy, MirrorServer, TestProxy};

/// One version of a provider and its archives by platform.
struct Provider {
    ns: &'static str,
    ty: &'static str,
    version: &'static str,
    archives: Vec<(&'static str, &'static str, Vec<u8>)>,
}

impl Provider {
    fn zip(&self, os: &str, arch: &str) -> String {
        format!(
            "terraform-provider-{}_{}_{os}_{arch}.zip",
            self.ty, self.version
        )
    }

    /// The directory of its files on the download host.
    fn dir(&self) -> String {
        format!("/releases/terraform-provider-{}/{}", self.ty, self.version)
    }

    fn sums(&self) -> String {
        self.archives
            .iter()
            .map(|(os, arch, bytes)| format!("{}  {}\n", sha256_hex(bytes), self.zip(os, arch)))
            .collect()
    }

    fn sums_file(&self) -> String {
        format!(
            "{}/terraform-provider-{}_{}_SHA256SUMS",
            self.dir(),
            self.ty,
            self.version
        )
    }
}

fn put_json(server: &MirrorServer, path: &str, value: &Value) {
    server.put_typed(path, value.to_string(), "application/json");
}

/// A registry at `registry`'s root serving `providers` (older versions
/// listed as well), with its archives, `SHA256SUMS` and signature on the
/// download host `files`, and `services` as its `.well-known/terraform.json`.
fn registry(
    registry: &MirrorServer,
    files: &MirrorServer,
    services: Value,
    providers: &[&Provider],
) {
    put_json(registry, "/.well-known/terraform.json", &services);
    for p in providers {
        let platforms: Vec<Value> = p
            .archives
            .iter()
            .map(|(os, arch, _)| json!({"os": os, "arch": arch}))
            .collect();
        let versions = json!({
            "id": format!("{}/{}", p.ns, p.ty),
            "versions": [
                {"version": p.version, "protocols": ["5.0"], "platforms": platforms},
                {"version": "0.9.0", "protocols": ["5.0"], "platforms": [{"os": "linux", "arch": "amd64"}]},
            ],
            "warnings": null,
        });
        put_json(
            registry,
            &format!("/v1/providers/{}/{}/versions", p.ns, p.ty),
            &versions,
        );
        for (os, arch, bytes) in &p.archives {
            let download = json!({
                "protocols": ["5.0"],
                "os": os,
                "arch": arch,
                "filename": p.zip(os, arch),
                "download_url": files.url(&format!("{}/{}", p.dir(), p.zip(os, arch))),
                "shasums_url": files.url(&p.sums_file()),
                "shasums_signature_url": files.url(&format!("{}.72D7468F.sig", p.sums_file())),
                "shasum": sha256_hex(bytes),
                "signing_keys": {"gpg_public_keys": [{"key_id": "72D7468F", "ascii_armor": "-----BEGIN PGP PUBLIC KEY BLOCK-----"}]},
            });
            let path = format!(
                "/v1/providers/{}/{}/{}/download/{os}/{arch}",
                p.ns, p.ty, p.version
            );
            put_json(registry, &path, &download);
        }
    }
}

/// The download host's files of `providers` (`tamper`: archives served
/// with other bytes).
fn download_host(files: &MirrorServer, providers: &[&Provider], tamper: bool) {
    for p in providers {
        for (os, arch, bytes) in &p.archives {
            let bytes = if tamper {
                tampered(bytes)
            } else {
                bytes.clone()
            };
            files.put(&format!("{}/{}", p.dir(), p.zip(os, arch)), bytes);
        }
        files.put(&p.sums_file(), p.sums());
        files.put(&format!("{}.72D7468F.sig", p.sums_file()), signature(p));
    }
}

fn signature(p: &Provider) -> Vec<u8> {
    format!("binary signature of {} {}", p.ty, p.version).into_bytes()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .user_agent("OpenTofu/1.10.0")
        .build()
        .unwrap()
}

/// A GET as `tofu` sends it; the body of a 200, else a panic naming the URL.
async fn tofu_get(client: &reqwest::Client, url: &Url) -> (Url, Option<String>, Vec<u8>) {
    let response = client
        .get(url.clone())
        .header("X-Terraform-Version", "1.10.0")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{url}");
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string());
    let final_url = response.url().clone();
    (
        final_url,
        content_type,
        response.bytes().await.unwrap().to_vec(),
    )
}

/// `tofu init` installing `host/ns/ty` `version` for `platform` from the
/// network mirror at `mirror` (`HTTPMirrorSource`): the archive's bytes,
/// checked against the `zh:` hashes.
async fn tofu_from_mirror(mirror: &str, p: &Provider, host: &str, platform: &str) -> Vec<u8> {
    let client = client();
    let base = Url::parse(&format!("{}/", mirror.trim_end_matches('/'))).unwrap();
    let index = base
        .join(&format!("{host}/{}/{}/index.json", p.ns, p.ty))
        .unwrap();
    let (_, content_type, body) = tofu_get(&client, &index).await;
    assert_eq!(content_type.as_deref(), Some("application/json"), "{index}");
    let versions: Value = serde_json::from_slice(&body).unwrap();
    assert!(versions["versions"].get(p.version).is_some(), "{versions}");
    let meta = base
        .join(&format!("{host}/{}/{}/{}.json", p.ns, p.ty, p.version))
        .unwrap();
    let (final_url, content_type, body) = tofu_get(&client, &meta).await;
    assert_eq!(content_type.as_deref(), Some("application/json"), "{meta}");
    let archives: Value = serde_json::from_slice(&body).unwrap();
    let archive = &archives["archives"][platform];
    let url = final_url.join(archive["url"].as_str().unwrap()).unwrap();
    let (_, _, bytes) = tofu_get(&client, &url).await;
    let hashes: Vec<&str> = archive["hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    let zh = format!("zh:{}", sha256_hex(&bytes));
    assert!(hashes.contains(&zh.as_str()), "{hashes:?} lacks {zh}");
    bytes
}

/// `tofu init` installing `ns/ty` `version` for `os`/`arch` from the
/// registry whose services document is at `services` (`RegistrySource`):
/// the archive and the signature, every check `registryClient.PackageMeta`
/// sets up made but the signature's.
async fn tofu_from_registry(
    services: &str,
    p: &Provider,
    os: &str,
    arch: &str,
) -> (Vec<u8>, Vec<u8>) {
    let client = client();
    let services = Url::parse(services).unwrap();
    let (_, _, body) = tofu_get(&client, &services).await;
    let discovered: Value = serde_json::from_slice(&body).unwrap();
    let providers = services
        .join(discovered["providers.v1"].as_str().unwrap())
        .unwrap();
    let versions = providers
        .join(&format!("{}/{}/versions", p.ns, p.ty))
        .unwrap();
    let (_, _, body) = tofu_get(&client, &versions).await;
    let versions: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        versions["versions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["version"] == p.version),
        "{versions}"
    );
    let download = providers
        .join(&format!(
            "{}/{}/{}/download/{os}/{arch}",
            p.ns, p.ty, p.version
        ))
        .unwrap();
    let (final_url, _, body) = tofu_get(&client, &download).await;
    let meta: Value = serde_json::from_slice(&body).unwrap();
    let field = |name: &str| final_url.join(meta[name].as_str().unwrap()).unwrap();
    let (_, _, sums) = tofu_get(&client, &field("shasums_url")).await;
    let (_, _, signature) = tofu_get(&client, &field("shasums_signature_url")).await;
    let (_, _, archive) = tofu_get(&client, &field("download_url")).await;
    let shasum = meta["shasum"].as_str().unwrap();
    assert_eq!(sha256_hex(&archive), shasum);
    let line = format!("{shasum}  {}", meta["filename"].as_str().unwrap());
    assert!(String::from_utf8(sums).unwrap().lines().any(|l| l == line));
    (archive, signature)
}

fn remote(mirrors: &[&MirrorServer], files: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"tf\"\nkind = \"terraform\"\nmirrors = {}\nfiles = {}\nstrategy = \"single\"\n{extra}",
        crate::support::toml_urls(mirrors, ""),
        crate::support::toml_urls(files, ""),
    )
}

fn null_provider() -> Provider {
    Provider {
        ns: "hashicorp",
        ty: "null",
        version: "3.2.0",
        archives: vec![
            ("linux", "amd64", test_bytes(20_000, 61)),
            ("darwin", "arm64", test_bytes(21_000, 62)),
        ],
    }
}

/// A Terraform-like registry and its download host with the null provider
/// listed (its files not yet put).
async fn null_registry() -> (MirrorServer, MirrorServer, Provider) {
    let (terraform, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let null = null_provider();
    let services = json!({"providers.v1": "/v1/providers/"});
    registry(&terraform, &files, services, &[&null]);
    (terraform, files, null)
}

#[tokio::test]
async fn tofu_installs_from_the_mirror_and_the_registry_then_with_every_origin_stopped() {
    let (terraform, opentofu, files, copy) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    let null = null_provider();
    let only = Provider {
        ns: "opentofu",
        ty: "only",
        version: "1.0.0",
        archives: vec![("linux", "amd64", test_bytes(15_000, 63))],
    };
    let module = test_bytes(12_000, 64);
    registry(
        &terraform,
        &files,
        json!({"modules.v1": "/v1/modules/", "providers.v1": "/v1/providers/"}),
        &[&null],
    );
    registry(
        &opentofu,
        &files,
        json!({"modules.v1": opentofu.url("/v1/modules/"), "providers.v1": opentofu.url("/v1/providers/")}),
        &[&null, &only],
    );
    terraform.put(
        "/v1/modules/acme/network/aws/1.0.0/download",
        files.url("/modules/network-1.0.0.tar.gz"),
    );
    // The first download host serves the null provider tampered; its copy
    // has the right bytes.
    download_host(&files, &[&null], true);
    download_host(&files, &[&only], false);
    download_host(&copy, &[&null, &only], false);
    files.put("/modules/network-1.0.0.tar.gz", module.clone());
    let proxy = TestProxy::start(&remote(&[&terraform, &opentofu], &[&files, &copy], "")).await;
    let mirror = proxy.url("/tf/");
    let services = proxy.url("/tf/.well-known/terraform.json");

    let install = async || {
        let linux = tofu_from_mirror(&mirror, &null, "registry.terraform.io", "linux_amd64").await;
        let only_linux =
            tofu_from_mirror(&mirror, &only, "registry.opentofu.org", "linux_amd64").await;
        let (darwin, signature) = tofu_from_registry(&services, &null, "darwin", "arm64").await;
        let location =
            module_location(&proxy.url("/tf/v1/modules/acme/network/aws/1.0.0/download")).await;
        let (_, _, module) = tofu_get(&client(), &Url::parse(&location).unwrap()).await;
        [linux, only_linux, darwin, signature, module]
    };
    let cold = install().await;
    let expected = [
        null.archives[0].2.clone(),
        only.archives[0].2.clone(),
        null.archives[1].2.clone(),
        signature(&null),
        module.clone(),
    ];
    for (got, want) in cold.iter().zip(&expected) {
        assert_eq!(sha256_hex(got), sha256_hex(want));
    }
    // The tampered archive was refused against the registry's `shasum`
    // and the copy asked; the other came from the first host.
    let linux_zip = format!("{}/{}", null.dir(), null.zip("linux", "amd64"));
    assert_eq!((files.hits(&linux_zip), copy.hits(&linux_zip)), (1, 1));
    let darwin_zip = format!("{}/{}", null.dir(), null.zip("darwin", "arm64"));
    assert_eq!((files.hits(&darwin_zip), copy.hits(&darwin_zip)), (1, 1));
    // The provider only the second registry has: asked of the first, then
    // it, once for `index.json` and once for `{version}.json` (each is kept
    // as the version list it is made from).
    let only_versions = "/v1/providers/opentofu/only/versions";
    assert_eq!(
        (terraform.hits(only_versions), opentofu.hits(only_versions)),
        (2, 2)
    );
    let null_versions = "/v1/providers/hashicorp/null/versions";
    assert_eq!(
        (terraform.hits(null_versions), opentofu.hits(null_versions)),
        (3, 0)
    );
    proxy.settle().await;
    let origins = [&terraform, &opentofu, &files, &copy];
    let before: usize = origins.iter().map(|m| m.total()).sum();

    // Every origin stopped: the same requests, from the cache alone.
    for origin in origins {
        origin.stop();
    }
    let offline = install().await;
    for (got, want) in offline.iter().zip(&expected) {
        assert_eq!(sha256_hex(got), sha256_hex(want));
    }
    let after: usize = origins.iter().map(|m| m.total()).sum();
    assert_eq!(after, before, "no request reached an origin");
    println!("terraform: {before} upstream requests cold, 0 with every origin stopped");
    proxy.stop().await;
}

/// `Client.ModulePackageLocation`: the location from `X-Terraform-Get`,
/// the body (if any) being JSON without a `location`.
async fn module_location(url: &str) -> String {
    let response = client()
        .get(url)
        .header("X-Terraform-Version", "1.10.0")
        .send()
        .await
        .unwrap();
    assert!([200, 204].contains(&response.status().as_u16()), "{url}");
    let location = response.headers()["x-terraform-get"]
        .to_str()
        .unwrap()
        .to_string();
    let body = response.bytes().await.unwrap();
    if !body.is_empty() {
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert!(body.get("location").is_none(), "{body}");
    }
    location
}

/// `deny` by a Terraform constraint: the version lists (the registry's and
/// the mirror's `index.json`) lose the version, its `{version}.json` and
/// download answers are 403 with the reason in the status line, without a
/// request upstream; a hostname the remote does not serve is 404 and asks
/// nothing; `check` refuses `min_release_age` (the protocol has no publish
/// times) and `hostnames` on another kind.
#[tokio::test]
async fn a_refused_version_is_403_with_the_reason_and_other_hostnames_are_404() {
    let (terraform, files, _) = null_registry().await;
    let extra =
        "deny = [\"hashicorp/null@>= 3.2, < 4\"]\nhostnames = [\"registry.terraform.io\"]\n";
    let config = remote(&[&terraform], &[&files], extra);
    crate::support::binary::assert_check_passes(&config);
    let proxy = TestProxy::start(&config).await;
    let client = reqwest::Client::new();
    for path in [
        "/tf/registry.terraform.io/hashicorp/null/index.json",
        "/tf/v1/providers/hashicorp/null/versions",
    ] {
        let (status, _, body) = get(&client, &proxy.url(path)).await;
        assert_eq!(status, 200);
        let body = String::from_utf8(body.unwrap().to_vec()).unwrap();
        assert!(
            body.contains("\"0.9.0\"") && !body.contains("\"3.2.0\""),
            "{body}"
        );
    }
    let reason = "hashicorp/null@3.2.0 is refused by this proxy: it matches the deny rule";
    for path in [
        "/tf/registry.terraform.io/hashicorp/null/3.2.0.json",
        "/tf/v1/providers/hashicorp/null/3.2.0/download/linux/amd64",
    ] {
        assert_refused_in_status_line(&proxy.base, path, reason).await;
    }
    assert_eq!(
        terraform.hits("/v1/providers/hashicorp/null/3.2.0/download/linux/amd64"),
        0
    );
    let asked = terraform.total();
    for path in [
        "/tf/registry.opentofu.org/hashicorp/null/index.json",
        "/tf/example.com/hashicorp/null/3.2.0.json",
    ] {
        let line = status_line(&proxy.base, path).await;
        assert!(line.starts_with("HTTP/1.1 404"), "{path}: {line}");
    }
    assert_eq!(
        terraform.total(),
        asked,
        "an unserved hostname asks nothing"
    );
    proxy.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let cooldown = remote(&[&terraform], &[&files], "min_release_age = \"7d\"\n");
    let output = crate::support::binary::check(&config_text(dir.path(), &cooldown));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && said.contains("min_release_age"),
        "{said}"
    );
    let helm = format!(
        "[[remote]]\nname = \"c\"\nkind = \"helm\"\nmirrors = [\"{}\"]\nhostnames = [\"registry.terraform.io\"]\n",
        files.url("")
    );
    let output = crate::support::binary::check(&config_text(dir.path(), &helm));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && said.contains("hostnames"),
        "{said}"
    );
}

/// A 60 MB provider archive through the real binary by the mirror
/// protocol, checked against the registry's `shasum` on the way: the
/// bytes, one upstream request for two installs, and the proxy's peak RSS
/// printed (and bounded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sixty_megabyte_provider_goes_through_the_real_binary_in_bounded_memory() {
    let (terraform, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let big = Provider {
        ns: "hashicorp",
        ty: "aws",
        version: "6.0.0",
        archives: vec![("linux", "amd64", test_bytes(60_000_000, 65))],
    };
    registry(
        &terraform,
        &files,
        json!({"providers.v1": "/v1/providers/"}),
        &[&big],
    );
    download_host(&files, &[&big], false);
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote(&[&terraform], &[&files], ""));
    let proxy = BinaryProxy::start(dir.path(), &text).await;
    let mirror = proxy.url("/tf/");
    let want = sha256_hex(&big.archives[0].2);
    for _ in 0..2 {
        let got = tofu_from_mirror(&mirror, &big, "registry.terraform.io", "linux_amd64").await;
        assert_eq!(sha256_hex(&got), want);
    }
    let zip = format!("{}/{}", big.dir(), big.zip("linux", "amd64"));
    assert_eq!(files.hits(&zip), 1);
    let rss_mib = peak_rss_kib(proxy.pid()) / 1024;
    println!(
        "terraform provider of 60 MB through the proxy: upstream requests {}, proxy peak RSS {rss_mib} MiB",
        terraform.total() + files.total()
    );
    assert!(rss_mib < 200, "proxy peak RSS {rss_mib} MiB");
}

/// `warm` reads a `.terraform.lock.hcl`: each provider's `{version}.json`
/// on the remote, then the archives whose `zh:` hash the block lists (here
/// one of two platforms), each checked against it.
#[tokio::test]
async fn warm_fetches_the_archives_a_terraform_lock_names() {
    let (terraform, files, null) = null_registry().await;
    download_host(&files, &[&null], false);
    let dir = tempfile::tempdir().unwrap();
    let proxy = TestProxy::start_in(dir.path(), &remote(&[&terraform], &[&files], "")).await;
    let lock = dir.path().join(".terraform.lock.hcl");
    std::fs::write(
        &lock,
        format!(
            "# This file is maintained automatically by \"tofu init\".\n\nprovider \"registry.opentofu.org/hashicorp/null\" {{\n  version     = \"3.2.0\"\n  constraints = \"~> 3.0\"\n  hashes = [\n    \"h1:aGVsbG8=\",\n    \"zh:{}\",\n  ]\n}}\n",
            sha256_hex(&null.archives[0].2)
        ),
    )
    .unwrap();
    let summary = crate::support::proxy::warm(&proxy.base, "tf", lock).await;
    assert_eq!((summary.fetched, summary.cached), (1, 0), "{summary}");
    assert!(summary.failed.is_empty(), "{summary}");
    let linux_zip = format!("{}/{}", null.dir(), null.zip("linux", "amd64"));
    let darwin_zip = format!("{}/{}", null.dir(), null.zip("darwin", "arm64"));
    assert_eq!((files.hits(&linux_zip), files.hits(&darwin_zip)), (1, 0));
    proxy.stop().await;
}
