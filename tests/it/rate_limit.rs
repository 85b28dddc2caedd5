//! Mirrors that answer 429: what is cached is served `STALE`, the mirrors
//! are not asked again before their `Retry-After`, and what is not cached
//! gets the upstream's 429 with its reason and `Retry-After`.

use std::time::Duration;

use crate::support::proxy::{get, get_json, get_text};
use crate::support::{Fault, MirrorServer, TestProxy};

#[tokio::test]
async fn every_mirror_limited_serves_stale_backs_off_and_tells_the_reason() {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    for mirror in [&a, &b] {
        mirror.put("/m/tags/latest", b"v1".to_vec());
    }
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\", \"{}\"]\nrevalidate_after = \"1s\"\n",
        a.url("/m"),
        b.url("/m")
    ))
    .await;
    let client = reqwest::Client::new();
    let (status, cache, _) = get(&client, &proxy.url("/r/tags/latest")).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    proxy.settle().await;
    let asked = a.total() + b.total();

    a.set_fault(Fault::RateLimited(120));
    b.set_fault(Fault::RateLimited(120));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Stale, and each mirror asked once for it.
    let (status, cache, body) = get(&client, &proxy.url("/r/tags/latest")).await;
    assert_eq!((status, cache.as_str()), (200, "STALE"));
    assert_eq!(&body.unwrap()[..], b"v1");
    assert_eq!(a.total() + b.total(), asked + 2);
    // Until their Retry-After, neither is asked again.
    let (status, cache, _) = get(&client, &proxy.url("/r/tags/latest")).await;
    assert_eq!((status, cache.as_str()), (200, "STALE"));
    let response = client
        .get(proxy.url("/r/never/cached"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let wait: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((100..=120).contains(&wait), "Retry-After {wait}");
    assert_eq!(a.total() + b.total(), asked + 2);

    // Asked while their limit is not known yet, the reason reaches the client.
    let fresh = TestProxy::start(&format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\", \"{}\"]\n",
        a.url("/m"),
        b.url("/m")
    ))
    .await;
    let response = client
        .get(fresh.url("/r/never/cached"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "120");
    let text = response.text().await.unwrap();
    assert!(
        text.contains("You have reached your pull rate limit"),
        "{text}"
    );
    // Docker Hub's pulls left, per mirror, in the metrics and the status.
    let metrics = get_text(&client, &fresh.url("/-/metrics")).await;
    assert!(
        metrics.contains(&format!(
            "mirrorcache_upstream_ratelimit_remaining{{remote=\"r\",mirror=\"{}\"}} 0",
            a.url("/m")
        )),
        "{metrics}"
    );
    let status = get_json(&client, &fresh.url("/-/status")).await;
    let mirror = &status["remotes"][0]["mirrors"][0];
    assert_eq!(mirror["ratelimit_remaining"], 0);
    assert!(mirror["rate_limited_until_ms"].as_i64().is_some());
    fresh.stop().await;
    proxy.stop().await;
}

/// `keep_deleted = true`: a path deleted upstream after it was cached (every
/// mirror answers 404 now) is still served, `STALE`, and the mirrors are not
/// asked again before `negative_ttl`; without it, the 404 reaches the client.
#[tokio::test]
async fn a_path_deleted_upstream_is_kept_only_where_the_operator_says() {
    let mirror = MirrorServer::start().await;
    mirror.put("/m/tags/latest", b"v1".to_vec());
    let remote = |name: &str, keep: bool| {
        format!(
            "[[remote]]\nname = \"{name}\"\nmirrors = [\"{}\"]\nrevalidate_after = \"1s\"\n\
             negative_ttl = \"1h\"\nkeep_deleted = {keep}\n",
            mirror.url("/m")
        )
    };
    let proxy = TestProxy::start(&(remote("kept", true) + &remote("plain", false))).await;
    let client = reqwest::Client::new();
    for name in ["kept", "plain"] {
        let (status, cache, _) = get(&client, &proxy.url(&format!("/{name}/tags/latest"))).await;
        assert_eq!((status, cache.as_str()), (200, "MISS"));
    }
    proxy.settle().await;
    mirror.remove("/m/tags/latest");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, cache, body) = get(&client, &proxy.url("/kept/tags/latest")).await;
    assert_eq!((status, cache.as_str()), (200, "STALE"));
    assert_eq!(&body.unwrap()[..], b"v1");
    let asked = mirror.total();
    let (status, cache, _) = get(&client, &proxy.url("/kept/tags/latest")).await;
    assert_eq!((status, cache.as_str()), (200, "STALE"));
    assert_eq!(mirror.total(), asked, "not asked again within negative_ttl");
    let (status, _, _) = get(&client, &proxy.url("/plain/tags/latest")).await;
    assert_eq!(status, 404);
}
