//! Test fixtures: upstream mirrors with fault switches, and a proxy on a temp dir.
#![allow(dead_code, unused_imports)] // shared by the `it` and `clients` test targets; each uses a part

pub mod binary;
pub mod hex_registry;
pub mod hub;
pub mod lfs_host;
pub mod mirror;
pub mod nuget;
pub mod osv;
pub mod proxy;

pub use binary::BinaryProxy;
pub use hub::HubFixture;
pub use lfs_host::LfsHost;
pub use mirror::{toml_urls, Fault, MirrorServer};
pub use proxy::TestProxy;

use sha2::{Digest, Sha256};

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A xorshift generator: repeatable randomness for tests.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Deterministic pseudo-random bytes (so a truncated copy cannot look right).
pub fn test_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..len).map(|_| rng.next() as u8).collect()
}

/// Same size, different bytes: what a tampered mirror or CDN node sends.
pub fn tampered(good: &[u8]) -> Vec<u8> {
    let mut bad = good.to_vec();
    bad[good.len() / 2] ^= 0xff;
    bad
}

/// Polls `done` every 20 ms until it is true; fails the test, naming `what`,
/// if it is still false after 20 s (generous: the suite runs on busy machines).
/// For waiting on something observable instead of sleeping a fixed time.
pub async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// For tests that need a service or tool a fresh laptop may lack: prints a
/// loud SKIPPED line and returns false, or fails the test when
/// `MIRRORCACHE_REQUIRE_SERVICES=1` (as `.ci/run` sets).
pub fn available(what: &str, ok: bool) -> bool {
    if ok {
        return true;
    }
    if std::env::var("MIRRORCACHE_REQUIRE_SERVICES").as_deref() == Ok("1") {
        panic!("{what} is required (MIRRORCACHE_REQUIRE_SERVICES=1) but not available");
    }
    eprintln!("SKIPPED: {what} is not available; set it up or see README (tests)");
    false
}

/// A port free on 127.0.0.1 when asked (another process may take it
/// before the caller binds it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A moto S3 server of the test's own (from PyPI, `pip install 'moto[server]'`),
/// with one empty bucket.
pub struct S3Server {
    child: std::process::Child,
    pub endpoint: String,
}

impl S3Server {
    /// `None` (after a loud skip, or a failure under MIRRORCACHE_REQUIRE_SERVICES)
    /// when moto is not installed.
    pub async fn start(bucket: &str) -> Option<S3Server> {
        // A server that exits at once (its port taken meanwhile by another
        // test) is started again on another port; one that is slow to
        // start (Python's imports on a loaded machine) is waited for.
        for _ in 0..3 {
            let port = free_port();
            let child = std::process::Command::new("moto_server")
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
            let Ok(child) = child else {
                available("moto_server (pip install 'moto[server]')", false);
                return None;
            };
            let mut server = S3Server {
                child,
                endpoint: format!("http://127.0.0.1:{port}"),
            };
            let client = reqwest::Client::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
            loop {
                let create = client
                    .put(format!("{}/{bucket}", server.endpoint))
                    .header("content-length", "0")
                    .body("");
                if let Ok(r) = create.send().await {
                    assert!(
                        r.status().is_success(),
                        "creating the bucket: {}",
                        r.status()
                    );
                    return Some(server);
                }
                if server.child.try_wait().unwrap().is_some() {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "moto_server did not start within 90 s"
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        panic!("moto_server exited three times before it served");
    }

    /// The `[storage]` keys that put blobs in `bucket` on this server.
    pub fn storage_keys(&self, bucket: &str) -> String {
        format!(
            "url = \"s3://{bucket}/blobs\"\nendpoint = \"{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n",
            self.endpoint
        )
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
