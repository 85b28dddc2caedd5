//! The `huggingface` kind (issue 27) against the fixture hub and its CDN
//! (`support/hf_hub.py`): path classes (a file by commit kept, by branch
//! revalidated — for an LFS file by the redirect's `ETag`, without a CDN
//! fetch), the hub's headers on every HEAD (miss, hit, revalidated, stale)
//! and never its Xet ones, the LFS file's `X-Linked-Etag` as its declared
//! digest (a tampered CDN refused, nothing cached), API documents keyed
//! with their query and their `Link` paging re-pointed at the proxy, one
//! blob for the same weights in two repositories, the token sent to the
//! hub only, and a range of a file still being filled served from the bytes
//! already written; `warm` taking `repo[@revision]`.

use crate::support::{sha256_hex, HubFixture, TestProxy};

const WEIGHTS: &str = "org/tiny-model/model.safetensors";

async fn head(client: &reqwest::Client, url: &str) -> reqwest::Response {
    let response = client.head(url).send().await.unwrap();
    assert_eq!(response.status(), 200, "HEAD {url}");
    response
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", response.headers()))
        .to_str()
        .unwrap()
}

/// What `huggingface_hub` reads from a HEAD of an LFS file, and what it
/// must not see.
fn assert_lfs_head(response: &reqwest::Response, commit: &str, sha256: &str, size: usize) {
    assert_eq!(header(response, "x-repo-commit"), commit);
    assert_eq!(header(response, "x-linked-etag"), format!("\"{sha256}\""));
    assert_eq!(header(response, "x-linked-size"), size.to_string());
    assert_eq!(header(response, "content-length"), size.to_string());
    assert!(header(response, "etag").starts_with('"'));
    assert!(response.headers().get("location").is_none());
    for name in response.headers().keys() {
        assert!(!name.as_str().starts_with("x-xet"), "{name} sent");
    }
    assert!(
        response.headers().get("link").is_none(),
        "xet-auth link sent"
    );
}

#[tokio::test]
async fn files_by_commit_are_kept_by_branch_revalidated_and_heads_carry_the_hubs_headers() {
    let Some(mut hub) = HubFixture::start(2) else {
        return;
    };
    let proxy = TestProxy::start(&hub.remote("hf", "revalidate_after = \"0s\"")).await;
    let client = reqwest::Client::new();
    let commit = hub.commits["org/tiny-model"].clone();
    let sha = hub.files[WEIGHTS].clone();
    let by_branch = proxy.url("/hf/org/tiny-model/resolve/main/model.safetensors");

    // A cold HEAD answers as soon as the fill has a head, with the hub's headers.
    let cold = head(&client, &by_branch).await;
    assert_lfs_head(&cold, &commit, &sha, 2 << 20);
    assert_eq!(header(&cold, "x-cache-status"), "MISS");
    let hub_etag = header(&cold, "etag").to_string();
    proxy.settle().await;
    let body = client.get(&by_branch).send().await.unwrap();
    assert_eq!(
        header(&body, "etag"),
        hub_etag,
        "the same validator hit or miss"
    );
    assert_eq!(sha256_hex(&body.bytes().await.unwrap()), sha);
    assert_eq!(hub.count("cdn", "GET", &sha).await, 1);

    // By branch, past revalidate_after: the hub's redirect carries the same
    // ETag, so the CDN is not asked again.
    let again = head(&client, &by_branch).await;
    assert_eq!(header(&again, "x-cache-status"), "REVALIDATED");
    assert_lfs_head(&again, &commit, &sha, 2 << 20);
    assert_eq!(hub.count("cdn", "GET", &sha).await, 1);

    // A file in git, by commit: kept, never asked for again.
    let small = proxy.url(&format!("/hf/org/tiny-model/resolve/{commit}/config.json"));
    let first = head(&client, &small).await;
    assert_eq!(header(&first, "x-repo-commit"), commit);
    assert!(first.headers().get("x-linked-etag").is_none());
    let git_etag = header(&first, "etag").to_string();
    proxy.settle().await;
    let hit = head(&client, &small).await;
    assert_eq!(header(&hit, "x-cache-status"), "HIT");
    assert_eq!(header(&hit, "etag"), git_etag);
    assert_eq!(hub.count("hub", "GET", "/config.json").await, 1);

    // A file in git by branch is revalidated with If-None-Match: a 304.
    let readme = proxy.url("/hf/org/tiny-model/resolve/main/README.md");
    head(&client, &readme).await;
    proxy.settle().await;
    assert_eq!(
        header(&head(&client, &readme).await, "x-cache-status"),
        "REVALIDATED"
    );

    // With the hub gone, the HEAD a client makes is answered from the cache.
    hub.stop();
    let offline = head(&client, &by_branch).await;
    assert_eq!(header(&offline, "x-cache-status"), "STALE");
    assert_lfs_head(&offline, &commit, &sha, 2 << 20);
    assert_eq!(
        header(&head(&client, &small).await, "x-cache-status"),
        "HIT"
    );
}

