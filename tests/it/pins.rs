//! Pin on first use: an immutable artifact whose index declares nothing
//! (generic, go without a checksum database) keeps the sha256 of its first
//! complete download as its declared digest. After eviction, other bytes
//! are refused and the next mirror is asked; the admin API clears a pin;
//! `pin_on_first_use = false` turns it off.

use crate::support::proxy::{config_text, get, metric, start_text};
use crate::support::{sha256_hex, tampered, test_bytes, MirrorServer};
use mirrorcache::http::server::Running;

struct Pinned {
    running: Running,
    base: String,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Pinned {
    async fn start(remote: &str) -> Pinned {
        let dir = tempfile::tempdir().unwrap();
        let text = config_text(dir.path(), remote)
            .replace("[server]\n", "[server]\nadmin_token = \"t\"\n");
        let running = start_text(&text).await;
        let base = format!("http://{}", running.local_addr);
        Pinned {
            running,
            base,
            client: reqwest::Client::new(),
            _dir: dir,
        }
    }

    /// The status and the sha256 of the body.
    async fn fetch(&self, path: &str) -> (u16, String) {
        let (status, _, body) = get(&self.client, &format!("{}{path}", self.base)).await;
        (status, body.map(|b| sha256_hex(&b)).unwrap_or_default())
    }

    /// The admin DELETE of `path` (`/-/cache…` or `/-/pins…`), after the
    /// fills in progress are done; its JSON answer.
    async fn delete(&self, path: &str) -> serde_json::Value {
        self.running.proxy.fills.wait_idle().await;
        let response = self
            .client
            .delete(format!("{}{path}", self.base))
            .bearer_auth("t")
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
    }

    /// The status of a DELETE of `path`, with the admin token or without.
    async fn delete_status(&self, path: &str, token: bool) -> u16 {
        let mut request = self.client.delete(format!("{}{path}", self.base));
        if token {
            request = request.bearer_auth("t");
        }
        request.send().await.unwrap().status().as_u16()
    }

    async fn integrity_failures(&self) -> f64 {
        let text = self
            .client
            .get(format!("{}/-/metrics", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric(&text, "mirrorcache_integrity_failures_total")
    }
}

#[tokio::test]
async fn a_generic_artifact_is_pinned_refused_when_it_changes_and_its_pin_cleared() {
    let (first, second) = (MirrorServer::start().await, MirrorServer::start().await);
    let good = test_bytes(50_000, 1);
    for mirror in [&first, &second] {
        mirror.put("/files/tool-1.0.bin", good.clone());
    }
    let proxy = Pinned::start(&format!(
        "[[remote]]\nname = \"r\"\nmirrors = {}\nstrategy = \"single\"\nimmutable = [\"*.bin\"]\n",
        crate::support::toml_urls(&[&first, &second], "/files")
    ))
    .await;
    let path = "/r/tool-1.0.bin";
    assert_eq!(proxy.fetch(path).await, (200, sha256_hex(&good)));

    // Evicted, and the first mirror now sends other bytes: refused, counted,
    // and the second mirror's (the pinned ones) served.
    proxy.delete("/-/cache/r/tool-1.0.bin").await;
    first.put("/files/tool-1.0.bin", tampered(&good));
    assert_eq!(proxy.fetch(path).await, (200, sha256_hex(&good)));
    assert_eq!(proxy.integrity_failures().await, 1.0);
    assert_eq!(first.hits("/files/tool-1.0.bin"), 2);
    assert_eq!(second.hits("/files/tool-1.0.bin"), 1);

    // Both changed: nothing served.
    proxy.delete("/-/cache/r/tool-1.0.bin").await;
    second.put("/files/tool-1.0.bin", tampered(&good));
    let (status, _) = proxy.fetch(path).await;
    assert_eq!(status, 502);

    // The operator clears the pin: the new bytes are taken, and pinned.
    let cleared = proxy.delete("/-/pins/r/tool-1.0.bin").await;
    assert_eq!(cleared["cleared"], true);
    assert_eq!(proxy.fetch(path).await, (200, sha256_hex(&tampered(&good))));
    let again = proxy.delete("/-/pins/r/tool-1.0.bin").await;
    assert_eq!(again["cleared"], true, "the new bytes were pinned");
    // A mutable path has no pin to clear.
    assert_eq!(proxy.delete_status("/-/pins/r/index.html", true).await, 400);
    assert_eq!(
        proxy.delete_status("/-/pins/r/tool-1.0.bin", false).await,
        401
    );
}

#[tokio::test]
async fn a_go_module_zip_is_pinned_unless_the_remote_turns_pinning_off() {
    let mirror = MirrorServer::start().await;
    let zip = test_bytes(20_000, 2);
    let at = "/go/example.com/m/@v/v1.0.0.zip";
    mirror.put(at, zip.clone());
    let remotes = format!(
        "[[remote]]\nname = \"go\"\nkind = \"go\"\nmirrors = [\"{0}\"]\n\n\
         [[remote]]\nname = \"loose\"\nkind = \"go\"\nmirrors = [\"{0}\"]\npin_on_first_use = false\n",
        mirror.url("/go")
    );
    let proxy = Pinned::start(&remotes).await;
    for remote in ["go", "loose"] {
        let path = format!("/{remote}/example.com/m/@v/v1.0.0.zip");
        assert_eq!(proxy.fetch(&path).await, (200, sha256_hex(&zip)));
    }
    proxy
        .delete("/-/cache/go/example.com/m/@v/v1.0.0.zip")
        .await;
    proxy
        .delete("/-/cache/loose/example.com/m/@v/v1.0.0.zip")
        .await;
    mirror.put(at, tampered(&zip));
    // Pinned: the changed zip is refused, naming both digests.
    let (status, _, body) = get(
        &proxy.client,
        &format!("{}/go/example.com/m/@v/v1.0.0.zip", proxy.base),
    )
    .await;
    assert_eq!(status, 502);
    let said = String::from_utf8_lossy(&body.unwrap()).to_string();
    assert!(said.contains(&sha256_hex(&zip)), "{said}");
    assert!(said.contains(&sha256_hex(&tampered(&zip))), "{said}");
    assert_eq!(proxy.integrity_failures().await, 1.0);
    // Not pinned: the new bytes are served.
    assert_eq!(
        proxy.fetch("/loose/example.com/m/@v/v1.0.0.zip").await,
        (200, sha256_hex(&tampered(&zip)))
    );
    // `.info` and `.mod` are pinned as well; `list` is not (mutable).
    mirror.put("/go/example.com/m/@v/list", "v1.0.0\n");
    assert_eq!(proxy.fetch("/go/example.com/m/@v/list").await.0, 200);
    let list = "/-/pins/go/example.com/m/@v/list";
    assert_eq!(proxy.delete_status(list, true).await, 400);
}
