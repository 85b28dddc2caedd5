//! The proxy under test, in-process, on an ephemeral port and a temp dir.

use std::path::{Path, PathBuf};

use mirrorcache::config::Config;
use mirrorcache::http::server::Running;

pub struct TestProxy {
    pub running: Running,
    pub base: String,
    pub dir: PathBuf,
    _tempdir: Option<tempfile::TempDir>,
}

/// The config text of a proxy on `127.0.0.1:0` keeping its state in `dir`.
pub fn config_text(dir: &Path, remotes: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[storage]\npath = \"{dir}/store\"\n\n[metadata]\nurl = \"sqlite://{dir}/meta.db\"\n\n{remotes}\n",
        dir = dir.display()
    )
}

impl TestProxy {
    /// Starts a proxy with these `[[remote]]` tables, in a fresh temp dir.
    pub async fn start(remotes: &str) -> TestProxy {
        let tempdir = tempfile::tempdir().unwrap();
        let mut proxy = TestProxy::start_in(tempdir.path(), remotes).await;
        proxy._tempdir = Some(tempdir);
        proxy
    }

    /// Starts a proxy with these `[server]` keys (besides `listen`) and
    /// `[[remote]]` tables, in a fresh temp dir.
    pub async fn start_with_server(server_keys: &str, remotes: &str) -> TestProxy {
        let tempdir = tempfile::tempdir().unwrap();
        let text = config_text(tempdir.path(), remotes).replacen(
            "[server]\n",
            &format!("[server]\n{server_keys}\n"),
            1,
        );
        let running = start_text(&text).await;
        TestProxy {
            base: format!("http://{}", running.local_addr),
            running,
            dir: tempdir.path().to_path_buf(),
            _tempdir: Some(tempdir),
        }
    }

    /// Starts a proxy keeping its state in `dir` (to test restarts).
    pub async fn start_in(dir: &Path, remotes: &str) -> TestProxy {
        let running = start_text(&config_text(dir, remotes)).await;
        let base = format!("http://{}", running.local_addr);
        TestProxy {
            running,
            base,
            dir: dir.to_path_buf(),
            _tempdir: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// The sum of the `/-/metrics` lines that start with `prefix` (a name,
    /// perhaps with its first labels: `mirrorcache_x_total{remote="r"`).
    pub async fn metric(&self, prefix: &str) -> f64 {
        let text = reqwest::get(self.url("/-/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric(&text, prefix)
    }

    /// Waits until no fill is in progress (the last miss is committed).
    pub async fn settle(&self) {
        self.running.proxy.fills.wait_idle().await;
    }

    /// Temp files in the store's temp dir (fills in progress or left
    /// behind), not counting the owners' `.lock` files.
    pub fn temp_files(&self) -> usize {
        temp_files_in(&self.dir.join("store"))
    }

    pub async fn stop(self) -> Option<tempfile::TempDir> {
        self.running.shutdown().await;
        self._tempdir
    }
}

/// Temp files in `store/tmp`, not counting the owners' `.lock` files.
pub fn temp_files_in(store: &Path) -> usize {
    std::fs::read_dir(store.join("tmp"))
        .map(|d| {
            d.filter(|e| {
                e.as_ref().map_or(true, |e| {
                    !e.file_name().to_string_lossy().ends_with(".lock")
                })
            })
            .count()
        })
        .unwrap_or(0)
}

/// Starts a proxy from a whole config text (for tests that change more than
/// the remotes).
pub async fn start_text(text: &str) -> Running {
    let config = Config::parse(text, "test.toml").unwrap();
    Running::start(&config).await.unwrap()
}

/// `POST /-/cache/{remote}/purge` with the admin token `token`; asserts 200.
pub async fn purge(client: &reqwest::Client, base: &str, remote: &str, token: &str) {
    let response = client
        .post(format!("{base}/-/cache/{remote}/purge"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// `GET url`'s body as text (`/-/metrics`, `/-/`).
pub async fn get_text(client: &reqwest::Client, url: &str) -> String {
    client.get(url).send().await.unwrap().text().await.unwrap()
}

/// `GET url` parsed as JSON (`/-/status`).
pub async fn get_json(client: &reqwest::Client, url: &str) -> serde_json::Value {
    serde_json::from_str(&get_text(client, url).await).unwrap()
}

/// Fetches `url`, returning status, X-Cache-Status and the body (or the body error).
pub async fn get(
    client: &reqwest::Client,
    url: &str,
) -> (u16, String, Result<bytes::Bytes, reqwest::Error>) {
    let response = client.get(url).send().await.unwrap();
    let status = response.status().as_u16();
    let cache = cache_status(&response);
    (status, cache, response.bytes().await)
}

/// The answer's `X-Cache-Status` (empty without one).
pub fn cache_status(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("x-cache-status")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// The sum of the lines of a metrics text that start with `prefix`.
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Writes `bytes` into a temp file and makes them the entry for `path`, as a
/// fill does.
pub async fn commit_bytes(
    cache: &mirrorcache::cache::Cache,
    path: &str,
    bytes: &[u8],
) -> mirrorcache::cache::Digest {
    let path = mirrorcache::path::ArtifactPath::parse(path).unwrap();
    let owned = bytes.to_vec();
    let temp = cache
        .store_blocking(move |store| {
            let temp = store.create_temp()?;
            temp.write_at(&owned, 0)?;
            Ok(temp)
        })
        .await
        .unwrap();
    let digest = mirrorcache::cache::Digest::of(bytes);
    let entry = mirrorcache::cache::Entry::new(digest, bytes.len() as u64, None, None, None, 0);
    cache.commit_entry(temp, &path, entry).await.unwrap();
    digest
}

/// `mirrorcache warm` of the lockfile `lock` through the server at `base`
/// into its remote `remote`, two at a time, without a progress bar.
pub async fn warm(
    base: &str,
    remote: &str,
    lock: std::path::PathBuf,
) -> mirrorcache::ops::warm::Summary {
    let options = mirrorcache::ops::warm::Options {
        server: base.to_string(),
        remote: remote.into(),
        files: vec![lock],
        jobs: 2,
        terminal: false,
    };
    mirrorcache::ops::warm::run(&options).await.unwrap()
}

/// The status line of a raw `GET path` (reqwest does not show the reason phrase).
pub async fn status_line(base: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or_default().to_string()
}

/// `mirrorcache warm` of the lockfiles `files` through the server at `base`
/// for its remote `remote`; fails unless each of the `expected` artifacts
/// was fetched (none already cached, none failed).
pub async fn warm_fetches_all(base: &str, remote: &str, files: Vec<PathBuf>, expected: usize) {
    let options = mirrorcache::ops::warm::Options {
        server: base.to_string(),
        remote: remote.into(),
        files,
        jobs: 2,
        terminal: false,
    };
    let summary = mirrorcache::ops::warm::run(&options).await.unwrap();
    assert_eq!(
        (summary.fetched, summary.cached),
        (expected, 0),
        "{summary}"
    );
    assert!(summary.failed.is_empty(), "{summary}");
}
