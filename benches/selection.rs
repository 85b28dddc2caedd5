//! Mirror selection: what choosing the attempt order costs per miss, for each
//! strategy, and what counting one attempt (`begin_attempt` + guard drop)
//! costs. Each case runs on one thread, then on two threads at once on the
//! same selector and mirrors (`…/2threads`, the time per operation as each
//! thread sees it), to show whether shared state turns into a contention
//! cliff. Sorting strategies run with uneven in-flight counts preloaded (and,
//! for `fastest`, observed latencies), so the sorts do real work. Times are
//! the measuring thread's on-CPU time (see `BenchClock`: the machine is
//! shared; `BENCH_CLOCK=wall` for wall time). A counting global allocator
//! then measures heap allocations per operation, printed as a table after
//! the timings.
//!
//! Command (as recorded):
//!     cargo bench --bench selection -- --warm-up-time 1 --measurement-time 3
//! (those two times are also the defaults set below).
//! Results are recorded in BENCHMARKS.md, section "Selection".

#[path = "support/clock.rs"]
mod clock;

use clock::BenchClock;
use std::alloc::System;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, Criterion};
use mirrorcache::config::Strategy;
use mirrorcache::upstream::select::{DecayWindow, GaugeRegistry, InflightGuard, Mirror, Selector};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use url::Url;

// Counts every allocation in the process; safe to install (the crate forbids
// `unsafe`, and a hand-written counting allocator needs it).
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const LATENCY_DECAY: Duration = Duration::from_secs(10);

/// One benchmark case: a selector over a pool of mirrors, with load preloaded.
struct Pool {
    mirrors: Vec<Arc<Mirror>>,
    selector: Selector,
}

impl Pool {
    fn new(strategy: Strategy, n_mirrors: usize, registry: &GaugeRegistry) -> Pool {
        let mirrors = (0..n_mirrors)
            .map(|i| {
                let url = Url::parse(&format!("http://mirror{i}.example/{strategy:?}/")).unwrap();
                Arc::new(Mirror::new(url, registry))
            })
            .collect();
        Pool {
            mirrors,
            selector: Selector::new(strategy, LATENCY_DECAY),
        }
    }

    /// Uneven in-flight counts (0 to 4, not sorted by index) and, for
    /// `fastest`, uneven first-byte latencies; the guards must be kept alive.
    fn preload_skew(&self) -> Vec<InflightGuard<'_>> {
        let decay = DecayWindow::new(LATENCY_DECAY);
        let mut guards = Vec::new();
        for (i, mirror) in self.mirrors.iter().enumerate() {
            for _ in 0..(i * 7 + 3) % 5 {
                guards.push(mirror.begin_attempt());
            }
            let millis = 2 + (i as u64 * 37) % 80;
            mirror.observe_first_byte(Duration::from_millis(millis), decay);
        }
        guards
    }

    /// The call `upstream::fetch` makes on every miss.
    #[inline]
    fn select(&self) -> usize {
        let order = self
            .selector
            .order_accepting(black_box(&self.mirrors), |_| true);
        black_box(order).next().unwrap_or(0)
    }

    #[inline]
    fn begin_end_attempt(&self) {
        drop(black_box(self.mirrors[0].begin_attempt()));
    }
}

/// The cases, by the name they are reported under.
fn cases(registry: &GaugeRegistry) -> Vec<(String, Pool)> {
    let mut cases = vec![(
        "SingleUrl".to_string(),
        Pool::new(Strategy::Single, 1, registry),
    )];
    for n in [3, 8] {
        cases.push((
            format!("RoundRobin/{n}"),
            Pool::new(Strategy::RoundRobin, n, registry),
        ));
    }
    for n in [3, 8, 16] {
        cases.push((
            format!("LeastConn/{n}"),
            Pool::new(Strategy::LeastConn, n, registry),
        ));
    }
    for n in [3, 8, 16] {
        cases.push((
            format!("Fastest/{n}"),
            Pool::new(Strategy::Fastest, n, registry),
        ));
    }
    cases
}

/// `iters` operations on each of `n_threads` threads started together; the
/// time is the slowest thread's on `clock`, so it is the per-thread cost of
/// one operation times `iters` under that much concurrency.
fn run_threads(
    clock: &BenchClock,
    n_threads: usize,
    iters: u64,
    op: &(impl Fn() + Sync),
) -> Duration {
    let start = Barrier::new(n_threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..n_threads)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    let began = clock.thread_now();
                    for _ in 0..iters {
                        op();
                    }
                    clock.thread_now() - began
                })
            })
            .collect();
        let slowest = workers.into_iter().map(|w| w.join().unwrap()).max();
        Duration::from_nanos(slowest.unwrap())
    })
}

fn selection(c: &mut Criterion<BenchClock>) {
    let clock = BenchClock::from_env();
    let registry = GaugeRegistry::default();
    let cases = cases(&registry);
    for (name, pool) in &cases {
        let _load = pool.preload_skew();
        c.bench_function(name, |b| b.iter(|| pool.select()));
        c.bench_function(&format!("{name}/2threads"), |b| {
            b.iter_custom(|iters| {
                run_threads(&clock, 2, iters, &|| {
                    pool.select();
                })
            })
        });
    }
    let pool = Pool::new(Strategy::Single, 1, &registry);
    c.bench_function("BeginEndAttempt", |b| b.iter(|| pool.begin_end_attempt()));
    c.bench_function("BeginEndAttempt/2threads", |b| {
        b.iter_custom(|iters| run_threads(&clock, 2, iters, &|| pool.begin_end_attempt()))
    });
}

/// Heap allocations per operation, counted over many operations (on one
/// thread, then on two) and printed; criterion does not measure them.
fn allocations(_: &mut Criterion<BenchClock>) {
    const OPS: u64 = 100_000;
    let registry = GaugeRegistry::default();
    let cases = cases(&registry);
    let begin_end = Pool::new(Strategy::Single, 1, &registry);
    // The wall clock here: reading the on-CPU one allocates.
    let clock = BenchClock {
        wall: WallTime,
        on_cpu: false,
    };
    println!("\nallocations per operation ({OPS} operations per thread)");
    println!("{:<28} {:>10} {:>10}", "case", "1 thread", "2 threads");
    let count = |op: &(dyn Fn() + Sync)| -> (f64, f64) {
        let region = Region::new(GLOBAL);
        for _ in 0..OPS {
            op();
        }
        let sequential = region.change().allocations as f64 / OPS as f64;
        // Thread start-up allocates too (its name, its stack guard): count
        // a run of zero operations and take it off.
        let region = Region::new(GLOBAL);
        run_threads(&clock, 2, 0, &op);
        let start_up = region.change().allocations;
        let region = Region::new(GLOBAL);
        run_threads(&clock, 2, OPS, &op);
        let parallel = region.change().allocations.saturating_sub(start_up) as f64;
        (sequential, parallel / (2 * OPS) as f64)
    };
    for (name, pool) in &cases {
        let _load = pool.preload_skew();
        let (sequential, parallel) = count(&|| {
            pool.select();
        });
        println!("{name:<28} {sequential:>10.3} {parallel:>10.3}");
    }
    let (sequential, parallel) = count(&|| begin_end.begin_end_attempt());
    println!(
        "{:<28} {sequential:>10.3} {parallel:>10.3}",
        "BeginEndAttempt"
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(BenchClock::from_env())
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = selection, allocations
}
criterion_main!(benches);
