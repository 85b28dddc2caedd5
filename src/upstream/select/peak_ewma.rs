//! One mirror's time to first byte as a peak-sensitive moving average, kept
//! in two atomics so observing and reading never take a lock.
//!
//! The shape is the PeakEWMA of finagle and linkerd: an observation above the
//! estimate replaces it at once (a mirror that turns slow is believed
//! immediately), a lower one is blended in with a weight that grows with the
//! time since the last update (a mirror that recovers is believed gradually,
//! over the decay window). Between observations a reader sees the estimate
//! fade toward zero with the same window, so a mirror that lost all its
//! traffic for being slow looks cheaper again as time passes and is tried
//! again: that is how recovery gets noticed without a health checker.
//!
//! Reads do not write: a selection only loads the two words, so selecting from
//! many threads costs no cache-line traffic on the estimate itself.
//!
//! Times are nanoseconds on one process-wide monotonic clock ([`now_nanos`]);
//! every method takes the time as an argument, so tests drive time by hand
//! and a selection can compare estimates as of a time it did not have to
//! read from the clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Nanoseconds since the first call in this process, monotonic.
pub fn now_nanos() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    // u64 nanoseconds last 584 years of uptime.
    origin.elapsed().as_nanos() as u64
}

/// The decay window, as the factor its reciprocal is multiplied by.
///
/// Holds `1 / window` in 1/ns so that the hot path multiplies rather than
/// divides. Windows below a millisecond are raised to one: a zero window would
/// make every weight `0 × ∞`, and a sub-millisecond memory of latency is no
/// memory at all for requests that take milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct DecayWindow {
    per_nano: f64,
    window: Duration,
}

