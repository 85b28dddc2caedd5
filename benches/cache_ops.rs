//! The in-memory metadata cache of the hit path (`meta::entry_cache`, a quick_cache
//! sync cache of `remote/path` → entry): the cost of one operation when 1, 64
//! or 1,024 tasks hammer it at once. The cache holds 4,096 keys' worth of
//! room many times over (no eviction) and starts with half of them; each
//! operation picks a random key and, at random, one of a pair of operations:
//! `Get+Put`, `Get+Delete` or `Put+Delete`. Two more `Get+Put` runs at 64
//! tasks use 256 and 65,536 keys, to show what the key count does to
//! collisions. A put inserts a fresh `String` key (as the fill does) and a
//! shared `Arc<Entry>`.
//!
//! Tasks are Tokio tasks on a runtime with two workers (the proxy's shape
//! on this machine), each yielding after every 8 operations as a handler
//! does between requests, so all of them interleave. The figure is the CPU
//! time of the process over the operations: what one operation costs,
//! contention and task switching included (with `BENCH_CLOCK=wall`, wall
//! time over operations instead, about half of it on two idle cores). A
//! counting global allocator measures allocations per operation, printed
//! after the timings.
//!
//! Command (as recorded):
//!     cargo bench --bench cache_ops -- --warm-up-time 1 --measurement-time 3
//! (those two times are also the defaults set below).
//! Results are recorded in BENCHMARKS.md, section "Metadata cache operations".

#[path = "support/clock.rs"]
mod clock;

use clock::BenchClock;
use std::alloc::System;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, Criterion};
use mirrorcache::cache::Digest;
use mirrorcache::meta::{entry_cache, Entry, EntryCache};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

// Counts every allocation in the process; safe to install (the crate forbids
// `unsafe`, and a hand-written counting allocator needs it).
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const KEYS: usize = 4_096;
/// Room for every key many times over: the bench measures the operations, not eviction.
const CAPACITY: u64 = 100_000;
const TASK_COUNTS: [usize; 3] = [1, 64, 1_024];
/// Each task does at least this many operations per sample, so that
/// spawning and joining tasks stays a small part of what is measured.
const MIN_OPS_PER_TASK: u64 = 256;
/// A task yields to the runtime after this many operations.
const OPS_BETWEEN_YIELDS: u64 = 8;

#[derive(Clone, Copy, Debug)]
enum Pair {
    GetPut,
    GetDelete,
    PutDelete,
}

impl Pair {
    fn name(self) -> &'static str {
        match self {
            Pair::GetPut => "Get+Put",
            Pair::GetDelete => "Get+Delete",
            Pair::PutDelete => "Put+Delete",
        }
    }
}

/// A cache pre-filled with every other key, and the keys.
struct Workload {
    cache: EntryCache,
    keys: Vec<String>,
    entry: Arc<Entry>,
    pair: Pair,
}

impl Workload {
    fn new(pair: Pair, n_keys: usize) -> Workload {
        let cache = entry_cache(CAPACITY, CAPACITY * 4096);
        let keys: Vec<String> = (0..n_keys)
            .map(|i| format!("debian/pool/main/p/pkg{i}/pkg{i}_1.0_amd64.deb"))
            .collect();
        let entry = Arc::new(Entry::new(Digest([7; 32]), 123_456, None, None, None, 0));
        for key in keys.iter().step_by(2) {
            cache.insert(key.clone(), entry.clone());
        }
        Workload {
            cache,
            keys,
            entry,
            pair,
        }
    }

    /// One operation, chosen and keyed by `random`.
    #[inline]
    fn operate(&self, random: u64) {
        let key = &self.keys[(random >> 1) as usize % self.keys.len()];
        let first_of_pair = random & 1 == 0;
        match (self.pair, first_of_pair) {
            (Pair::GetPut | Pair::GetDelete, true) => {
                black_box(self.cache.get(key.as_str()));
            }
            (Pair::GetPut, false) | (Pair::PutDelete, true) => {
                self.cache.insert(key.clone(), self.entry.clone());
            }
            (Pair::GetDelete | Pair::PutDelete, false) => {
                self.cache.remove(key.as_str());
            }
        }
    }
}

