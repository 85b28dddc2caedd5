//! The fixture Hugging Face hub and its CDN (`hf_hub.py` beside this file,
//! Python's standard library only), as a child process on two 127.0.0.1
//! ports: its handle, its request log and its fault switch.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub struct HubFixture {
    child: Child,
    /// The hub's base URL (the remote's `mirrors`).
    pub hub: String,
    /// The CDN's base URL (the remote's `files`).
    pub cdn: String,
    /// sha256 of each file, by `repo/path`.
    pub files: HashMap<String, String>,
    /// Each repository's commit (what `main` points at).
    pub commits: HashMap<String, String>,
    client: reqwest::Client,
}

impl HubFixture {
    /// Starts the fixture with an LFS file of `lfs_mib` MiB; `None` after a
    /// loud skip (a failure under `MIRRORCACHE_REQUIRE_SERVICES=1`) without
    /// python3.
    pub fn start(lfs_mib: u32) -> Option<HubFixture> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/support/hf_hub.py");
        let child = Command::new("python3")
            .arg(script)
            .args(["--lfs-mib", &lfs_mib.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let Ok(mut child) = child else {
            super::available("python3 (the fixture hub)", false);
            return None;
        };
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let started: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("fixture hub: {e}: {line:?}"));
        let map = |key: &str| -> HashMap<String, String> {
            started[key]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect()
        };
        Some(HubFixture {
            hub: started["hub"].as_str().unwrap().to_string(),
            cdn: started["cdn"].as_str().unwrap().to_string(),
            files: map("files"),
            commits: map("commits"),
            child,
            client: reqwest::Client::new(),
        })
    }

    /// The `[[remote]]` table of a huggingface remote `name` on this hub.
    pub fn remote(&self, name: &str, extra: &str) -> String {
        format!(
            "[[remote]]\nname = \"{name}\"\nkind = \"huggingface\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n{extra}\n",
            self.hub, self.cdn
        )
    }

    /// The requests the hub and the CDN had, the CDN's body bytes, and how
    /// many requests reached the CDN with an `Authorization` header.
    pub async fn log(&self) -> serde_json::Value {
        let url = format!("{}/_fixture/log", self.hub);
        let body = self
            .client
            .get(url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    /// Requests to `side` (`hub` or `cdn`) with `method` whose path contains `part`.
    pub async fn count(&self, side: &str, method: &str, part: &str) -> usize {
        let log = self.log().await;
        log[side]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["method"] == method && r["path"].as_str().unwrap().contains(part))
            .count()
    }

    /// Every request either side had.
    pub async fn total(&self) -> usize {
        let log = self.log().await;
        log["hub"].as_array().unwrap().len() + log["cdn"].as_array().unwrap().len()
    }

    /// The CDN flips one byte of every LFS body (`on`), or stops.
    pub async fn tamper(&self, on: bool) {
        let state = if on { "on" } else { "off" };
        let url = format!("{}/_fixture/tamper/{state}", self.hub);
        self.client.post(url).send().await.unwrap();
    }

    /// The CDN sends the first MiB of each body, then waits (`on`) until
    /// called with `false`.
    pub async fn hold(&self, on: bool) {
        let state = if on { "on" } else { "off" };
        let url = format!("{}/_fixture/hold/{state}", self.hub);
        self.client.post(url).send().await.unwrap();
    }

    pub async fn reset(&self) {
        let url = format!("{}/_fixture/reset", self.hub);
        self.client.post(url).send().await.unwrap();
    }

    /// Stops both servers (by the child's PID).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HubFixture {
    fn drop(&mut self) {
        self.stop();
    }
}
