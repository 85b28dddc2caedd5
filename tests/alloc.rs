//! Selection allocates nothing: a counting global allocator around
//! `Selector::order` and `order_accepting` for every strategy.
//!
//! Its own test target without the libtest harness (`harness = false`): the
//! allocator counts every thread of the process, so nothing may run beside
//! the measurement — no other test, no test runner thread. One thread, one
//! check, a panic (so a failing exit status) on the first allocation.

use std::alloc::System;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use mirrorcache::config::Strategy;
use mirrorcache::upstream::select::{DecayWindow, GaugeRegistry, Mirror, Selection, Selector};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

// Counting needs `unsafe impl GlobalAlloc`, which the crate forbids; this
// one is safe to install.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const DECAY: Duration = Duration::from_secs(10);
const CALLS: usize = 1000;

fn main() {
    selection_allocates_nothing();
    println!("test selection_allocates_nothing ... ok");
}

fn selection_allocates_nothing() {
    let registry = GaugeRegistry::default();
    let cases = [
        (Strategy::Single, 1),
        (Strategy::Single, 3),
        (Strategy::RoundRobin, 3),
        (Strategy::RoundRobin, 8),
        (Strategy::LeastConn, 3),
        (Strategy::LeastConn, 8),
        (Strategy::Fastest, 3),
        (Strategy::Fastest, 8),
    ];
    for (strategy, n_mirrors) in cases {
        let mirrors: Vec<Arc<Mirror>> = (0..n_mirrors)
            .map(|i| {
                let url = format!("http://mirror{i}.test/{strategy:?}/");
                Arc::new(Mirror::new(url.parse().unwrap(), &registry))
            })
            .collect();
        // Uneven loads and latencies, so the sorting strategies sort.
        let mut guards = Vec::new();
        for (i, mirror) in mirrors.iter().enumerate() {
            for _ in 0..(i * 7 + 3) % 5 {
                guards.push(mirror.begin_attempt());
            }
            let millis = 2 + (i as u64 * 37) % 80;
            mirror.observe_first_byte(Duration::from_millis(millis), DecayWindow::new(DECAY));
        }
        let selector = Selector::new(strategy, DECAY);
        // Once outside the count: anything initialised on first use.
        take(selector.order(&mirrors));

        let region = Region::new(GLOBAL);
        let mut tried = 0;
        for call in 0..CALLS {
            tried += take(selector.order(black_box(&mirrors)));
            // Ejected mirrors skipped (one, or all: then all are kept).
            let refused = call % (n_mirrors + 1);
            tried += take(selector.order_accepting(black_box(&mirrors), |i| i != refused));
            tried += take(selector.order_accepting(black_box(&mirrors), |_| false));
        }
        let change = region.change();
        assert!(tried >= 3 * CALLS, "{strategy:?}: empty orders");
        assert_eq!(
            (change.allocations, change.reallocations),
            (0, 0),
            "{strategy:?} over {n_mirrors} mirrors allocated in {} calls of each form",
            CALLS
        );
        drop(guards);
    }
}

/// Walks an attempt order as a fetch does; returns how many it held.
fn take(order: impl Iterator<Item = usize>) -> usize {
    order.map(black_box).count()
}
