//! The entry index's tests (`super`).

use super::*;

fn entry(n: u8, last_modified: Option<&str>) -> Entry {
    Entry::new(
        Digest([n; 32]),
        u64::from(n) * 1000,
        Some("application/x-test".into()),
        Some("\"etag\"".into()),
        last_modified.map(str::to_string),
        1_700_000_000_123,
    )
}

#[test]
fn records_give_back_their_entries_and_go_with_their_scope() {
    let index = Index::new();
    index.set_complete(true);
    assert!(matches!(index.get("r/a"), Found::Absent));
    index.insert("r/a", &entry(1, Some("Sun, 06 Nov 1994 08:49:37 GMT")));
    index.insert("r/b", &entry(2, None));
    index.insert("s/a", &entry(1, None));
    let Found::Entry(a) = index.get("r/a") else {
        panic!("r/a is listed")
    };
    assert_eq!(
        (a.digest, a.size, a.fetched_at_ms),
        (Digest([1; 32]), 1000, 1_700_000_000_123)
    );
    assert_eq!(a.content_type.as_deref(), Some("application/x-test"));
    assert_eq!(
        a.upstream_last_modified.as_deref(),
        Some("Sun, 06 Nov 1994 08:49:37 GMT")
    );
    assert!(a.upstream_etag.is_none() && a.from_index);
    // Not a date: listed, and asked of the database.
    index.insert("r/c", &entry(3, Some("yesterday")));
    assert!(matches!(index.get("r/c"), Found::Unknown));
    index.remove_digest(Some("r"), &Digest([1; 32]));
    assert!(matches!(index.get("r/a"), Found::Absent));
    assert!(matches!(index.get("s/a"), Found::Entry(_)));
    index.remove_remote("r");
    assert!(matches!(index.get("r/b"), Found::Absent));
    assert_eq!(index.len(), 1);
    assert_eq!(RECORD_BYTES, 72);
    // Tables nearly full at start-up, whatever the count.
    for expected in [10_000, 1_000_000, 1 << 20, 5_000_000] {
        let (shards, room) = layout(expected);
        assert!(shards >= SHARDS && shards * room >= expected + expected / 10);
        assert!(
            shards * room < (expected + expected / 10) * 8 / 7 + room,
            "{expected}"
        );
    }
    let partial = Index::new();
    assert!(matches!(partial.get("r/a"), Found::Unknown));
}

#[test]
fn the_loader_brings_back_nothing_a_writer_changed_during_the_load() {
    let index = Index::new();
    index.begin_load();
    // Rows the loader read before the writers ran.
    let keys = ["r/gone", "r/replaced", "r/kept", "s/purged", "r/evicted"];
    let mut rows: Vec<(Key, Record)> = keys
        .iter()
        .zip(1u8..)
        .map(|(key, n)| {
            let fields = Fields {
                digest: Digest([n; 32]),
                size: u64::from(n),
                content_type: Some("text/plain"),
                last_modified: None,
                fetched_at_ms: 1,
                kept: false,
            };
            (index.key(key), index.record(&key[..1], &fields))
        })
        .collect();
    index.remove("r/gone");
    index.insert("r/replaced", &entry(9, None));
    index.remove_remote("s");
    index.remove_digest(None, &Digest([5; 32]));
    assert!(matches!(index.get("r/kept"), Found::Unknown));
    index.load(&mut rows);
    index.end_load(true);
    let digest = |key| match index.get(key) {
        Found::Entry(e) => Some(e.digest.0[0]),
        Found::Absent => None,
        Found::Unknown => panic!("{key}: complete after the load"),
    };
    assert_eq!(digest("r/gone"), None);
    assert_eq!(digest("r/replaced"), Some(9));
    assert_eq!(digest("r/kept"), Some(3));
    assert_eq!(digest("s/purged"), None);
    assert_eq!(digest("r/evicted"), None);
    // The counts are the records': none for a row the loader skipped.
    let named: Vec<u8> = (1..=9)
        .filter(|&n| index.references(&Digest([n; 32])))
        .collect();
    assert_eq!(named, [3, 9]);
    // After the load nothing is noted: a later load (none) or insert is plain.
    index.insert("s/purged", &entry(4, None));
    assert_eq!(digest("s/purged"), Some(4));
}

#[test]
fn a_row_read_before_a_commit_replaced_it_is_not_put_back() {
    let index = Index::new();
    index.insert("r/tag", &entry(5, None));
    // Read as 4 a while ago; the commit of 5 came between: not put back,
    // so 5 stays counted and 4 is not.
    assert!(!index.insert_unless_other("r/tag", &entry(4, None)));
    assert!(index.references(&Digest([5; 32])) && !index.references(&Digest([4; 32])));
    assert!(index.insert_unless_other("r/tag", &entry(5, None)));
    assert!(index.insert_unless_other("r/new", &entry(6, None)));
    // A deletion takes only the record of the bytes its row named.
    index.remove_named("r/tag", Some(&Digest([4; 32])));
    assert!(index.references(&Digest([5; 32])));
    index.remove_named("r/tag", None);
    assert!(index.references(&Digest([5; 32])));
    index.remove_named("r/tag", Some(&Digest([5; 32])));
    assert!(!index.references(&Digest([5; 32])) && index.references(&Digest([6; 32])));
    assert_eq!((index.len(), index.digests()), (1, 1));
}
