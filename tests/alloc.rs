//! What a counting global allocator can tell: selection allocates nothing
//! (`Selector::order` and `order_accepting` for every strategy), the
//! in-memory tiers (the entry cache, the blob tier) hold no more bytes than
//! their bounds, the entry index grown row by row holds about a record's
//! bytes a row, and a million declared keys take a few megabytes.
//!
//! Its own test target without the libtest harness (`harness = false`): the
//! allocator counts every thread of the process, so nothing may run beside
//! the measurement — no other test, no test runner thread. One thread, one
//! check, a panic (so a failing exit status) on the first allocation.

use std::alloc::System;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::http::HeaderValue;
use bytes::Bytes;
use mirrorcache::cache::Digest;
use mirrorcache::config::Strategy;
use mirrorcache::meta::declared_keys::DeclaredKeys;
use mirrorcache::meta::{entry_cache, Entry, Index};
use mirrorcache::store::HotBlobs;
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
    the_entry_cache_holds_no_more_than_its_memory();
    println!("test the_entry_cache_holds_no_more_than_its_memory ... ok");
    the_blob_tier_holds_no_more_than_its_size();
    println!("test the_blob_tier_holds_no_more_than_its_size ... ok");
    the_entry_index_grown_by_commits_holds_little_more_than_its_records();
    println!("test the_entry_index_grown_by_commits_holds_little_more_than_its_records ... ok");
    a_million_declared_keys_take_a_few_megabytes();
    println!("test a_million_declared_keys_take_a_few_megabytes ... ok");
}

/// Bytes allocated and not freed since `region` began.
fn held(region: &Region<'_, System>) -> i64 {
    let change = region.change();
    // A reallocation's growth is counted in `bytes_allocated` already.
    change.bytes_allocated as i64 - change.bytes_deallocated as i64
}

/// Many more entries than fit, each with what a hit keeps in it (the
/// front end's three header values over one buffer, as `http::respond`
/// builds them): what the cache holds stays within its memory, and the
/// weigher counts no less than an entry really takes.
fn the_entry_cache_holds_no_more_than_its_memory() {
    const MEMORY: u64 = 4 << 20;
    const OFFERED: usize = 40_000;
    let entry = |i: usize| {
        let entry = Entry::new(
            Digest([i as u8; 32]),
            1024,
            Some("application/octet-stream".into()),
            Some(format!("\"{i:x}-400\"")),
            Some("Tue, 01 Dec 2026 10:00:00 GMT".into()),
            0,
        );
        entry.prepared.get_or_init(|| {
            let text = Bytes::from(format!(
                "\"{}\"Tue, 01 Dec 2026 10:00:00 GMTapplication/octet-stream",
                "ab".repeat(32)
            ));
            let value = |a, b| HeaderValue::from_maybe_shared(text.slice(a..b)).unwrap();
            let values = (value(0, 66), value(66, 95), value(95, 119));
            // A hit's clone makes the buffer's count shared.
            drop(values.0.clone());
            (values, SystemTime::UNIX_EPOCH)
        });
        Arc::new(entry)
    };
    let key = |i: usize| format!("npm/left-pad/-/left-pad-1.{i}.0.tgz");

    // What one entry really takes (no eviction: room for all).
    let roomy = entry_cache(1_000, 1 << 30);
    let region = Region::new(GLOBAL);
    for i in 0..1_000 {
        roomy.insert(key(i), entry(i));
    }
    let per_entry = held(&region) / 1_000;
    println!("an entry of the entry cache takes {per_entry} bytes (allocations' headers aside)");
    let counted = entry(7).cached_bytes(&key(7)) as i64;
    assert!(
        counted >= per_entry,
        "an entry takes {per_entry} bytes, the weigher counts {counted}"
    );
    drop(roomy);

    let region = Region::new(GLOBAL);
    let cache = entry_cache(1_000_000, MEMORY);
    for i in 0..OFFERED {
        cache.insert(key(i), entry(i));
    }
    let (count, weighed) = (cache.len(), cache.weight());
    assert!(weighed <= MEMORY, "{weighed} weighed");
    assert!(count > OFFERED / 20, "{count} kept");
    // The cache's own tables (its shards' hash tables and slabs, its record
    // of entries lately evicted) besides the entries: a few hundred KiB.
    let bytes = held(&region);
    assert!(
        bytes <= (MEMORY + MEMORY / 8) as i64,
        "{count} entries hold {bytes} bytes, {MEMORY} allowed"
    );
    // The count bound still holds for entries far under the memory's share.
    let few = entry_cache(10, 1 << 30);
    for i in 0..1_000 {
        few.insert(key(i), entry(i));
    }
    assert!(few.len() <= 10, "{} kept", few.len());
}

/// Rows added one at a time, as commits add them, each naming its own
/// digest, to just past the point where the index's 64 shards outgrow
/// their tables (64 × 3,584 records): a hash table holding 64-byte records
/// whole is then half empty (about 145 bytes a row). The index holds its
/// 30-byte records and their numbers, and the digest table each digest's
/// 48-byte record (its count, and its size or its place when packed: a
/// packed blob costs nothing more) and its number, in at most 106.
fn the_entry_index_grown_by_commits_holds_little_more_than_its_records() {
    const ROWS: usize = 240_000;
    let index = Index::new();
    let region = Region::new(GLOBAL);
    let mut key = String::new();
    for i in 0..ROWS {
        let mut digest = [0u8; 32];
        digest[..8].copy_from_slice(&(i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        let entry = Entry::new(
            Digest(digest),
            1024,
            Some("application/octet-stream".into()),
            None,
            None,
            1_700_000_000_000,
        );
        key.clear();
        key.push_str("r/artifact-");
        key.push_str(&i.to_string());
        index.insert(&key, &entry);
    }
    let per_row = held(&region) / ROWS as i64;
    assert_eq!(index.len(), ROWS);
    println!("the entry index takes {per_row} bytes a row at {ROWS} rows");
    assert!(per_row <= 106, "{per_row} bytes a row");
}

/// The declared keys of a million pins: their Bloom filters, not a set of
/// the keys (17–19 MB as one of their 64-bit hashes).
fn a_million_declared_keys_take_a_few_megabytes() {
    const KEYS: usize = 1_000_000;
    let mut artifact = String::new();
    let region = Region::new(GLOBAL);
    let keys = DeclaredKeys::default();
    for i in 0..KEYS {
        artifact.clear();
        artifact.push_str("pkg/artifact-");
        artifact.push_str(&i.to_string());
        keys.add("r", &artifact);
    }
    let bytes = held(&region);
    println!("the declared keys take {bytes} bytes at {KEYS} keys");
    assert!(bytes < 4_000_000, "{bytes} bytes");
    black_box(keys);
}

/// 1 KiB blobs, many more than fit: the tier holds no more than its size,
/// its bookkeeping included.
fn the_blob_tier_holds_no_more_than_its_size() {
    const SIZE: u64 = 2 << 20;
    let region = Region::new(GLOBAL);
    let tier = HotBlobs::new(SIZE, 1 << 20);
    for i in 0..10_000u32 {
        let mut digest = [0u8; 32];
        digest[..4].copy_from_slice(&i.to_le_bytes());
        tier.insert(Digest(digest), Bytes::from(vec![i as u8; 1024]));
    }
    let bytes = held(&region);
    assert!(
        bytes <= (SIZE + SIZE / 8) as i64,
        "{bytes} bytes held, {SIZE} allowed"
    );
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
