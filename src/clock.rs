//! Wall-clock time as the cache records it: unix milliseconds.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// An HTTP date (RFC 9110: IMF-fixdate, or the obsolete forms) as unix
/// seconds, when it is one that fits in 32 bits.
pub fn http_date_secs(text: &str) -> Option<u32> {
    let at = httpdate::parse_http_date(text).ok()?;
    u32::try_from(at.duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()
}

/// Unix seconds as an IMF-fixdate.
pub fn http_date(secs: u32) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(u64::from(secs)))
}
