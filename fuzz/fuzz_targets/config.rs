//! Fuzzes the config loader: any text gives a `Config` or a `ConfigError`,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = mirrorcache::config::Config::parse(text, "fuzz.toml");
    }
});
