//! The `helm` kind against two fixture chart repositories and a download
//! host (the remote's `files`), with Helm's requests imitated one by one:
//! the chart URLs of `index.yaml` rewritten (relative ones left to resolve
//! against the proxy), a tampered chart refused against the index's
//! `digest` and the next mirror used, provenance passed through, the same
//! requests answered with every origin stopped, versions filtered by
//! `deny` and by `created` under a cooldown with the reason in the status
//! line, and a 31 MB index through the real binary with its peak RSS.

use std::time::{Duration, SystemTime};

use crate::fanout::peak_rss_kib;
use crate::guard::assert_refused_in_status_line;
use crate::support::proxy::{config_text, get};
use crate::support::{sha256_hex, tampered, test_bytes, BinaryProxy, MirrorServer, TestProxy};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn ago(ago: Duration) -> String {
    humantime::format_rfc3339_millis(SystemTime::now() - ago).to_string()
}

/// One chart version's record as `helm repo index` writes it.
fn record(name: &str, version: &str, created: &str, digest: &str, url: &str) -> String {
    format!(
        "  - apiVersion: v2\n    created: \"{created}\"\n    description: The {name} chart, a description long enough that go-yaml\n      folds it onto a second line\n    digest: {digest}\n    name: {name}\n    urls:\n    - {url}\n    version: {version}\n"
    )
}

/// The first URL an index gives for `chart` `version`, as Helm's
/// `IndexFile.Get` and `ResolveReferenceURL` find it: relative URLs
/// resolved against the repository URL.
fn chart_url(index: &str, repo: &str, chart: &str, version: &str) -> String {
    let records = index.split("\n  - ").skip(1);
    let record = records
        .filter(|r| r.contains(&format!("\n    name: {chart}\n")))
        .find(|r| r.contains(&format!("\n    version: {version}\n")))
        .unwrap_or_else(|| panic!("{chart} {version} not in the index"));
    let url = record.split("\n    urls:\n    - ").nth(1).unwrap();
    let url = url.lines().next().unwrap();
    if url.starts_with("http") {
        url.to_string()
    } else {
        format!("{}/{url}", repo.trim_end_matches('/'))
    }
}

/// Helm 4's requests for `helm repo add` (or `repo update`) and `helm pull
/// <repo>/<chart> --version <v> --verify`: `index.yaml` at the repository
/// URL (`pkg/repo/v1/chartrepo.go`, `DownloadIndexFile`), the chart at its
/// first URL resolved against the repository URL (`FindChartInRepoURL`,
/// `ResolveReferenceURL`), then the same URL with `.prov` appended
/// (`pkg/downloader/chart_downloader.go`, `DownloadTo`), with Helm's
/// `User-Agent` and, for the chart, its `Accept`
/// (`pkg/getter/httpgetter.go`). Returns the index and the chart's bytes
/// and provenance, each checked for status 200.
async fn helm_pull(repo: &str, chart: &str, version: &str) -> (String, Vec<u8>, Vec<u8>) {
    let client = reqwest::Client::builder()
        .user_agent("Helm/4.0.0")
        .build()
        .unwrap();
    let fetch = async |url: String, accept: Option<&str>| {
        let mut request = client.get(&url);
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{url}");
        response.bytes().await.unwrap().to_vec()
    };
    let index = fetch(format!("{repo}/index.yaml"), None).await;
    let index = String::from_utf8(index).unwrap();
    let url = chart_url(&index, repo, chart, version);
    let accept = Some("application/gzip,application/octet-stream");
    let chart = fetch(url.clone(), accept).await;
    let prov = fetch(format!("{url}.prov"), accept).await;
    (index, chart, prov)
}

fn remote(mirrors: &[&MirrorServer], files: &MirrorServer, extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"charts\"\nkind = \"helm\"\nmirrors = {}\nfiles = [\"{}\"]\nstrategy = \"single\"\n{extra}",
        crate::support::toml_urls(mirrors, "/repo"),
        files.url("/dl")
    )
}

