//! The clock the selection and cache benches time with (shared by both):
//! the measuring thread's on-CPU time by default, wall time with
//! `BENCH_CLOCK=wall`.
#![allow(dead_code)] // each bench uses the part it needs

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// The clock the timings use. By default the measuring thread's on-CPU time,
/// from the kernel's scheduler statistics: the machine is two cores shared
/// with other work, and wall time would count the time a thread waited for a
/// core. `BENCH_CLOCK=wall` switches to wall time (the two agree on an idle
/// machine).
pub struct BenchClock {
    pub wall: WallTime,
    pub on_cpu: bool,
}

impl BenchClock {
    pub fn from_env() -> BenchClock {
        BenchClock {
            wall: WallTime,
            on_cpu: std::env::var("BENCH_CLOCK").map_or(true, |v| v != "wall"),
        }
    }

    /// Nanoseconds on this clock for the whole process: on the on-CPU clock,
    /// the sum over its threads (exact for threads that are not running,
    /// which is all but the caller between runs).
    pub fn process_now(&self) -> u64 {
        if !self.on_cpu {
            return self.thread_now();
        }
        let mut total = self.thread_now();
        let own = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
        let own_id = own
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        for thread in std::fs::read_dir("/proc/self/task").expect("reading /proc/self/task") {
            let thread = thread.unwrap();
            if thread.file_name().to_str() == Some(own_id.as_str()) {
                continue;
            }
            let Ok(stats) = std::fs::read_to_string(thread.path().join("schedstat")) else {
                continue; // the thread has just ended
            };
            total += stats
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
        total
    }

    /// Nanoseconds on this clock for the calling thread.
    pub fn thread_now(&self) -> u64 {
        if self.on_cpu {
            // The first field is the thread's time on a CPU, in nanoseconds,
            // as of the scheduler's last look at the thread: up to a tick
            // (4 ms) old while it runs. Yielding makes the scheduler account
            // the thread's time up to now, so the figure is exact.
            std::thread::yield_now();
            let stats = std::fs::read_to_string("/proc/thread-self/schedstat")
                .expect("reading /proc/thread-self/schedstat (Linux only)");
            stats.split_whitespace().next().unwrap().parse().unwrap()
        } else {
            static ORIGIN: OnceLock<Instant> = OnceLock::new();
            ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
        }
    }
}

impl Measurement for BenchClock {
    type Intermediate = u64;
    type Value = Duration;

    fn start(&self) -> u64 {
        self.thread_now()
    }
    fn end(&self, start: u64) -> Duration {
        Duration::from_nanos(self.thread_now().saturating_sub(start))
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.wall.formatter()
    }
}