#[tokio::test]
async fn the_linked_etag_is_the_declared_digest_and_a_tampered_cdn_is_refused() {
    let Some(hub) = HubFixture::start(2) else {
        return;
    };
    let proxy = TestProxy::start(&hub.remote("hf", "")).await;
    let client = reqwest::Client::new();
    let url = proxy.url("/hf/org/tiny-model/resolve/main/model.safetensors");
    hub.tamper(true).await;
    let response = client.get(&url).send().await.unwrap();
    let served = if response.status() == 200 {
        response.bytes().await.ok()
    } else {
        None
    };
    assert!(served.is_none(), "a tampered body was served whole");
    proxy.settle().await;
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);

    hub.tamper(false).await;
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(&response, "x-cache-status"),
        "MISS",
        "nothing was kept"
    );
    assert_eq!(
        sha256_hex(&response.bytes().await.unwrap()),
        hub.files[WEIGHTS]
    );
}

#[tokio::test]
async fn api_documents_keep_their_query_in_the_key_and_their_link_points_at_the_proxy() {
    let Some(hub) = HubFixture::start(1) else {
        return;
    };
    let proxy = TestProxy::start(&hub.remote("hf", "")).await;
    let client = reqwest::Client::new();
    let commit = hub.commits["org/tiny-model"].clone();
    let first = proxy.url(&format!(
        "/hf/api/models/org/tiny-model/tree/{commit}?recursive=true&expand=false"
    ));
    let page = client.get(&first).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let link = header(&page, "link").to_string();
    let next = link
        .strip_prefix('<')
        .and_then(|l| l.split_once('>'))
        .map(|(url, rest)| {
            assert_eq!(rest, "; rel=\"next\"");
            url.to_string()
        })
        .unwrap();
    assert_eq!(
        next,
        format!("{first}&cursor=2"),
        "the next page is on the proxy"
    );
    let page1 = json(page).await;
    let page2 = json(client.get(&next).send().await.unwrap()).await;
    assert_ne!(page1, page2, "the query is part of the key");
    let listing = format!("{page1}{page2}");
    assert!(!listing.contains("xetHash"), "xetHash reached the client");

    for url in [&first, &next] {
        let again = client.get(url).send().await.unwrap();
        assert_eq!(header(&again, "x-cache-status"), "HIT", "{url}");
        assert!(again.headers().get("link").is_some());
    }
    assert_eq!(hub.count("hub", "GET", "/tree/").await, 2);
    assert_eq!(hub.count("hub", "GET", "cursor=2").await, 1);

    // Repository info at a revision, by name.
    let info = client
        .get(proxy.url("/hf/api/models/org/tiny-model/revision/main"))
        .send()
        .await
        .unwrap();
    let info = json(info).await;
    assert_eq!(info["sha"], commit.as_str());
}

