//! Blobs in S3-compatible storage (a moto server started by the test):
//! uploaded after the hash is checked, hits and ranges streamed from it, and
//! a fresh instance with an empty local disk serves them.

use crate::support::proxy::{config_text, get};
use crate::support::{sha256_hex, test_bytes, MirrorServer, S3Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_live_in_s3_and_hits_and_ranges_stream_from_it() {
    let Some(s3) = S3Server::start("mirrorcache-test").await else {
        return;
    };
    let mirror = MirrorServer::start().await;
    let body = test_bytes(3 * 1024 * 1024, 3);
    mirror.put("/m/a.bin", body.clone());
    let small = test_bytes(10_000, 4);
    mirror.put("/m/s.bin", small.clone());
    let meta_dir = tempfile::tempdir().unwrap();
    let start = |local: &std::path::Path| {
        let text = config_text(
            local,
            &format!(
                "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\nimmutable = [\"**\"]\n",
                mirror.url("/m")
            ),
        )
        .replace(
            "[storage]\n",
            &format!("[storage]\n{}", s3.storage_keys("mirrorcache-test")),
        )
        .replace(
            &format!("sqlite://{}/meta.db", local.display()),
            &format!("sqlite://{}/meta.db", meta_dir.path().display()),
        );
        let config = mirrorcache::config::Config::parse(&text, "test").unwrap();
        async move {
            mirrorcache::http::server::Running::start(&config)
                .await
                .unwrap()
        }
    };
    let client = reqwest::Client::new();
    let local_a = tempfile::tempdir().unwrap();
    let running = start(local_a.path()).await;
    let url = format!("http://{}/r/a.bin", running.local_addr);
    let (_, cache, bytes) = get(&client, &url).await;
    assert_eq!(
        (cache.as_str(), sha256_hex(&bytes.unwrap())),
        ("MISS", sha256_hex(&body))
    );
    let small_url = format!("http://{}/r/s.bin", running.local_addr);
    assert_eq!(get(&client, &small_url).await.1, "MISS");
    running.proxy.fills.wait_idle().await;
    assert_eq!(
        running.proxy.cache.size(),
        (body.len() + small.len()) as u64
    );
    // Nothing committed on local disk: the blob is in the bucket.
    assert_eq!(running.proxy.cache.local_size().unwrap(), 0);
    running.shutdown().await;

    // A new instance with an empty local disk, the mirror gone: hits from S3.
    mirror.stop();
    let local_b = tempfile::tempdir().unwrap();
    let running = start(local_b.path()).await;
    let url = format!("http://{}/r/a.bin", running.local_addr);
    let (status, cache, bytes) = get(&client, &url).await;
    assert_eq!(
        (status, cache.as_str(), sha256_hex(&bytes.unwrap())),
        (200, "HIT", sha256_hex(&body))
    );
    let response = client
        .get(&url)
        .header("range", "bytes=1000000-1000099")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(
        &response.bytes().await.unwrap()[..],
        &body[1_000_000..1_000_100]
    );
    // A small object is kept in memory from its first hit (a local blob
    // from its second within 10 ms): the next hit asks the bucket nothing.
    let small_url = format!("http://{}/r/s.bin", running.local_addr);
    for _ in 0..2 {
        let (status, cache, bytes) = get(&client, &small_url).await;
        assert_eq!(
            (status, cache.as_str(), sha256_hex(&bytes.unwrap())),
            (200, "HIT", sha256_hex(&small))
        );
        assert_eq!(running.proxy.cache.memory_loads(), 1);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    running.shutdown().await;
}
