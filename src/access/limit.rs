//! Failed logins per peer: a peer past [`MAX_FAILURES`] in a [`WINDOW`] is
//! refused (429) until the window ends; other peers go on. An attempt is
//! counted when it starts and forgiven when it succeeds, so a burst of
//! concurrent wrong passwords is cut off at the limit instead of all
//! reaching bcrypt before the first failure is known. An IPv6 peer is
//! counted by its /64 (one host usually has the whole prefix).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
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

/// What a peer is counted as: an IPv4 address, an IPv6 /64.
fn counted_as(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => peer,
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
    }
}

impl FailureLimiter {
    /// Whether `peer` is refused for now (the tests' view; a login asks
    /// [`FailureLimiter::begin`]).
    #[cfg(test)]
    pub fn is_limited(&self, peer: IpAddr) -> bool {
        let peers = self.peers.lock().expect("limiter poisoned");
        peers
            .get(&counted_as(peer))
            .is_some_and(|(start, n)| start.elapsed() < WINDOW && *n >= MAX_FAILURES)
    }

    /// Starts an attempt of `peer`, counted as a failure until
    /// [`FailureLimiter::forgive`]: `false` (and nothing counted) when the
    /// peer is limited.
    pub fn begin(&self, peer: IpAddr) -> bool {
        let mut peers = self.peers.lock().expect("limiter poisoned");
        if peers.len() >= SWEEP_AT {
            peers.retain(|_, (start, _)| start.elapsed() < WINDOW);
        }
        let slot = peers.entry(counted_as(peer)).or_insert((Instant::now(), 0));
        if slot.0.elapsed() >= WINDOW {
            *slot = (Instant::now(), 0);
        }
        if slot.1 >= MAX_FAILURES {
            return false;
        }
        slot.1 += 1;
        true
    }

    /// The attempt `begin` counted succeeded: it is not a failure.
    pub fn forgive(&self, peer: IpAddr) {
        let mut peers = self.peers.lock().expect("limiter poisoned");
        if let Some(slot) = peers.get_mut(&counted_as(peer)) {
            slot.1 = slot.1.saturating_sub(1);
        }
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
            assert!(limiter.begin(a));
        }
        assert!(limiter.is_limited(a));
        assert!(!limiter.begin(a));
        assert!(!limiter.is_limited(b));
    }

    #[test]
    fn attempts_count_when_they_start_and_successes_are_forgiven() {
        let limiter = FailureLimiter::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        // Concurrent attempts: each counted before any is decided.
        let started = (0..MAX_FAILURES * 3).filter(|_| limiter.begin(a)).count();
        assert_eq!(started, MAX_FAILURES as usize);
        limiter.forgive(a);
        assert!(!limiter.is_limited(a));
        assert!(limiter.begin(a));
        assert!(limiter.is_limited(a));
    }

    #[test]
    fn ipv6_peers_are_counted_by_their_64() {
        let limiter = FailureLimiter::default();
        for i in 0..MAX_FAILURES {
            let peer: IpAddr = format!("2001:db8:1:2::{:x}", i + 1).parse().unwrap();
            assert!(limiter.begin(peer));
        }
        assert!(limiter.is_limited("2001:db8:1:2:ffff::1".parse().unwrap()));
        assert!(!limiter.is_limited("2001:db8:1:3::1".parse().unwrap()));
        assert!(!limiter.is_limited("::ffff:10.0.0.1".parse().unwrap()));
    }
}