/// `total_ops` operations shared by `n_tasks` Tokio tasks on the two-worker
/// runtime, started together; each yields after every few operations, as a
/// request handler would between requests, so all the tasks interleave. The
/// time is the CPU time of the process's threads over the run (on-CPU clock)
/// or its wall time.
fn run_tasks(
    clock: &BenchClock,
    runtime: &tokio::runtime::Runtime,
    workload: &Arc<Workload>,
    n_tasks: usize,
    total_ops: u64,
) -> Duration {
    let per_task = if total_ops == 0 {
        0
    } else {
        total_ops.div_ceil(n_tasks as u64).max(MIN_OPS_PER_TASK)
    };
    let began = clock.process_now();
    runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for task_no in 0..n_tasks {
            let workload = workload.clone();
            tasks.spawn(async move {
                // xorshift, seeded apart per task: cheap next to the cache.
                let mut random = 0x9e37_79b9_7f4a_7c15_u64 ^ (task_no as u64 + 1);
                for op_no in 0..per_task {
                    random ^= random << 13;
                    random ^= random >> 7;
                    random ^= random << 17;
                    workload.operate(random);
                    if op_no % OPS_BETWEEN_YIELDS == OPS_BETWEEN_YIELDS - 1 {
                        tokio::task::yield_now().await;
                    }
                }
            });
        }
        tasks.join_all().await;
    });
    let elapsed = Duration::from_nanos(clock.process_now() - began);
    if total_ops == 0 {
        return elapsed;
    }
    // Scaled to the operations asked for: rounding up may have done more.
    elapsed.mul_f64(total_ops as f64 / (per_task * n_tasks as u64) as f64)
}

/// The proxy's runtime shape on this machine: one worker per core.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
}

/// The cases as (group, name in the group, pair, tasks, keys): every pair at
/// every task count, then the key-count variants.
fn cases() -> Vec<(&'static str, String, Pair, usize, usize)> {
    let mut cases = Vec::new();
    for pair in [Pair::GetPut, Pair::GetDelete, Pair::PutDelete] {
        for n_tasks in TASK_COUNTS {
            cases.push((pair.name(), n_tasks.to_string(), pair, n_tasks, KEYS));
        }
    }
    for n_keys in [256, 65_536] {
        let name = format!("64/{n_keys}keys");
        cases.push((Pair::GetPut.name(), name, Pair::GetPut, 64, n_keys));
    }
    cases
}

fn cache_ops(c: &mut Criterion<BenchClock>) {
    let clock = BenchClock::from_env();
    let runtime = runtime();
    for (group, name, pair, n_tasks, n_keys) in cases() {
        let workload = Arc::new(Workload::new(pair, n_keys));
        let mut group = c.benchmark_group(group);
        // A sample of 1,024 tasks is at least 262,144 operations; fewer
        // samples keep the run within its time.
        group.sample_size(if n_tasks > 64 { 20 } else { 100 });
        group.bench_function(name, |b| {
            b.iter_custom(|iters| run_tasks(&clock, &runtime, &workload, n_tasks, iters))
        });
        group.finish();
    }
}

/// Heap allocations per operation, counted over many operations and printed.
fn allocations(_: &mut Criterion<BenchClock>) {
    const OPS: u64 = 200_000;
    println!("\nallocations per operation ({OPS} operations per case)");
    println!("{:<28} {:>10}", "case", "allocs/op");
    // The wall clock here: reading the on-CPU one allocates.
    let clock = BenchClock {
        wall: WallTime,
        on_cpu: false,
    };
    let runtime = runtime();
    for (group, name, pair, n_tasks, n_keys) in cases() {
        let name = format!("{group}/{name}");
        let workload = Arc::new(Workload::new(pair, n_keys));
        // Spawning tasks allocates too: count a run of no operations and take
        // it off.
        let region = Region::new(GLOBAL);
        run_tasks(&clock, &runtime, &workload, n_tasks, 0);
        let start_up = region.change().allocations;
        let region = Region::new(GLOBAL);
        run_tasks(&clock, &runtime, &workload, n_tasks, OPS);
        let allocations = region.change().allocations.saturating_sub(start_up);
        println!("{name:<28} {:>10.3}", allocations as f64 / OPS as f64);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(BenchClock::from_env())
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = cache_ops, allocations
}
criterion_main!(benches);