#[tokio::test]
async fn helm_pulls_past_a_tampered_chart_then_with_every_origin_stopped() {
    let (tampering, good, files) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    let (alpine, nginx) = (test_bytes(20_000, 48), test_bytes(30_000, 49));
    let (alpine_prov, nginx_prov) = (
        b"-----BEGIN PGP SIGNED MESSAGE-----\nalpine\n",
        b"-----BEGIN PGP SIGNED MESSAGE-----\nnginx\n",
    );
    let index = format!(
        "apiVersion: v1\nentries:\n  alpine:\n{}  nginx:\n{}generated: \"{}\"\n",
        record(
            "alpine",
            "0.2.0",
            &ago(30 * DAY),
            &sha256_hex(&alpine),
            "charts/alpine-0.2.0.tgz"
        ),
        record(
            "nginx",
            "1.2.0",
            &ago(30 * DAY),
            &sha256_hex(&nginx),
            &files.url("/dl/nginx-1.2.0.tgz")
        ),
        ago(DAY)
    );
    for mirror in [&tampering, &good] {
        mirror.put("/repo/index.yaml", index.clone());
        mirror.put("/repo/charts/alpine-0.2.0.tgz.prov", &alpine_prov[..]);
    }
    tampering.put("/repo/charts/alpine-0.2.0.tgz", tampered(&alpine));
    good.put("/repo/charts/alpine-0.2.0.tgz", alpine.clone());
    files.put("/dl/nginx-1.2.0.tgz", nginx.clone());
    files.put("/dl/nginx-1.2.0.tgz.prov", &nginx_prov[..]);
    let proxy = TestProxy::start(&remote(&[&tampering, &good], &files, "")).await;
    let repo = proxy.url("/charts");

    // Cold: the relative URL stays relative (Helm resolves it against the
    // proxy), the download host's is under `~files/`.
    let (served, chart, prov) = helm_pull(&repo, "alpine", "0.2.0").await;
    assert!(
        served.contains("    - charts/alpine-0.2.0.tgz\n"),
        "{served}"
    );
    assert!(
        served.contains(&format!("    - {repo}/~files/nginx-1.2.0.tgz\n")),
        "{served}"
    );
    assert_eq!(sha256_hex(&chart), sha256_hex(&alpine));
    assert_eq!(prov, alpine_prov);
    assert_eq!(tampering.hits("/repo/charts/alpine-0.2.0.tgz"), 1);
    assert_eq!(good.hits("/repo/charts/alpine-0.2.0.tgz"), 1);
    let (_, chart, prov) = helm_pull(&repo, "nginx", "1.2.0").await;
    assert_eq!(sha256_hex(&chart), sha256_hex(&nginx));
    assert_eq!(prov, nginx_prov);
    proxy.settle().await;
    let cold: usize = [&tampering, &good, &files].iter().map(|m| m.total()).sum();
    // index.yaml once; alpine from both mirrors, its .prov once; nginx and
    // its .prov once.
    assert_eq!(cold, 6, "{:?} {:?}", tampering.requests(), good.requests());

    // Every origin stopped: the same requests, from the cache alone.
    for mirror in [&tampering, &good, &files] {
        mirror.stop();
    }
    for (chart, version, bytes) in [("alpine", "0.2.0", &alpine), ("nginx", "1.2.0", &nginx)] {
        let (again, got, _) = helm_pull(&repo, chart, version).await;
        assert_eq!(again, served);
        assert_eq!(sha256_hex(&got), sha256_hex(bytes));
    }
    let after: usize = [&tampering, &good, &files].iter().map(|m| m.total()).sum();
    assert_eq!(after, cold, "no request reached an origin");
    proxy.stop().await;
}

