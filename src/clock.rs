//! Wall-clock time as the cache records it: unix milliseconds; and
//! [`Clock`], the same reading behind a trait where tests need to move time
//! (the dashboard's per-minute history).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A source of "now" (unix ms).
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;
}

/// The system's wall clock ([`now_ms`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }
}

/// A clock that moves only when told (tests).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn at(unix_ms: i64) -> ManualClock {
        ManualClock(AtomicI64::new(unix_ms))
    }

    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as i64, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
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
