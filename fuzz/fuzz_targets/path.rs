//! Fuzzes the request-path normaliser: it must never panic, and a path it
//! accepts must hold no traversal (a `..` segment, or `.`/`..` with
//! `;parameters`, which servlet containers read as one) or control
//! character in any decoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mirrorcache::path::ArtifactPath;
use percent_encoding::percent_decode_str;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else { return };
    let Ok(path) = ArtifactPath::parse(raw) else { return };
    let mut current = path.key().to_string();
    for _ in 0..4 {
        assert!(
            !current.split('/').any(|s| s == ".." || (s.contains(';') && matches!(s.split(';').next(), Some("." | "..")))),
            "accepted traversal: {raw:?}"
        );
        assert!(!current.chars().any(|c| c.is_control() || c == '\\'), "accepted control char: {raw:?}");
        current = percent_decode_str(&current).decode_utf8_lossy().into_owned();
    }
});