/// `deny` by a Helm constraint and a cooldown by each version's `created`
/// (one written with a UTC offset, as Helm writes local times): the index
/// loses the refused versions' records, and a refused chart is 403 with
/// the reason in the status line (Helm prints `failed to fetch … : <status>`)
/// without a request upstream.
#[tokio::test]
async fn refused_versions_leave_the_index_and_their_charts_are_403_with_the_reason() {
    let (repo, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let old = humantime::format_rfc3339_seconds(
        SystemTime::now() - 30 * DAY + 6 * 3600 * Duration::from_secs(1),
    )
    .to_string()
    .replace('Z', "+06:00");
    let digest = sha256_hex(b"x");
    let index = format!(
        "apiVersion: v1\nentries:\n  alpine:\n{}{}  nginx:\n{}{}generated: \"{}\"\n",
        record(
            "alpine",
            "0.2.0",
            &ago(DAY),
            &digest,
            "charts/alpine-0.2.0.tgz"
        ),
        record("alpine", "0.1.0", &old, &digest, "charts/alpine-0.1.0.tgz"),
        record(
            "nginx",
            "1.2.0",
            &ago(30 * DAY),
            &digest,
            "charts/nginx-1.2.0.tgz"
        ),
        record(
            "nginx",
            "1.0.0",
            &ago(60 * DAY),
            &digest,
            "charts/nginx-1.0.0.tgz"
        ),
        ago(DAY)
    );
    repo.put("/repo/index.yaml", index);
    let extra = "deny = [\"nginx@>= 1.0, < 1.1\"]\nmin_release_age = \"7d\"\n";
    let config = remote(&[&repo], &files, extra);
    crate::support::binary::assert_check_passes(&config);
    let proxy = TestProxy::start(&config).await;
    let client = reqwest::Client::new();
    let (status, _, body) = get(&client, &proxy.url("/charts/index.yaml")).await;
    assert_eq!(status, 200);
    let served = String::from_utf8(body.unwrap().to_vec()).unwrap();
    assert!(
        !served.contains("version: 0.2.0") && served.contains("version: 0.1.0"),
        "{served}"
    );
    assert!(
        !served.contains("version: 1.0.0") && served.contains("version: 1.2.0"),
        "{served}"
    );

    assert_refused_in_status_line(
        &proxy.base,
        "/charts/charts/alpine-0.2.0.tgz",
        "alpine@0.2.0 was published 1day ago",
    )
    .await;
    assert_refused_in_status_line(
        &proxy.base,
        "/charts/charts/nginx-1.0.0.tgz",
        "nginx@1.0.0 is refused by this proxy: it matches the deny rule",
    )
    .await;
    assert_eq!(repo.hits("/repo/charts/alpine-0.2.0.tgz"), 0);
    assert_eq!(repo.hits("/repo/charts/nginx-1.0.0.tgz"), 0);
    proxy.stop().await;
}

/// A 31 MB `index.yaml` (3,000 charts of 30 versions) through the real
/// binary, rewritten and filtered: one upstream request for two clients,
/// the bytes as expected, a chart checked against a digest learned from
/// it, and the proxy's peak RSS printed (and bounded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twenty_megabyte_index_is_rewritten_filtered_and_learned_in_the_real_binary() {
    let (repo, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let chart = test_bytes(10_000, 50);
    let created = ago(60 * DAY);
    let mut index = String::from("apiVersion: v1\nentries:\n");
    for c in 0..3_000 {
        index.push_str(&format!("  chart-{c:04}:\n"));
        for v in 0..30 {
            let digest = if (c, v) == (7, 3) {
                sha256_hex(&chart)
            } else {
                format!("{:064x}", c * 100 + v)
            };
            let url = repo.url(&format!("/repo/chart-{c:04}-1.{v}.0.tgz"));
            index.push_str(&record(
                &format!("chart-{c:04}"),
                &format!("1.{v}.0"),
                &created,
                &digest,
                &url,
            ));
        }
    }
    index.push_str("generated: \"2024-01-05T10:00:00Z\"\n");
    assert!(index.len() > 20_000_000, "{}", index.len());
    repo.put("/repo/index.yaml", index.clone());
    repo.put("/repo/chart-0007-1.3.0.tgz", tampered(&chart));
    let dir = tempfile::tempdir().unwrap();
    let extra = "deny = [\"chart-0001@1.0.0\"]\n";
    let text = config_text(dir.path(), &remote(&[&repo], &files, extra));
    let proxy = BinaryProxy::start(dir.path(), &text).await;
    let client = reqwest::Client::new();
    let base = proxy.url("/charts");
    let expected = index.replace(&repo.url("/repo"), &base);
    let removed = record(
        "chart-0001",
        "1.0.0",
        &created,
        &format!("{:064x}", 100),
        &format!("{base}/chart-0001-1.0.0.tgz"),
    );
    let expected = expected.replacen(&removed, "", 1);
    for _ in 0..2 {
        let (status, _, body) = get(&client, &format!("{base}/index.yaml")).await;
        assert_eq!(status, 200);
        assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(expected.as_bytes()));
    }
    assert_eq!(repo.hits("/repo/index.yaml"), 1);
    // The learned digest refuses the only mirror's tampered chart.
    let (status, _, _) = get(&client, &format!("{base}/chart-0007-1.3.0.tgz")).await;
    assert_eq!(status, 502);
    let rss_mib = peak_rss_kib(proxy.pid()) / 1024;
    println!(
        "helm index of {} MB through the proxy: upstream requests {}, proxy peak RSS {rss_mib} MiB",
        index.len() / 1_000_000,
        repo.total()
    );
    assert!(rss_mib < 400, "proxy peak RSS {rss_mib} MiB");
}

