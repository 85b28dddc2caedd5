//! Registries as real clients meet them: index documents whose links spell
//! the remote's hosts differently (explicit default ports, upper-case hosts),
//! the uncached API routes (npm audit and search, cargo's `api`, pypi's JSON
//! API), the read-only refusals, and go's checksum database.

use crate::support::proxy::get;
use crate::support::{MirrorServer, TestProxy};

async fn get_text(url: &str) -> (u16, String, String) {
    let (status, cache, body) = get(&reqwest::Client::new(), url).await;
    (status, cache, String::from_utf8_lossy(&body.unwrap()).into_owned())
}

/// A cargo `config.json` whose `dl` names a files mirror with an explicit
/// default port and an upper-case host, and whose `api` names the index
/// mirror in upper case: both are rewritten, and the crate is then fetched
/// (and cached) through the proxy.
#[tokio::test]
async fn config_json_links_are_rewritten_however_the_origin_is_spelled() {
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let files_port = files.addr.port();
    index.put_typed(
        "/config.json",
        format!(
            "{{\"dl\": \"HTTP://LocalHost:{files_port}/crates/{{crate}}/{{version}}/download\", \
              \"api\": \"HTTP://LOCALHOST:{}\", \"other\": \"https://static.example:443/crates/x\", \
              \"lookalike\": \"http://localhost:{files_port}/crates2/x\"}}",
            index.addr.port()
        ),
        "application/json",
    );
    files.put("/crates/mc/1.0.0/download", b"crate bytes".to_vec());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"http://localhost:{}\"]\n\
         files = [\"http://localhost:{files_port}/crates\", \"https://STATIC.example:443/crates\"]\n",
        index.addr.port(),
    ))
    .await;
    let (status, _, body) = get_text(&proxy.url("/cargo/config.json")).await;
    assert_eq!(status, 200);
    let config: serde_json::Value = serde_json::from_str(&body).unwrap();
    let base = &proxy.base;
    assert_eq!(
        config["dl"],
        format!("{base}/cargo/~files/{{crate}}/{{version}}/download")
    );
    assert_eq!(config["api"], format!("{base}/cargo"));
    // Any of the remote's hosts, `files` and `mirrors` alike.
    assert_eq!(config["other"], format!("{base}/cargo/~files/x"));
    // A path that only starts like the base is another path.
    assert_eq!(
        config["lookalike"],
        format!("http://localhost:{files_port}/crates2/x")
    );

    let dl = config["dl"]
        .as_str()
        .unwrap()
        .replace("{crate}", "mc")
        .replace("{version}", "1.0.0");
    let (status, cache, body) = get_text(&dl).await;
    assert_eq!((status, cache.as_str(), body.as_str()), (200, "MISS", "crate bytes"));
    proxy.settle().await;
    files.stop();
    let (status, cache, _) = get_text(&dl).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(files.hits("/crates/mc/1.0.0/download"), 1);
    proxy.stop().await;
}
