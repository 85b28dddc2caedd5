//! The group commit's blobs: written in place where they are fresh, never
//! trusted in place unless whole, nothing left behind by a failure.

use std::fs;
use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::cache::budget::Budget;

fn open(dir: &std::path::Path, max: u64) -> ContentStore {
    ContentStore::open(dir, Arc::new(Budget::new(max))).unwrap()
}

/// What a crash before its batch's `syncfs` may leave of a blob written
/// in place: its name, with bytes that are not the blob's.
fn torn(store: &ContentStore, digest: &Digest) {
    fs::write(store.blob_path(digest), b"not the blob's bytes").unwrap();
}

fn fresh(bytes: &'static [u8]) -> (BatchBody, Digest) {
    (
        BatchBody::Fresh(Bytes::from_static(bytes)),
        Digest::of(bytes),
    )
}

/// Files in `tmp/` other than the owner's lock.
fn temp_files(dir: &std::path::Path) -> usize {
    fs::read_dir(dir.join("tmp"))
        .unwrap()
        .filter(|e| {
            !e.as_ref()
                .unwrap()
                .file_name()
                .to_str()
                .unwrap()
                .ends_with(".lock")
        })
        .count()
}

#[test]
fn fresh_bodies_are_written_in_place_with_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), u64::MAX);
    let bodies: Vec<Vec<u8>> = (0..20u8).map(|n| vec![n; 100 + n as usize]).collect();
    let items = bodies
        .iter()
        .map(|b| (BatchBody::Fresh(Bytes::from(b.clone())), Digest::of(b)))
        .collect();
    let results = store.commit_synced(items);
    assert!(results.iter().all(|r| matches!(r, Ok(true))), "{results:?}");
    assert_eq!(
        store.next_temp.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    for body in &bodies {
        assert_eq!(&fs::read(store.blob_path(&Digest::of(body))).unwrap(), body);
    }
    assert_eq!(store.budget.in_progress(), 0);
    assert_eq!(temp_files(dir.path()), 0);
}

#[test]
fn a_blob_in_place_is_trusted_only_when_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), u64::MAX);
    // In a batch: the name is taken, so through a temp file, which
    // replaces the torn one.
    let (body, digest) = fresh(b"whole");
    torn(&store, &digest);
    let results = store.commit_synced(vec![(body, digest), fresh(b"another")]);
    assert!(matches!(results[..], [Ok(true), Ok(true)]), "{results:?}");
    assert_eq!(fs::read(store.blob_path(&digest)).unwrap(), b"whole");
    // One at a time, from a temp file.
    let digest = Digest::of(b"whole too");
    torn(&store, &digest);
    let temp = store.create_temp_holding(b"whole too").unwrap();
    assert!(store.commit_one(temp, &digest).unwrap());
    assert_eq!(fs::read(store.blob_path(&digest)).unwrap(), b"whole too");
    // A whole blob in place is not written again, either way.
    let temp = store.create_temp_holding(b"whole too").unwrap();
    assert!(!store.commit_one(temp, &digest).unwrap());
    let results = store.commit_synced(vec![fresh(b"whole")]);
    assert!(matches!(results[..], [Ok(false)]), "{results:?}");
    assert_eq!(temp_files(dir.path()), 0);
    assert_eq!(store.budget.in_progress(), 0);
}

#[test]
fn a_body_refused_leaves_no_file_and_the_rest_commit() {
    let dir = tempfile::tempdir().unwrap();
    // Room for the small body, not for the large one.
    let store = open(dir.path(), 64);
    let large: &'static [u8] = &[7; 100];
    let results = store.commit_synced(vec![fresh(b"small"), fresh(large)]);
    assert!(matches!(results[0], Ok(true)), "{results:?}");
    let refused = results[1].as_ref().unwrap_err();
    assert!(refused.to_string().contains("max_size"), "{refused}");
    assert!(!store.blob_path(&Digest::of(large)).exists());
    assert!(store.blob_path(&Digest::of(b"small")).is_file());
    assert_eq!(store.budget.in_progress(), 0);
}

#[test]
fn a_blob_dropped_before_its_batch_is_durable_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), u64::MAX);
    let digest = Digest::of(b"never synced");
    let written = store.write_in_place(b"never synced", &digest).unwrap();
    assert!(store.blob_path(&digest).is_file());
    // The name is taken: a second writer is told, and writes nothing.
    assert!(store
        .write_in_place(b"never synced", &digest)
        .unwrap()
        .is_none());
    drop(written);
    assert!(!store.blob_path(&digest).exists());
    assert_eq!(store.budget.in_progress(), 0);
}

#[test]
fn the_bytes_waiting_to_be_written_are_dirty_and_writeback_of_meminfo() {
    let text = "MemTotal:       24684500 kB\nDirty:              1284 kB\n\
                WritebackTmp:          7 kB\nWriteback:            16 kB\n";
    assert_eq!(waiting_bytes(text), Some((1284 + 16) * 1024));
    assert_eq!(waiting_bytes("Dirty:               5 kB\n"), None);
    assert_eq!(waiting_bytes("Dirty: 5 kB\nWriteback: many kB\n"), None);
    assert_eq!(waiting_bytes("Dirty: 5 MB\nWriteback: 1 kB\n"), None);
    assert_eq!(
        waiting_bytes("Dirty: 18446744073709551615 kB\nWriteback: 1 kB\n"),
        None
    );
}

#[test]
fn a_few_blobs_are_synced_whole_only_while_little_waits_to_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), u64::MAX);
    store.set_quiet_bytes(0);
    let back = store
        .commit_synced_if_quiet(vec![fresh(b"one"), fresh(b"two")])
        .unwrap_err();
    assert_eq!(back.len(), 2);
    assert!(!store.blob_path(&Digest::of(b"one")).exists());
    store.set_quiet_bytes(u64::MAX);
    let Ok(results) = store.commit_synced_if_quiet(back) else {
        panic!("a quiet machine syncs the batch whole");
    };
    assert!(results.iter().all(|r| matches!(r, Ok(true))));
    assert_eq!(
        fs::read(store.blob_path(&Digest::of(b"two"))).unwrap(),
        b"two"
    );
}

#[tokio::test]
async fn a_few_blobs_are_synced_file_by_file_while_much_waits_to_be_written() {
    use crate::cache::blobs::{BlobStore, LocalBlobs};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path(), u64::MAX));
    store.set_quiet_bytes(0);
    let bodies: [&'static [u8]; 3] = [b"three", b"four", b"five"];
    let results = LocalBlobs(store.clone())
        .commit_batch(bodies.iter().map(|body| fresh(body)).collect())
        .await;
    assert!(results.iter().all(|r| matches!(r, Ok(true))));
    for body in bodies {
        assert_eq!(fs::read(store.blob_path(&Digest::of(body))).unwrap(), body);
    }
    // Each through a temp file of its own (the whole batch's path writes
    // fresh bodies in place, with none), all renamed.
    assert_eq!(store.temp_files_made(), 3);
    assert_eq!(temp_files(dir.path()), 0);
}
