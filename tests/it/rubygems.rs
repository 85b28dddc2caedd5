//! The `rubygems` kind (issue 25) against a fixture gem server on
//! 127.0.0.1: path classes (immutable `.gem`s, revalidated compact index),
//! the root answered for gem's probe, Bundler's MD5 ETag and its append by
//! `Range` cut from the whole current file, and `info/<gem>`'s `checksum:`
//! as the declared digest that refuses a tampered first mirror; `deny`
//! with a RubyGems requirement filtering `info/<gem>`, its MD5 ETag and
//! ranges following the filtered file, and `versions` restated to match
//! (deny, a gem denied whole, a cooldown), publish times from the versions
//! API when `info` has none; `warm` reading a `Gemfile.lock`.

use md5::Digest as _;

use crate::support::proxy::{get, warm_fetches_all};
use crate::support::{sha256_hex, tampered, test_bytes, toml_urls, MirrorServer, TestProxy};

fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"gems\"\nkind = \"rubygems\"\nmirrors = {}\nstrategy = \"single\"\n{extra}\n",
        toml_urls(mirrors, "/r")
    )
}

fn md5_tag(bytes: &[u8]) -> String {
    format!("\"{}\"", hex::encode(md5::Md5::digest(bytes)))
}

fn info(versions: &[(&str, &[u8])]) -> String {
    let mut out = String::from("---\n");
    for (version, gem) in versions {
        out.push_str(&format!(
            "{version} |checksum:{},ruby:>= 0\n",
            sha256_hex(gem)
        ));
    }
    out
}

/// A plain GET of `path` answers `expected` whole, its ETag the quoted MD5;
/// then waits for the fill to be committed.
async fn assert_whole(client: &reqwest::Client, proxy: &TestProxy, path: &str, expected: &str) {
    let response = client.get(proxy.url(path)).send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let etag = response.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(etag, md5_tag(expected.as_bytes()), "{path}");
    assert_eq!(response.text().await.unwrap(), expected, "{path}");
    proxy.settle().await;
}

