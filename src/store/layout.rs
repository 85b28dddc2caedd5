//! Where a committed blob's file is under `blobs/`: the store's layout,
//! read off the tree when the store is opened.
//!
//! - **Flat**, `blobs/ab/<sha256 hex>`: every store made now. Its 256
//!   directories are made (and synced) when the store is opened, so
//!   committing a blob never makes a directory. On a fresh
//!   ext4 a directory made per blob cost as much as the blob itself:
//!   batches of 512 one-KiB blobs renamed into new `ab/cd/` directories
//!   wrote 19.4 KiB a blob and ran at 8.4–8.9k blobs/s, into the 256
//!   directories made ahead 10.1 KiB and 14.3–14.8k/s (`bench/blob-dirs.py`,
//!   BENCHMARKS.md). ext4's hashed directories keep a name lookup cheap at
//!   tens of thousands of names a directory (5M blobs: about 20,000 each).
//! - **Nested**, `blobs/ab/cd/<sha256 hex>`: stores made before. They keep
//!   it (nothing is moved); a blob's directory is made on its first commit.
//!
//! How it is told: the first `ab/` directory that names anything names
//! blobs (flat) or `cd/` directories (nested); a store with none is new,
//! and flat.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::digest::Digest;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    Flat,
    Nested,
}

impl Layout {
    /// The layout of the tree under `blobs` (see the module's doc). Blocking.
    pub(super) fn of(blobs: &Path) -> io::Result<Layout> {
        for a in subdirs(blobs)? {
            if let Some(first) = fs::read_dir(a)?.next() {
                let first = first?;
                return Ok(if first.file_type()?.is_dir() {
                    Layout::Nested
                } else {
                    Layout::Flat
                });
            }
        }
        Ok(Layout::Flat)
    }

    /// Makes the directories a flat store's blobs go into, where missing,
    /// and syncs `blobs` when it made any, so a blob renamed into one is
    /// never left without it after a crash. Nothing for a nested store.
    /// Blocking.
    pub(super) fn prepare(self, blobs: &Path) -> io::Result<()> {
        if self == Layout::Nested {
            return Ok(());
        }
        let mut made = false;
        for byte in 0..=255u8 {
            match fs::create_dir(blobs.join(hex::encode([byte]))) {
                Ok(()) => made = true,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        if made {
            fs::File::open(blobs)?.sync_all()?;
        }
        Ok(())
    }

    /// The file of blob `digest`.
    pub(super) fn blob_path(self, blobs: &Path, digest: &Digest) -> PathBuf {
        let hex = digest.to_hex();
        match self {
            Layout::Flat => blobs.join(&hex[0..2]).join(hex),
            Layout::Nested => blobs.join(&hex[0..2]).join(&hex[2..4]).join(hex),
        }
    }

    /// Calls `visit(digest, metadata)` for every blob under `blobs`; names
    /// that are not a digest are passed over. Blocking.
    pub(super) fn for_each_blob(
        self,
        blobs: &Path,
        visit: &mut dyn FnMut(Digest, &fs::Metadata),
    ) -> io::Result<()> {
        for a in subdirs(blobs)? {
            match self {
                Layout::Flat => visit_dir(&a, visit)?,
                Layout::Nested => {
                    for b in subdirs(&a)? {
                        visit_dir(&b, visit)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The directories in `dir` (other names are passed over).
fn subdirs(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            found.push(entry.path());
        }
    }
    Ok(found)
}

/// The blobs named in one directory.
fn visit_dir(dir: &Path, visit: &mut dyn FnMut(Digest, &fs::Metadata)) -> io::Result<()> {
    for blob in fs::read_dir(dir)? {
        let blob = blob?;
        if let Some(digest) = blob.file_name().to_str().and_then(Digest::from_hex) {
            match blob.metadata() {
                Ok(meta) => visit(digest, &meta),
                // Deleted since it was listed.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_store_is_flat_and_an_old_nested_one_stays_nested() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        fs::create_dir(&blobs).unwrap();
        assert_eq!(Layout::of(&blobs).unwrap(), Layout::Flat);
        Layout::Flat.prepare(&blobs).unwrap();
        assert_eq!(fs::read_dir(&blobs).unwrap().count(), 256);
        // Still flat with its directories empty, and with a blob in one.
        assert_eq!(Layout::of(&blobs).unwrap(), Layout::Flat);
        let digest = Digest::of(b"x");
        let path = Layout::Flat.blob_path(&blobs, &digest);
        fs::write(&path, b"x").unwrap();
        assert_eq!(Layout::of(&blobs).unwrap(), Layout::Flat);
        let mut seen = Vec::new();
        Layout::Flat
            .for_each_blob(&blobs, &mut |d, m| seen.push((d, m.len())))
            .unwrap();
        assert_eq!(seen, [(digest, 1)]);

        let old = dir.path().join("old");
        let nested = Layout::Nested.blob_path(&old, &digest);
        fs::create_dir_all(nested.parent().unwrap()).unwrap();
        fs::write(&nested, b"x").unwrap();
        assert_eq!(Layout::of(&old).unwrap(), Layout::Nested);
        let mut seen = Vec::new();
        Layout::Nested
            .for_each_blob(&old, &mut |d, _| seen.push(d))
            .unwrap();
        assert_eq!(seen, [digest]);
    }

    #[test]
    fn a_store_serves_the_blobs_of_its_own_layout_and_commits_flat() {
        use crate::store::budget::Budget;
        use crate::store::{BatchBody, ContentStore};
        use std::sync::Arc;

        let dir = tempfile::tempdir().unwrap();
        let old = Digest::of(b"old");
        let nested = Layout::Nested.blob_path(&dir.path().join("old/blobs"), &old);
        fs::create_dir_all(nested.parent().unwrap()).unwrap();
        fs::write(&nested, b"old").unwrap();
        let store = ContentStore::open(&dir.path().join("old"), Arc::new(Budget::new(u64::MAX)));
        let store = store.unwrap();
        assert_eq!(
            std::io::read_to_string(store.open_blob(&old).unwrap()).unwrap(),
            "old"
        );
        // Its next blob goes where the old ones are, its directory made
        // when it is written in place.
        let new = Digest::of(b"new");
        let fresh = BatchBody::Fresh(bytes::Bytes::from_static(b"new"));
        assert!(store.commit_synced(vec![(fresh, new)])[0].is_ok());
        let hex = new.to_hex();
        assert!(dir
            .path()
            .join("old/blobs")
            .join(&hex[0..2])
            .join(&hex[2..4])
            .join(&hex)
            .is_file());

        let store = ContentStore::open(&dir.path().join("new"), Arc::new(Budget::new(u64::MAX)));
        let store = store.unwrap();
        let temp = store.create_temp().unwrap();
        temp.write_at(b"new", 0).unwrap();
        let temp = BatchBody::Temp(temp);
        assert!(store.commit_synced(vec![(temp, new)])[0].is_ok());
        assert!(dir
            .path()
            .join("new/blobs")
            .join(&hex[0..2])
            .join(&hex)
            .is_file());
        assert_eq!(
            std::io::read_to_string(store.open_blob(&new).unwrap()).unwrap(),
            "new"
        );
    }
}