impl DecayWindow {
    pub fn new(window: Duration) -> DecayWindow {
        let window = window.max(Duration::from_millis(1));
        DecayWindow {
            per_nano: 1.0 / window.as_nanos() as f64,
            window,
        }
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// The weight an estimate `elapsed_nanos` old keeps: `e^(-elapsed/window)`.
    #[inline]
    pub fn weight_after(&self, elapsed_nanos: u64) -> f64 {
        exp_of_negative(elapsed_nanos as f64 * self.per_nano)
    }
}

/// `e^(-x)` for `x >= 0`, to within 3e-6 of it relative.
///
/// A selection computes one weight per mirror; libm's `exp` is exact to the
/// last bit, which a ranking does not need, and is a call per mirror where
/// this is a dozen arithmetic instructions without a branch.
#[inline]
fn exp_of_negative(x: f64) -> f64 {
    debug_assert!(x >= 0.0 || x.is_nan());
    // e^-x = 2^-y with y = x·log2(e) = whole + fraction, whole = round(y):
    // 2^-whole is an exponent field, and 2^-fraction = e^-t with
    // t = fraction·ln 2 in [-0.35, 0.35], where the Taylor series to t^6 is
    // off by at most 0.35^7/7! = 1.3e-7. Past y = 1,000 (and for NaN) the
    // result is held at 2^-1000: zero for any purpose, and still normal.
    let y = (x * std::f64::consts::LOG2_E).min(1_000.0);
    // Adding 1.5·2^52 rounds y to an integer, left in the low mantissa bits.
    const ROUNDER: f64 = 6_755_399_441_055_744.0;
    let shifted = y + ROUNDER;
    let whole = shifted.to_bits() & 0xffff_ffff;
    let t = (y - (shifted - ROUNDER)) * std::f64::consts::LN_2;
    const C: [f64; 7] = [
        1.0,
        -1.0,
        1.0 / 2.0,
        -1.0 / 6.0,
        1.0 / 24.0,
        -1.0 / 120.0,
        1.0 / 720.0,
    ];
    let series = C[0] + t * (C[1] + t * (C[2] + t * (C[3] + t * (C[4] + t * (C[5] + t * C[6])))));
    series * f64::from_bits((1023 - whole) << 52)
}

/// A peak-sensitive EWMA of a latency, in nanoseconds; zero means "never
/// observed" (or faded out entirely).
#[derive(Debug, Default)]
pub struct PeakEwma {
    /// The estimate at the last update, as `f64` bits.
    estimate_bits: AtomicU64,
    /// When the estimate was last updated ([`now_nanos`]).
    updated_at: AtomicU64,
}

impl PeakEwma {
    /// Folds in one observed latency.
    ///
    /// The estimate and its timestamp are two words, not one: two observers
    /// racing may pair one's estimate with the other's timestamp. That only
    /// shifts when the fade of that estimate starts by the width of the race
    /// (nanoseconds against a window of seconds), so it is not worth a lock.
    pub fn observe(&self, sample: Duration, now: u64, decay: DecayWindow) {
        let sample = sample.as_nanos() as f64;
        let updated_at = self.updated_at.load(Ordering::Relaxed);
        let keep = decay.weight_after(now.saturating_sub(updated_at));
        // Relaxed throughout: the estimate publishes no other data, and a
        // selection that reads it a moment late only picks by older news.
        let mut current = self.estimate_bits.load(Ordering::Relaxed);
        loop {
            let estimate = f64::from_bits(current);
            let next = if sample >= estimate {
                sample
            } else {
                estimate * keep + sample * (1.0 - keep)
            };
            match self.estimate_bits.compare_exchange_weak(
                current,
                next.to_bits(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        self.updated_at.fetch_max(now, Ordering::Relaxed);
    }

    /// The estimate as seen at `now`: the last one, faded by the time since.
    #[inline]
    pub fn estimate_at(&self, now: u64, decay: DecayWindow) -> f64 {
        self.last().faded_to(now, decay)
    }

    /// The estimate as last updated, unfaded, with the time of that update.
    #[inline]
    pub fn last(&self) -> LastEstimate {
        LastEstimate {
            nanos: f64::from_bits(self.estimate_bits.load(Ordering::Relaxed)),
            updated_at: self.updated_at.load(Ordering::Relaxed),
        }
    }
}

/// A [`PeakEwma`] as read once: what it said and when it said it.
#[derive(Clone, Copy, Debug, Default)]
pub struct LastEstimate {
    /// Nanoseconds; 0 = never observed.
    pub nanos: f64,
    pub updated_at: u64,
}

impl LastEstimate {
    /// The estimate faded from its update to `at`; unfaded if `at` is earlier.
    #[inline]
    pub fn faded_to(&self, at: u64, decay: DecayWindow) -> f64 {
        // Never observed stays 0: the weight is finite.
        self.nanos * decay.weight_after(at.saturating_sub(self.updated_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const SECOND: u64 = 1_000 * MS;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn the_fast_exponential_matches_libm() {
        let mut x = 0.0;
        while x < 690.0 {
            let (fast, exact) = (exp_of_negative(x), (-x).exp());
            assert!(
                (fast - exact).abs() <= 3e-6 * exact,
                "e^-{x}: {fast} vs {exact}"
            );
            x = x * 1.1 + 0.001;
        }
        assert_eq!(exp_of_negative(0.0), 1.0);
        for beyond in [1e9, f64::INFINITY, f64::NAN] {
            let held = exp_of_negative(beyond);
            assert!(held > 0.0 && held < 1e-300, "e^-{beyond}: {held}");
        }
    }

    #[test]
    fn unobserved_is_zero() {
        let ewma = PeakEwma::default();
        assert_eq!(
            ewma.estimate_at(5 * SECOND, DecayWindow::new(ms(10_000))),
            0.0
        );
    }

    #[test]
    fn a_peak_replaces_at_once_and_a_dip_blends_in() {
        let decay = DecayWindow::new(ms(10_000));
        let ewma = PeakEwma::default();
        ewma.observe(ms(20), SECOND, decay);
        assert!(close(ewma.estimate_at(SECOND, decay), 20.0 * MS as f64));
        // Higher: believed at once, however recent the last update.
        ewma.observe(ms(80), SECOND, decay);
        assert!(close(ewma.estimate_at(SECOND, decay), 80.0 * MS as f64));
        // Lower, one window later: the old estimate keeps e^-1 of its weight.
        ewma.observe(ms(2), 11 * SECOND, decay);
        let keep = (-1.0f64).exp();
        let expected = 80.0 * MS as f64 * keep + 2.0 * MS as f64 * (1.0 - keep);
        assert!(close(ewma.estimate_at(11 * SECOND, decay), expected));
        // Lower, at the same instant: no time has passed, so nothing moves.
        ewma.observe(ms(1), 11 * SECOND, decay);
        assert!(close(ewma.estimate_at(11 * SECOND, decay), expected));
    }

    #[test]
    fn an_unobserved_estimate_fades_toward_zero() {
        let decay = DecayWindow::new(ms(10_000));
        let ewma = PeakEwma::default();
        ewma.observe(ms(80), 0, decay);
        let after_one_window = ewma.estimate_at(10 * SECOND, decay);
        assert!(close(after_one_window, 80.0 * MS as f64 * (-1.0f64).exp()));
        assert!(ewma.estimate_at(100 * SECOND, decay) < 0.01 * MS as f64);
        // A reader from before the update (racing clocks) sees it unfaded.
        assert!(close(ewma.estimate_at(0, decay), 80.0 * MS as f64));
    }

    #[test]
    fn a_zero_window_is_raised_to_a_millisecond() {
        let decay = DecayWindow::new(Duration::ZERO);
        assert_eq!(decay.window(), ms(1));
        let ewma = PeakEwma::default();
        ewma.observe(ms(5), 0, decay);
        let estimate = ewma.estimate_at(0, decay);
        assert!(estimate.is_finite() && estimate > 0.0);
    }
}
