//! The hedge delay: how long an attempt may go without a response head
//! before the next mirror is started beside it ("The Tail at Scale"'s backup
//! requests; Finagle's `BackupRequestFilter`).
//!
//! By default (`hedge_after = "auto"`) the delay is learnt: `MULTIPLE` times
//! the mirror's peak-EWMA first-byte time (the estimate `fastest` keeps), or,
//! for a mirror never measured, of the slowest measured mirror of its set;
//! clamped to [`FLOOR`, `CAP`]. The floor keeps healthy mirrors from being
//! hedged on ordinary jitter (a hedge doubles that fetch's upstream traffic);
//! the cap bounds what a mirror that accepts connections and never answers
//! can cost a client.

use std::time::Duration;

use super::select::now_nanos;
use super::{MirrorSet, Remote};
use crate::config::Hedge;

const MULTIPLE: f64 = 4.0;
const FLOOR: Duration = Duration::from_millis(250);
const CAP: Duration = Duration::from_secs(2);

/// The hedge delay for an attempt on `set.mirrors[mirror_idx]`; `None` when
/// hedging is off. Never longer than `first_byte_timeout` (past it, the
/// attempt has failed anyway).
pub fn delay(remote: &Remote, set: &MirrorSet, mirror_idx: usize) -> Option<Duration> {
    let delay = match remote.config.hedge {
        Hedge::Off => return None,
        Hedge::After(delay) => delay,
        Hedge::Auto => {
            let (now, decay) = (now_nanos(), set.selector.first_byte_decay());
            let own = set.mirrors[mirror_idx].first_byte_estimate(now, decay);
            let basis = if own > 0.0 {
                own
            } else {
                set.mirrors
                    .iter()
                    .map(|m| m.first_byte_estimate(now, decay))
                    .fold(0.0, f64::max)
            };
            if basis > 0.0 {
                Duration::from_nanos((basis * MULTIPLE) as u64).clamp(FLOOR, CAP)
            } else {
                CAP
            }
        }
    };
    Some(delay.min(remote.config.first_byte_timeout))
}
