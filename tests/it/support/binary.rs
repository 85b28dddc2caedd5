//! The real `mirrorcache` binary as a child process, for what only a process
//! shows: peak RSS, kill -9, signals, its log output.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct BinaryProxy {
    pub child: Child,
    pub base: String,
    pub config_path: PathBuf,
    pub log_path: PathBuf,
}

impl BinaryProxy {
    /// Writes `config_text` (with `127.0.0.1:0` replaced by a free port) into
    /// `dir`, starts `mirrorcache serve` on it and waits for `/-/health`.
    pub async fn start(dir: &Path, config_text: &str) -> BinaryProxy {
        BinaryProxy::start_logging(dir, config_text, "debug").await
    }

    /// [`BinaryProxy::start`] with `RUST_LOG` set to `filter`.
    pub async fn start_logging(dir: &Path, config_text: &str, filter: &str) -> BinaryProxy {
        BinaryProxy::start_env(dir, config_text, filter, &[]).await
    }

    /// [`BinaryProxy::start_logging`] with these variables in its
    /// environment too.
    pub async fn start_env(
        dir: &Path,
        config_text: &str,
        filter: &str,
        env: &[(&str, &Path)],
    ) -> BinaryProxy {
        let port = super::free_port();
        let text = config_text.replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
        let config_path = dir.join("mirrorcache.toml");
        std::fs::write(&config_path, text).unwrap();
        let log_path = dir.join(format!("proxy-{port}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
            .args(["serve", "--config"])
            .arg(&config_path)
            .env("RUST_LOG", filter)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap();
        let proxy = BinaryProxy {
            child,
            base: format!("http://127.0.0.1:{port}"),
            config_path,
            log_path,
        };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while client.get(proxy.url("/-/health")).send().await.is_err() {
            assert!(
                Instant::now() < deadline,
                "proxy did not start: {}",
                proxy.log()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        proxy
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// `127.0.0.1:port`, for a connection made by hand.
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Sends `signal` (e.g. "HUP", "KILL") to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn kill_hard(&mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }
}

impl Drop for BinaryProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `mirrorcache check` on `config_text`, written to a temp file.
pub fn check(config_text: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, config_text).unwrap();
    Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap()
}

/// Asserts that `mirrorcache check` takes `config_text`, showing what it said.
pub fn assert_check_passes(config_text: &str) {
    let output = check(config_text);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// What `mirrorcache ls --config config args…` prints, once it succeeded.
pub fn ls(config: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .arg("ls")
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