#[tokio::test]
async fn the_same_weights_in_two_repositories_are_one_blob_and_the_token_stays_on_the_hub() {
    let Some(hub) = HubFixture::start(1) else {
        return;
    };
    let token = "bearer_token = \"hf_fixture_token\"";
    let proxy = TestProxy::start(&hub.remote("hf", token)).await;
    let client = reqwest::Client::new();
    for repo in ["org/tiny-model", "org/tiny-model-copy"] {
        let url = proxy.url(&format!("/hf/{repo}/resolve/main/model.safetensors"));
        let body = client
            .get(&url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(sha256_hex(&body), hub.files[WEIGHTS], "{repo}");
        proxy.settle().await;
    }
    let blobs = walk_files(&proxy.dir.join("store/blobs"));
    assert_eq!(blobs, 1, "one blob for the same weights");
    assert_eq!(hub.count("cdn", "GET", "/repos/").await, 2);

    // The gated repository needs the operator's token; the CDN never gets it.
    let gated = client
        .get(proxy.url("/hf/org/gated/resolve/main/config.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(gated.status(), 200);
    assert_eq!(hub.log().await["cdn_authorization"], 0);
    let status = client
        .get(proxy.url("/-/status"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!status.contains("hf_fixture_token"));
}

/// With the CDN holding its bodies after one MiB: a first client's GET of
/// the weights (which starts the fill), then, once that MiB is written, a
/// second client's `Range: bytes=1000-1999` and the 999 bytes it gets at
/// once (the range's last byte waits for the file's digest to be checked).
async fn range_while_filling(
    hub: &HubFixture,
    proxy: &TestProxy,
) -> (reqwest::Response, reqwest::Response, Vec<u8>) {
    let client = reqwest::Client::new();
    let url = proxy.url("/hf/org/tiny-model/resolve/main/model.safetensors");
    hub.hold(true).await;
    let first = client.get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    crate::support::wait_until("the fill has its first MiB", async || {
        let status = crate::support::proxy::get_json(&client, &proxy.url("/-/status")).await;
        status["fills"][0]["written"].as_u64().unwrap_or(0) >= 1 << 20
    })
    .await;
    let mut resumed = client
        .get(&url)
        .header("range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 206);
    assert_eq!(header(&resumed, "content-range"), "bytes 1000-1999/4194304");
    let mut part = Vec::new();
    while part.len() < 999 {
        match resumed.chunk().await.unwrap() {
            Some(chunk) => part.extend_from_slice(&chunk),
            None => break,
        }
    }
    assert_eq!(part.len(), 999, "a range's last byte came before the check");
    (first, resumed, part)
}

#[tokio::test]
async fn a_range_of_a_file_still_being_filled_is_served_from_the_bytes_written() {
    let Some(hub) = HubFixture::start(4) else {
        return;
    };
    let proxy = TestProxy::start(&hub.remote("hf", "")).await;
    let client = reqwest::Client::new();
    let url = proxy.url("/hf/org/tiny-model/resolve/main/model.safetensors");
    // A resumed download asks for bytes already written: answered now,
    // all but the range's last byte, which waits for the file's digest to
    // be checked (a refused file fails the answer instead).
    let (first, mut resumed, mut part) = range_while_filling(&hub, &proxy).await;
    assert_eq!(
        header(&resumed, "x-repo-commit"),
        hub.commits["org/tiny-model"]
    );
    hub.hold(false).await;
    while let Some(chunk) = resumed.chunk().await.unwrap() {
        part.extend_from_slice(&chunk);
    }
    assert_eq!(part.len(), 1000);
    let whole = first.bytes().await.unwrap();
    assert_eq!(sha256_hex(&whole), hub.files[WEIGHTS]);
    assert_eq!(&whole[1000..2000], &part[..]);
    proxy.settle().await;
    // After the commit, from the blob.
    let after = client
        .get(&url)
        .header("range", "bytes=-10")
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 206);
    assert_eq!(
        &after.bytes().await.unwrap()[..],
        &whole[whole.len() - 10..]
    );
    assert_eq!(hub.count("cdn", "GET", "/repos/").await, 1);
}

#[tokio::test]
async fn warm_fills_every_file_of_a_snapshot_so_clients_need_no_hub() {
    let Some(mut hub) = HubFixture::start(1) else {
        return;
    };
    let proxy = TestProxy::start(&hub.remote("hf", "")).await;
    let commit = hub.commits["org/tiny-model"].clone();
    let options = |names: &[&str]| mirrorcache::ops::warm::Options {
        server: proxy.base.clone(),
        remote: "hf".into(),
        files: names.iter().map(std::path::PathBuf::from).collect(),
        jobs: 2,
        terminal: false,
    };
    let summary = mirrorcache::ops::warm::run(&options(&["org/tiny-model"]))
        .await
        .unwrap();
    assert_eq!((summary.fetched, summary.cached), (4, 0), "{summary}");
    assert!(summary.failed.is_empty(), "{summary}");
    // By commit, the same files: all cached already.
    let at_commit = format!("org/tiny-model@{commit}");
    let summary = mirrorcache::ops::warm::run(&options(&[&at_commit]))
        .await
        .unwrap();
    assert_eq!((summary.fetched, summary.cached), (0, 4), "{summary}");
    let bad = mirrorcache::ops::warm::run(&options(&["org/../etc"])).await;
    assert!(bad.is_err());

    hub.stop();
    let client = reqwest::Client::new();
    for file in [
        "config.json",
        "README.md",
        "tokenizer/vocab.txt",
        "model.safetensors",
    ] {
        let url = proxy.url(&format!("/hf/org/tiny-model/resolve/{commit}/{file}"));
        let response = client.get(&url).send().await.unwrap();
        assert_eq!(header(&response, "x-cache-status"), "HIT", "{file}");
        let body = response.bytes().await.unwrap();
        assert_eq!(
            sha256_hex(&body),
            hub.files[&format!("org/tiny-model/{file}")]
        );
    }
}

async fn json(response: reqwest::Response) -> serde_json::Value {
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

fn walk_files(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                walk_files(&path)
            } else {
                1
            }
        })
        .sum()
}

/// A range of a file still being filled from a CDN that changed its bytes:
/// its first bytes come while the file arrives, its last never, and the
/// answer fails when the file is refused, so no client (a resumed or a
/// parallel download) completes a part of a refused file.
#[tokio::test]
async fn a_range_of_a_file_that_is_then_refused_never_completes() {
    let Some(hub) = HubFixture::start(4) else {
        return;
    };
    let proxy = TestProxy::start(&hub.remote("hf", "")).await;
    hub.tamper(true).await;
    let (first, mut resumed, mut part) = range_while_filling(&hub, &proxy).await;
    hub.hold(false).await;
    let rest = loop {
        match resumed.chunk().await {
            Ok(Some(chunk)) => part.extend_from_slice(&chunk),
            Ok(None) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    assert!(
        rest.is_err() && part.len() < 1000,
        "a range of a refused file completed: {} bytes, {rest:?}",
        part.len()
    );
    assert!(
        first.bytes().await.is_err(),
        "the refused file was served whole"
    );
    proxy.settle().await;
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
}
