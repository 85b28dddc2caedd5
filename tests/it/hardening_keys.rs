//! Hardening of keys and secrets: one cache key per artifact however its path
//! is spelled; no secret in any output (status, metrics, logs, error bodies,
//! `check`); `Vary: Accept` on content-negotiated documents, the admin DELETE
//! of every variant; and SIGHUP applying or refusing each key, never ignoring
//! one silently.

use crate::support::proxy::get;
use crate::support::{sha256_hex, test_bytes, MirrorServer, TestProxy};

// ---- A. One cache key per artifact ----

/// RFC 3986 §6.2.2 spellings of one artifact are one cache entry and one
/// upstream fetch; reserved encodings reach the mirror encoded (upper-cased).
#[tokio::test]
async fn every_spelling_of_a_path_is_one_key_and_one_upstream_fetch() {
    let mirror = MirrorServer::start().await;
    let bytes = test_bytes(200_000, 11);
    mirror.put("/m/kn/a.bin", bytes.clone());
    mirror.put_typed("/m/@s%2Fp", "{\"name\":\"@s/p\"}", "application/json");
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"g\"\nmirrors = [\"{m}\"]\n\n[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{m}\"]\n",
        m = mirror.url("/m")
    ))
    .await;
    let client = reqwest::Client::new();

    let mut seen = Vec::new();
    for path in [
        "/g/kn/a.bin",
        "/g/kn/%61.bin",
        "/g/kn/%61%2Ebin",
        "/g/%6Bn/a.bin",
        "/%67/kn/%61.bin",
    ] {
        let (status, cache, body) = get(&client, &proxy.url(path)).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&bytes), "{path}");
        seen.push(cache);
        proxy.settle().await;
    }
    assert_eq!(seen, ["MISS", "HIT", "HIT", "HIT", "HIT"]);
    assert_eq!(mirror.requests(), [("/m/kn/a.bin".to_string(), 1)]);

    // npm's scoped name: `%2f` and `%2F` are one packument, fetched encoded.
    let mut seen = Vec::new();
    for path in ["/npm/@s%2fp", "/npm/@s%2Fp", "/npm/@%73%2fp"] {
        let (status, cache, _) = get(&client, &proxy.url(path)).await;
        assert_eq!(status, 200, "{path}");
        seen.push(cache);
        proxy.settle().await;
    }
    assert_eq!(seen, ["MISS", "HIT", "HIT"]);
    assert_eq!(mirror.hits("/m/@s%2Fp"), 1);
    assert_eq!(mirror.total(), 2);
    proxy.stop().await;
}
