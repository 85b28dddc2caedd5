//! Failed logins per peer address: a peer past [`MAX_FAILURES`] in a
//! [`WINDOW`] is refused (429) until the window ends; other peers go on.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed logins a peer may have in one window.
pub const MAX_FAILURES: u32 = 100;
/// The window failures are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Peers tracked before expired windows are swept out.
const SWEEP_AT: usize = 10_000;

#[derive(Default)]
pub struct FailureLimiter {
    // A std mutex: held for a map lookup, never across an await.
    peers: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl FailureLimiter {
    /// Whether `peer` is refused for now.
    pub fn is_limited(&self, peer: IpAddr) -> bool {
        let peers = self.peers.lock().expect("limiter poisoned");
        peers
            .get(&peer)
            .is_some_and(|(start, n)| start.elapsed() < WINDOW && *n >= MAX_FAILURES)
    }

    /// Counts one failed login of `peer`.
    pub fn fail(&self, peer: IpAddr) {
        let mut peers = self.peers.lock().expect("limiter poisoned");
        if peers.len() >= SWEEP_AT {
            peers.retain(|_, (start, _)| start.elapsed() < WINDOW);
        }
        let slot = peers.entry(peer).or_insert((Instant::now(), 0));
        if slot.0.elapsed() >= WINDOW {
            *slot = (Instant::now(), 0);
        }
        slot.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_peer_is_limited_and_another_is_not() {
        let limiter = FailureLimiter::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..MAX_FAILURES {
            assert!(!limiter.is_limited(a));
            limiter.fail(a);
        }
        assert!(limiter.is_limited(a));
        assert!(!limiter.is_limited(b));
    }
}
