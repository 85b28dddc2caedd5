//! Mirror health, learned from real traffic (and optional active probes).
//!
//! A mirror that fails `eject_after` times in a row is ejected for a cooldown
//! that doubles on each repeat (up to a maximum). While ejected, selection
//! skips it, so a dead mirror costs no time per request. When the cooldown is
//! over, exactly one request is let through as a probe: success makes the
//! mirror healthy again (and resets the cooldown), failure ejects it again for
//! twice as long. States are atomics: selection reads them without a lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::HealthConfig;

/// What a mirror's health allows now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthState {
    Healthy,
    /// Ejected; cooling down.
    Ejected,
    /// Cooldown over: the next request is a probe.
    Probation,
}

impl HealthState {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::Ejected => "ejected",
            HealthState::Probation => "probation",
        }
    }
}

#[derive(Debug, Default)]
pub struct MirrorHealth {
    consecutive_failures: AtomicU32,
    /// 0 when healthy; else the unix ms at which the cooldown ends.
    ejected_until_ms: AtomicI64,
    /// Ejections since the mirror was last healthy (drives the doubling).
    ejections: AtomicU32,
    probe_in_flight: AtomicBool,
    /// Unix ms until which the mirror asked not to be asked (a 429 and its
    /// `Retry-After`); 0 when it did not. Apart from ejection: a mirror
    /// that limits this proxy is up, and failures are not counted.
    rate_limited_until_ms: AtomicI64,
    /// What the last 429 said, told to the clients this mirror cannot be
    /// asked for until its `Retry-After`. A `std` mutex: set on a 429 and
    /// read on a refusal, never held across an await.
    rate_limit_message: std::sync::Mutex<Option<std::sync::Arc<str>>>,
}

impl MirrorHealth {
    pub fn state(&self, now_ms: i64) -> HealthState {
        match self.ejected_until_ms.load(Ordering::Acquire) {
            0 => HealthState::Healthy,
            until if now_ms < until => HealthState::Ejected,
            _ => HealthState::Probation,
        }
    }

    /// Whether selection should consider this mirror (not cooling down).
    pub fn selectable(&self, now_ms: i64) -> bool {
        self.state(now_ms) != HealthState::Ejected
    }

    /// Claims the right to send a request. A mirror on probation lets one
    /// request through at a time; the claim is released by `record_*`.
    pub fn try_begin(&self, now_ms: i64) -> bool {
        match self.state(now_ms) {
            HealthState::Healthy => true,
            HealthState::Ejected => false,
            HealthState::Probation => !self.probe_in_flight.swap(true, Ordering::AcqRel),
        }
    }

    pub fn record_success(&self) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        if self.ejected_until_ms.swap(0, Ordering::AcqRel) != 0 {
            tracing::info!("mirror recovered");
        }
        self.ejections.store(0, Ordering::Relaxed);
        self.probe_in_flight.store(false, Ordering::Release);
    }

    /// Records a failure; returns the cooldown if this ejected the mirror.
    pub fn record_failure(&self, config: &HealthConfig, now_ms: i64) -> Option<Duration> {
        let on_probation = self.ejected_until_ms.load(Ordering::Acquire) != 0;
        let failures = self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        let result = if on_probation || failures >= config.eject_after {
            let n = self.ejections.fetch_add(1, Ordering::Relaxed);
            let cooldown = config
                .cooldown
                .saturating_mul(1u32 << n.min(20))
                .min(config.cooldown_max);
            self.ejected_until_ms
                .store(now_ms + cooldown.as_millis() as i64, Ordering::Release);
            Some(cooldown)
        } else {
            None
        };
        self.probe_in_flight.store(false, Ordering::Release);
        result
    }

    /// The mirror answered 429 (saying `message`): it is not asked again
    /// before `until_ms`.
    pub fn rate_limit(&self, until_ms: i64, message: Option<&str>) {
        self.rate_limited_until_ms
            .fetch_max(until_ms, Ordering::AcqRel);
        if let Some(message) = message {
            *self
                .rate_limit_message
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(message.into());
        }
        self.probe_in_flight.store(false, Ordering::Release);
    }

    /// What the mirror's last 429 said.
    pub fn rate_limit_message(&self) -> Option<std::sync::Arc<str>> {
        self.rate_limit_message
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether a 429's `Retry-After` is still in force.
    pub fn rate_limited(&self, now_ms: i64) -> bool {
        now_ms < self.rate_limited_until_ms.load(Ordering::Acquire)
    }

    /// When the last 429's `Retry-After` ends (unix ms), while in force.
    pub fn rate_limited_until_ms(&self, now_ms: i64) -> Option<i64> {
        Some(self.rate_limited_until_ms.load(Ordering::Acquire)).filter(|&until| until > now_ms)
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures.load(Ordering::Relaxed)
    }

    /// When the cooldown ends (unix ms), while ejected or on probation.
    pub fn ejected_until_ms(&self) -> Option<i64> {
        Some(self.ejected_until_ms.load(Ordering::Acquire)).filter(|&until| until != 0)
    }
}

/// Health by mirror URL, shared by every remote and kept across reloads.
#[derive(Default)]
pub struct HealthRegistry {
    // A std mutex: taken only while building remotes.
    states: Mutex<HashMap<String, Arc<MirrorHealth>>>,
}

impl HealthRegistry {
    pub fn get(&self, url: &str) -> Arc<MirrorHealth> {
        let mut states = self.states.lock().expect("health registry poisoned");
        states.entry(url.to_string()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> HealthConfig {
        HealthConfig {
            eject_after: 3,
            cooldown: Duration::from_secs(10),
            cooldown_max: Duration::from_secs(35),
            probe_path: None,
            probe_interval: Duration::from_secs(30),
        }
    }

    #[test]
    fn ejects_after_consecutive_failures_and_doubles_the_cooldown() {
        let h = MirrorHealth::default();
        let c = config();
        assert_eq!(h.record_failure(&c, 0), None);
        h.record_success();
        assert_eq!(h.record_failure(&c, 0), None);
        assert_eq!(h.record_failure(&c, 0), None);
        assert_eq!(h.record_failure(&c, 1000), Some(Duration::from_secs(10)));
        assert_eq!(h.state(5000), HealthState::Ejected);
        assert!(!h.try_begin(5000));
        // Cooldown over: one probe at a time.
        assert_eq!(h.state(11_000), HealthState::Probation);
        assert!(h.try_begin(11_000));
        assert!(!h.try_begin(11_000));
        // The probe fails: ejected again, twice as long, then capped.
        assert_eq!(h.record_failure(&c, 11_000), Some(Duration::from_secs(20)));
        assert_eq!(h.state(30_000), HealthState::Ejected);
        assert!(h.try_begin(31_000));
        assert_eq!(h.record_failure(&c, 31_000), Some(Duration::from_secs(35)));
        // A successful probe heals and resets the doubling.
        assert!(h.try_begin(70_000));
        h.record_success();
        assert_eq!(h.state(70_000), HealthState::Healthy);
        for _ in 0..2 {
            h.record_failure(&c, 70_000);
        }
        assert_eq!(h.record_failure(&c, 70_000), Some(Duration::from_secs(10)));
    }
}