/// `Range: bytes=<from>-` of `path` is a 206 cut from `whole`, with the
/// whole file's MD5 as its ETag.
async fn assert_range_cut(
    client: &reqwest::Client,
    proxy: &TestProxy,
    path: &str,
    whole: &str,
    from: usize,
) {
    let response = client
        .get(proxy.url(path))
        .header("range", format!("bytes={from}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 206, "{path}");
    assert_eq!(
        response.headers()["etag"],
        md5_tag(whole.as_bytes()).as_str()
    );
    assert_eq!(response.text().await.unwrap(), &whole[from..]);
}

/// Bundler's request for what follows its copy `local` of `versions`.
async fn bundler_append(
    client: &reqwest::Client,
    proxy: &TestProxy,
    local: &str,
) -> reqwest::Response {
    client
        .get(proxy.url("/gems/versions"))
        .header("if-none-match", md5_tag(local.as_bytes()))
        .header("range", format!("bytes={}-", local.len() - 1))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_root_answers_and_the_compact_index_has_bundlers_etag_and_ranges() {
    let mirror = MirrorServer::start().await;
    let gem = test_bytes(4_000, 3);
    let first = info(&[("1.0.0", &gem)]);
    mirror.put("/r/info/mc-alpha", first.clone());
    let versions = format!(
        "created_at: 2024-01-01T00:00:00Z\n---\nmc-alpha 1.0.0 {}\n",
        hex::encode(md5::Md5::digest(first.as_bytes()))
    );
    mirror.put("/r/versions", versions.clone());
    mirror.put("/r/gems/mc-alpha-1.0.0.gem", gem.clone());
    let proxy = TestProxy::start(&remote(&[&mirror], "revalidate_after = \"0s\"")).await;
    let client = reqwest::Client::new();

    // gem 3.3's probe: answered by the proxy, upstream not asked.
    for path in ["/gems/", "/gems"] {
        let response = client.head(proxy.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    assert_eq!(mirror.total(), 0);

    // The whole file: ETag is the quoted MD5 of it.
    assert_whole(&client, &proxy, "/gems/versions", &versions).await;

    // Bundler's revalidation: If-None-Match its MD5 → 304.
    let response = bundler_append(&client, &proxy, &versions).await;
    assert_eq!(response.status(), 304);
    proxy.settle().await;

    // The fixture appends a version; Bundler asks from its last byte and
    // checks the MD5 of what it then has against the 206's ETag.
    let gem2 = test_bytes(4_000, 4);
    let second = info(&[("1.0.0", &gem), ("1.1.0", &gem2)]);
    mirror.put("/r/info/mc-alpha", second.clone());
    let appended = format!(
        "{versions}mc-alpha 1.1.0 {}\n",
        hex::encode(md5::Md5::digest(second.as_bytes()))
    );
    mirror.put("/r/versions", appended.clone());
    let response = bundler_append(&client, &proxy, &versions).await;
    assert_eq!(response.status(), 206);
    assert_eq!(
        response.headers()["etag"],
        md5_tag(appended.as_bytes()).as_str()
    );
    assert_eq!(
        response.headers()["content-range"],
        format!(
            "bytes {}-{}/{}",
            versions.len() - 1,
            appended.len() - 1,
            appended.len()
        )
        .as_str()
    );
    let tail = response.bytes().await.unwrap();
    let mut local = versions.clone().into_bytes();
    local.extend_from_slice(&tail[1..]);
    assert_eq!(md5_tag(&local), md5_tag(appended.as_bytes()));

    // `.gem`s are immutable and keep the sha256 ETag; not revalidated.
    let (status, _, body) = get(&client, &proxy.url("/gems/gems/mc-alpha-1.0.0.gem")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&gem));
    proxy.settle().await;
    let (status, cache, _) = get(&client, &proxy.url("/gems/gems/mc-alpha-1.0.0.gem")).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(mirror.hits("/r/gems/mc-alpha-1.0.0.gem"), 1);
    let response = client
        .get(proxy.url("/gems/gems/mc-alpha-1.0.0.gem"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["etag"],
        format!("\"{}\"", sha256_hex(&gem)).as_str()
    );
}

#[tokio::test]
async fn a_tampered_first_mirror_is_refused_by_the_info_checksum() {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    let gem = test_bytes(20_000, 5);
    let document = info(&[("1.0.0", &gem)]);
    for mirror in [&a, &b] {
        mirror.put("/r/info/mc-alpha", document.clone());
    }
    a.put("/r/gems/mc-alpha-1.0.0.gem", tampered(&gem));
    b.put("/r/gems/mc-alpha-1.0.0.gem", gem.clone());
    let proxy = TestProxy::start(&remote(&[&a, &b], "")).await;
    let client = reqwest::Client::new();

    let (status, _, _) = get(&client, &proxy.url("/gems/info/mc-alpha")).await;
    assert_eq!(status, 200);
    proxy.settle().await;
    let (status, _, body) = get(&client, &proxy.url("/gems/gems/mc-alpha-1.0.0.gem")).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&gem));
    assert_eq!(
        (
            a.hits("/r/gems/mc-alpha-1.0.0.gem"),
            b.hits("/r/gems/mc-alpha-1.0.0.gem")
        ),
        (1, 1)
    );
    assert_eq!(
        proxy.metric("mirrorcache_integrity_failures_total").await,
        1.0
    );
}

#[tokio::test]
async fn the_dependency_api_is_passed_through_uncached() {
    let mirror = MirrorServer::start().await;
    mirror.put("/r/api/v1/dependencies", "");
    let proxy = TestProxy::start(&remote(&[&mirror], "")).await;
    let client = reqwest::Client::new();
    for _ in 0..2 {
        let response = client
            .get(proxy.url("/gems/api/v1/dependencies?gems=rack"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-cache-status"], "PASS");
    }
    assert_eq!(mirror.hits("/r/api/v1/dependencies"), 2);
}

#[tokio::test]
async fn a_denied_version_leaves_info_and_its_md5_etag_and_ranges_follow_the_filtered_file() {
    let mirror = MirrorServer::start().await;
    let (one, two) = (test_bytes(3_000, 9), test_bytes(3_000, 10));
    mirror.put(
        "/r/info/mc-alpha",
        info(&[("1.0.0", &one), ("1.1.0", &two)]),
    );
    mirror.put("/r/gems/mc-alpha-1.1.0.gem", two.clone());
    let proxy = TestProxy::start(&remote(&[&mirror], "deny = [\"mc-alpha@~> 1.1\"]")).await;
    let client = reqwest::Client::new();

    let filtered = info(&[("1.0.0", &one)]);
    assert_whole(&client, &proxy, "/gems/info/mc-alpha", &filtered).await;

    // Bundler's append against its (filtered) copy: nothing new, 304.
    let response = client
        .get(proxy.url("/gems/info/mc-alpha"))
        .header("if-none-match", md5_tag(filtered.as_bytes()))
        .header("range", format!("bytes={}-", filtered.len() - 1))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 304);
    // Against an older copy: the range is cut from the filtered file.
    assert_range_cut(&client, &proxy, "/gems/info/mc-alpha", &filtered, 4).await;

    let (status, _, body) = get(&client, &proxy.url("/gems/gems/mc-alpha-1.1.0.gem")).await;
    assert_eq!(status, 403);
    let said = String::from_utf8_lossy(&body.unwrap()).to_string();
    assert!(
        said.contains("mc-alpha@1.1.0") && said.contains("deny"),
        "{said}"
    );
    assert_eq!(mirror.hits("/r/gems/mc-alpha-1.1.0.gem"), 0);
}

#[tokio::test]
async fn versions_lists_what_the_filtered_infos_serve_with_their_md5() {
    let mirror = MirrorServer::start().await;
    let (one, two, three) = (test_bytes(100, 1), test_bytes(100, 2), test_bytes(100, 3));
    let md5 = |text: &str| hex::encode(md5::Md5::digest(text.as_bytes()));
    let alpha = info(&[("1.0.0", &one), ("1.1.0", &two)]);
    let beta = info(&[("2.0.0", &three)]);
    // A cooled gem whose info dates its versions (`created_at:`): 0.2.0 is
    // an hour old.
    let hour_ago = humantime::format_rfc3339_seconds(
        std::time::SystemTime::now() - std::time::Duration::from_secs(3600),
    );
    let gamma = format!(
        "---\n0.1.0 |checksum:{},created_at:2020-01-01T00:00:00Z\n0.2.0 |checksum:{},created_at:{hour_ago}\n",
        sha256_hex(&one),
        sha256_hex(&two)
    );
    mirror.put("/r/info/mc-alpha", alpha.clone());
    mirror.put("/r/info/mc-beta", beta.clone());
    mirror.put("/r/info/mc-gamma", gamma.clone());
    mirror.put("/r/info/mc-denied", info(&[("1.0.0", &one)]));
    // An appended line for mc-alpha, as rubygems.org appends.
    let versions = format!(
        "created_at: 2024-01-01T00:00:00Z\n---\nmc-alpha 1.0.0 {}\nmc-beta 2.0.0 {}\nmc-denied 1.0.0 {}\nmc-gamma 0.1.0,0.2.0 {}\nmc-alpha 1.1.0 {}\n",
        md5(&info(&[("1.0.0", &one)])),
        md5(&beta),
        md5(&info(&[("1.0.0", &one)])),
        md5(&gamma),
        md5(&alpha),
    );
    mirror.put("/r/versions", versions.clone());
    let extra = "deny = [\"mc-alpha@~> 1.1\", \"mc-denied\"]\nmin_release_age = \"1d\"\ncooldown_exempt = [\"mc-alpha\", \"mc-beta\", \"mc-denied\"]";
    let proxy = TestProxy::start(&remote(&[&mirror], extra)).await;
    let client = reqwest::Client::new();

    let alpha_served = info(&[("1.0.0", &one)]);
    let gamma_served = format!(
        "---\n0.1.0 |checksum:{},created_at:2020-01-01T00:00:00Z\n",
        sha256_hex(&one)
    );
    // mc-alpha's appended line lists only a refused version: it goes, and
    // its first line carries the filtered info's MD5; mc-denied is left
    // out (its info is not read); mc-beta is as the upstream wrote it.
    let expected = format!(
        "created_at: 2024-01-01T00:00:00Z\n---\nmc-alpha 1.0.0 {}\nmc-beta 2.0.0 {}\nmc-gamma 0.1.0 {}\n",
        md5(&alpha_served),
        md5(&beta),
        md5(&gamma_served),
    );
    assert_whole(&client, &proxy, "/gems/versions", &expected).await;
    assert_eq!(mirror.hits("/r/info/mc-denied"), 0);
    assert_eq!(mirror.hits("/r/info/mc-beta"), 0);
    // Each listed MD5 is that of the info served.
    assert_whole(&client, &proxy, "/gems/info/mc-alpha", &alpha_served).await;
    assert_whole(&client, &proxy, "/gems/info/mc-gamma", &gamma_served).await;
    // Bundler's append to its filtered copy: 304, and a range is cut from
    // the whole filtered file with its MD5.
    let response = bundler_append(&client, &proxy, &expected).await;
    assert_eq!(response.status(), 304);
    assert_range_cut(&client, &proxy, "/gems/versions", &expected, 10).await;
    // The upstream's versions was fetched once.
    assert_eq!(mirror.hits("/r/versions"), 1);
}

/// rubygems.org's `info` lines carry no `created_at:`: a cooldown dates
/// them by the versions API, read through the cache, for `info`,
/// `versions` and a direct `.gem` alike; a gem the API does not know
/// passes.
#[tokio::test]
async fn a_cooldown_reads_publish_times_from_the_versions_api() {
    let mirror = MirrorServer::start().await;
    let (old, new) = (test_bytes(200, 31), test_bytes(200, 32));
    let md5 = |text: &str| hex::encode(md5::Md5::digest(text.as_bytes()));
    let full = info(&[("1.0.0", &old), ("2.0.0", &new)]);
    mirror.put("/r/info/mc-alpha", full.clone());
    let ago = |days: u64| {
        humantime::format_rfc3339_seconds(
            std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86_400),
        )
        .to_string()
    };
    let api = serde_json::json!([
        {"number": "2.0.0", "platform": "ruby", "created_at": ago(1)},
        {"number": "1.0.0", "platform": "ruby", "created_at": ago(30)}
    ]);
    mirror.put("/r/api/v1/versions/mc-alpha.json", api.to_string());
    mirror.put("/r/info/mc-unknown", info(&[("1.0.0", &old)]));
    mirror.put("/r/gems/mc-alpha-2.0.0.gem", new.clone());
    mirror.put("/r/gems/mc-unknown-1.0.0.gem", old.clone());
    let versions = format!(
        "created_at: 2024-01-01T00:00:00Z\n---\nmc-alpha 1.0.0,2.0.0 {}\n",
        md5(&full)
    );
    mirror.put("/r/versions", versions);
    let proxy = TestProxy::start(&remote(&[&mirror], "min_release_age = \"7d\"")).await;
    let client = reqwest::Client::new();

    let served = info(&[("1.0.0", &old)]);
    assert_whole(&client, &proxy, "/gems/info/mc-alpha", &served).await;
    let expected = format!(
        "created_at: 2024-01-01T00:00:00Z\n---\nmc-alpha 1.0.0 {}\n",
        md5(&served)
    );
    assert_whole(&client, &proxy, "/gems/versions", &expected).await;
    let (status, _, body) = get(&client, &proxy.url("/gems/gems/mc-alpha-2.0.0.gem")).await;
    assert_eq!(status, 403);
    let said = String::from_utf8_lossy(&body.unwrap()).to_string();
    assert!(said.contains("min_release_age"), "{said}");
    assert_eq!(mirror.hits("/r/gems/mc-alpha-2.0.0.gem"), 0);
    // The API was read once, then from the cache.
    assert_eq!(mirror.hits("/r/api/v1/versions/mc-alpha.json"), 1);
    // No versions API for this gem: its versions have no time and pass.
    let (status, _, _) = get(&client, &proxy.url("/gems/info/mc-unknown")).await;
    assert_eq!(status, 200);
    let (status, _, _) = get(&client, &proxy.url("/gems/gems/mc-unknown-1.0.0.gem")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn warm_fetches_the_gems_a_gemfile_lock_names() {
    let mirror = MirrorServer::start().await;
    let (alpha, beta) = (test_bytes(2_000, 11), test_bytes(2_000, 12));
    mirror.put("/r/gems/mc-alpha-1.0.0.gem", alpha.clone());
    mirror.put("/r/gems/mc-beta-1.0.0.gem", beta.clone());
    let proxy = TestProxy::start(&remote(&[&mirror], "")).await;
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("Gemfile.lock");
    std::fs::write(
        &lock,
        format!(
            "GEM\n  remote: {}\n  specs:\n    mc-alpha (1.0.0)\n    mc-beta (1.0.0)\n      mc-alpha (>= 1.0)\n\n\
             PLATFORMS\n  ruby\n\nDEPENDENCIES\n  mc-beta\n\nCHECKSUMS\n  mc-alpha (1.0.0) sha256={}\n",
            proxy.url("/gems/"),
            sha256_hex(&alpha)
        ),
    )
    .unwrap();
    warm_fetches_all(&proxy.url(""), "gems", vec![lock], 2).await;
    assert_eq!(mirror.hits("/r/gems/mc-beta-1.0.0.gem"), 1);
}
