//! [`HeldFiles`]: blob files the local store keeps open for the hits after
//! the one that opened them.
//!
//! A blob of its own file (larger than `storage.pack_below`) that the
//! in-memory tier does not hold costs an `open`, a hop to the blocking pool
//! and, up to `storage.memory_object_max`, a read and a sha256 of the whole
//! blob on each hit. Held open, the next hits read it from the descriptor:
//! no `open`, no hop, and no hash again. A blob is hashed when it is
//! opened, so a descriptor is held for at most [`HELD_FOR_MS`] after its
//! open: a blob damaged on disk under a held descriptor is found by the
//! first open after it. The count is bounded (`storage.open_files`, at most
//! a quarter of the process's descriptor limit; the entry cache's kind of
//! cache decides which to let go), and a blob's descriptor is let go when
//! the blob is removed, so its disk space is freed with it.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use super::digest::{BuildDigestHasher, Digest};

/// How long a descriptor is held after the open that hashed its blob.
pub const HELD_FOR_MS: i64 = 60_000;

/// How many blob files to hold for `wanted` (`storage.open_files`): at
/// most a quarter of the descriptors the process may open, once its soft
/// limit is raised to its hard one (as a daemon's is meant to be; 1,024
/// soft is a default for shells, where the hard limit is higher), so that
/// connections, packs and the database keep the rest.
pub fn descriptors_for(wanted: usize) -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            ..limit
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit = raised;
        }
    }
    let quarter = limit.current.map_or(usize::MAX, |n| (n / 4) as usize);
    wanted.min(quarter)
}

#[derive(Clone)]
struct Held {
    file: Arc<File>,
    opened_ms: i64,
}

pub struct HeldFiles {
    /// `None`: holds nothing (`storage.open_files = 0`).
    files: Option<
        quick_cache::sync::Cache<Digest, Held, quick_cache::UnitWeighter, BuildDigestHasher>,
    >,
}

impl HeldFiles {
    /// Holds up to `count` files open; 0 holds none.
    pub fn new(count: usize) -> HeldFiles {
        let files = (count > 0).then(|| {
            quick_cache::sync::Cache::with(
                count,
                count as u64,
                quick_cache::UnitWeighter,
                BuildDigestHasher::default(),
                Default::default(),
            )
        });
        HeldFiles { files }
    }

    /// The file of `digest`, if it is held and was opened at most
    /// [`HELD_FOR_MS`] before `now_ms`; one held longer is let go.
    pub fn get(&self, digest: &Digest, now_ms: i64) -> Option<Arc<File>> {
        let files = self.files.as_ref()?;
        let held = files.get(digest)?;
        if now_ms.saturating_sub(held.opened_ms) <= HELD_FOR_MS {
            return Some(held.file);
        }
        files.remove_if(digest, |now| Arc::ptr_eq(&now.file, &held.file));
        None
    }

    /// Holds `file`, the blob `digest` opened (and hashed, where the reader
    /// hashes) at `now_ms`. A file already unlinked is not held: its blob
    /// was removed meanwhile, and holding it would keep its disk space.
    pub fn hold(&self, digest: Digest, file: &Arc<File>, now_ms: i64) {
        let Some(files) = &self.files else {
            return;
        };
        files.insert(
            digest,
            Held {
                file: file.clone(),
                opened_ms: now_ms,
            },
        );
        // After the insert: a removal that unlinked the file and let go of
        // the digest before it is seen here.
        if !file.metadata().is_ok_and(|m| m.nlink() > 0) {
            files.remove_if(&digest, |held| Arc::ptr_eq(&held.file, file));
        }
    }

    /// Lets go of the file of `digest` (its blob is being removed).
    pub fn release(&self, digest: &Digest) {
        if let Some(files) = &self.files {
            files.remove(digest);
        }
    }

    /// Files held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.files.as_ref().map_or(0, |files| files.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &std::path::Path, name: &str) -> Arc<File> {
        let path = dir.join(name);
        std::fs::write(&path, name).unwrap();
        Arc::new(File::open(path).unwrap())
    }

    /// A file is held for [`HELD_FOR_MS`] after its open, then let go; the
    /// count stays within its bound; a released digest is no longer held.
    #[test]
    fn a_file_is_held_for_a_while_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let held = HeldFiles::new(4);
        let (a, at) = (Digest([1; 32]), 1_000_000);
        held.hold(a, &file(dir.path(), "a"), at);
        assert!(held.get(&a, at + HELD_FOR_MS).is_some());
        assert!(held.get(&a, at + HELD_FOR_MS + 1).is_none());
        assert_eq!(held.len(), 0, "let go once past its time");
        for i in 0..16u8 {
            held.hold(Digest([i; 32]), &file(dir.path(), &format!("f{i}")), at);
        }
        assert!(held.len() <= 4, "{} held", held.len());
        let b = Digest([2; 32]);
        held.hold(b, &file(dir.path(), "b"), at);
        held.release(&b);
        assert!(held.get(&b, at).is_none());
        assert!(HeldFiles::new(0).get(&b, at).is_none());
    }

    /// A file unlinked before it is held (its blob removed meanwhile) is
    /// not held.
    #[test]
    fn an_unlinked_file_is_not_held() {
        let dir = tempfile::tempdir().unwrap();
        let held = HeldFiles::new(4);
        let f = file(dir.path(), "gone");
        std::fs::remove_file(dir.path().join("gone")).unwrap();
        held.hold(Digest([3; 32]), &f, 0);
        assert!(held.get(&Digest([3; 32]), 0).is_none());
    }
}