/// `warm` reads a `Chart.lock`: each dependency on an HTTP repository is
/// found in the remote's `index.yaml` as the proxy serves it (a relative
/// URL and one on the download host) and fetched, checked against the
/// record's `digest`; an `oci://` dependency is left to an oci remote.
#[tokio::test]
async fn warm_fetches_the_charts_a_chart_lock_names() {
    let (repo, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let (alpine, nginx) = (test_bytes(3_000, 51), test_bytes(3_000, 52));
    let created = ago(30 * DAY);
    let index = format!(
        "apiVersion: v1\nentries:\n  alpine:\n{}  nginx:\n{}",
        record(
            "alpine",
            "0.2.0",
            &created,
            &sha256_hex(&alpine),
            "charts/alpine-0.2.0.tgz"
        ),
        record(
            "nginx",
            "1.2.0",
            &created,
            &sha256_hex(&nginx),
            &files.url("/dl/nginx-1.2.0.tgz")
        ),
    );
    repo.put("/repo/index.yaml", index);
    repo.put("/repo/charts/alpine-0.2.0.tgz", alpine);
    files.put("/dl/nginx-1.2.0.tgz", nginx);
    let dir = tempfile::tempdir().unwrap();
    let proxy = TestProxy::start_in(dir.path(), &remote(&[&repo], &files, "")).await;
    let lock = dir.path().join("Chart.lock");
    let repository = repo.url("/repo");
    std::fs::write(
        &lock,
        format!("dependencies:\n- name: alpine\n  repository: {repository}\n  version: 0.2.0\n- name: nginx\n  repository: {repository}\n  version: 1.2.0\n- name: redis\n  repository: oci://registry.example/charts\n  version: 18.0.0\ndigest: sha256:0\ngenerated: \"2024-01-01T00:00:00Z\"\n"),
    )
    .unwrap();
    let summary = crate::support::proxy::warm(&proxy.base, "charts", lock).await;
    assert_eq!((summary.fetched, summary.cached), (2, 0), "{summary}");
    assert!(summary.failed.is_empty(), "{summary}");
    assert_eq!(repo.hits("/repo/charts/alpine-0.2.0.tgz"), 1);
    assert_eq!(files.hits("/dl/nginx-1.2.0.tgz"), 1);
    proxy.stop().await;
}
