//! Test fixtures: upstream mirrors with fault switches, and a proxy on a temp dir.
#![allow(dead_code, unused_imports)] // shared by the `it` and `clients` test targets; each uses a part

pub mod binary;
pub mod mirror;
pub mod proxy;

pub use binary::BinaryProxy;
pub use mirror::{Fault, MirrorServer};
pub use proxy::TestProxy;

use sha2::{Digest, Sha256};

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Deterministic pseudo-random bytes (so a truncated copy cannot look right).
pub fn test_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
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
