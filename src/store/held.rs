//! [`HeldFiles`]: blob files the local store keeps open for the hits after
//! the one that opened them; [`CheckedRanges`]: packed blobs whose check at
//! an open serves the hits after it.
//!
//! A blob of its own file (larger than `storage.pack_below`) that the
//! in-memory tier does not hold costs an `open` and a hop to the blocking
//! pool on each hit, and up to `storage.memory_object_max` (with the tier
//! on) a read and a sha256 of the whole blob. Held open, the hits after
//! that open read it from the descriptor: no `open`, no hop, no hash again
//! (one is read into the tier hashed all the same). A packed blob's pack is
//! open already; of one of at least [`RANGES_CHECKED_FROM`] bytes the place
//! its bytes were checked at is kept, and the hits after that read the
//! range unhashed.
//!
//! A descriptor or a check serves for [`HELD_FOR`] after the open that made
//! it (a blob damaged on disk under it is found by the next open). A held
//! file serves only while it is still linked, looked at with an `fstat` at
//! most every [`LINK_CHECKED_EVERY`]: a blob unlinked behind the server
//! (`verify --remove` in another process, a damaged file replaced by a
//! commit) is opened again at its first hit a second after. A check serves
//! only the place it was made at: a blob compaction moved (copied, not
//! hashed) is checked again at its next hit. One past its time or unlinked
//! is let go at its next hit or by [`HeldFiles::let_go_stale`] (each
//! eviction round), so its disk space is not kept; the store lets go of a
//! blob's descriptor and check as it removes the blob. The counts are
//! bounded (`storage.open_files`, at most a quarter of the process's
//! descriptor limit; [`RANGES_CHECKED`]; the entry cache's kind of cache
//! decides which to let go).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::content::pack::Place;
use super::digest::{BuildDigestHasher, Digest};

/// How long a held descriptor, or a packed blob's check, serves after the
/// open that made it.
pub const HELD_FOR: Duration = Duration::from_secs(60);

/// How often a hit looks whether a held file is still linked (a system
/// call, about a twentieth of a 96 KiB hit's CPU where made on every hit).
pub const LINK_CHECKED_EVERY: Duration = Duration::from_secs(1);

/// The smallest packed blob whose check is kept: below it the sha256
/// (about 2 µs for 4 KiB) costs little more than keeping it would, a lookup
/// and an insert on each random hit over a large cache.
pub const RANGES_CHECKED_FROM: u64 = 4 * 1024;

/// How many packed blobs' checks are kept at most (about 100 bytes each;
/// the entry cache's kind of cache decides which go).
pub const RANGES_CHECKED: usize = 16 * 1024;

/// How many blob files to hold for `wanted` (`storage.open_files`): at
/// most a quarter of the descriptors the process may open, once its soft
/// limit is raised to its hard one (as a daemon's is meant to be; 1,024
/// soft is a default for shells, where the hard limit is higher), so that
/// connections, packs and the database keep the rest.
pub fn descriptors_for(wanted: usize) -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    if wanted == 0 {
        return 0;
    }
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            ..limit
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    let quarter = limit
        .current
        .map_or(usize::MAX, |n| usize::try_from(n / 4).unwrap_or(usize::MAX));
    wanted.min(quarter)
}

#[derive(Clone)]
struct Held {
    file: Arc<File>,
    opened: Instant,
    /// When its link was last looked at: milliseconds after `opened`.
    linked_at_ms: Arc<AtomicU64>,
}

impl Held {
    /// Whether it may still serve at `now`: within its time, its file
    /// linked when last looked at, at most [`LINK_CHECKED_EVERY`] before
    /// (`always`: looked at now).
    fn serves(&self, now: Instant, always: bool) -> bool {
        let age = now.saturating_duration_since(self.opened);
        if age > HELD_FOR {
            return false;
        }
        let (age_ms, at) = (age.as_millis() as u64, &self.linked_at_ms);
        if !always && age_ms < at.load(Ordering::Relaxed) + LINK_CHECKED_EVERY.as_millis() as u64 {
            return true;
        }
        at.store(age_ms, Ordering::Relaxed);
        linked(&self.file)
    }
}

fn linked(file: &File) -> bool {
    file.metadata().is_ok_and(|m| m.nlink() > 0)
}

type Files = quick_cache::sync::Cache<Digest, Held, quick_cache::UnitWeighter, BuildDigestHasher>;

pub struct HeldFiles {
    /// `None`: holds nothing (`storage.open_files = 0`).
    files: Option<Files>,
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

    /// The file of `digest`, if one is held that still serves at `now`
    /// ([`HELD_FOR`], linked); one that does not is let go.
    pub fn get(&self, digest: &Digest, now: Instant) -> Option<Arc<File>> {
        let files = self.files.as_ref()?;
        let held = files.get(digest)?;
        if held.serves(now, false) {
            return Some(held.file);
        }
        files.remove_if(digest, |now| Arc::ptr_eq(&now.file, &held.file));
        None
    }

    /// Holds `file`, the blob `digest` opened (and hashed, where the reader
    /// hashes) at `now`. A file already unlinked is not held: its blob was
    /// removed meanwhile, and holding it would keep its disk space.
    pub fn hold(&self, digest: Digest, file: &Arc<File>, now: Instant) {
        let Some(files) = &self.files else {
            return;
        };
        files.insert(
            digest,
            Held {
                file: file.clone(),
                opened: now,
                linked_at_ms: Default::default(),
            },
        );
        // After the insert: a removal that unlinked the file and let go of
        // the digest before it is seen here.
        if !linked(file) {
            files.remove_if(&digest, |held| Arc::ptr_eq(&held.file, file));
        }
    }

    /// Lets go of the file of `digest` (its blob is being removed, or was
    /// found damaged).
    pub fn let_go(&self, digest: &Digest) {
        if let Some(files) = &self.files {
            files.remove(digest);
        }
    }

    /// Lets go of every file that no longer serves at `now`: past its time,
    /// or unlinked behind the server.
    pub fn let_go_stale(&self, now: Instant) {
        if let Some(files) = &self.files {
            files.retain(|_, held| held.serves(now, true));
        }
    }

    /// Files held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.files.as_ref().map_or(0, |files| files.len())
    }
}

/// Where a packed blob's bytes were checked and when.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Checked {
    place: Place,
    at: Instant,
}

/// Packed blobs of at least [`RANGES_CHECKED_FROM`] bytes hashed at an
/// open, each at the place it was hashed at: read unhashed at that place
/// for [`HELD_FOR`] after. Independent of `storage.open_files` (no
/// descriptor is kept: the packs are open).
pub struct CheckedRanges {
    checked:
        quick_cache::sync::Cache<Digest, Checked, quick_cache::UnitWeighter, BuildDigestHasher>,
}

impl Default for CheckedRanges {
    fn default() -> CheckedRanges {
        CheckedRanges {
            checked: quick_cache::sync::Cache::with(
                RANGES_CHECKED,
                RANGES_CHECKED as u64,
                quick_cache::UnitWeighter,
                BuildDigestHasher::default(),
                Default::default(),
            ),
        }
    }
}

impl CheckedRanges {
    /// Whether `digest`'s bytes at `place` were checked less than
    /// [`HELD_FOR`] before `now()` (never for a blob too small to keep, nor
    /// is the clock read for one); a check past its time or of another
    /// place is forgotten.
    pub(crate) fn serves(
        &self,
        digest: &Digest,
        place: Place,
        now: impl FnOnce() -> Instant,
    ) -> bool {
        if !kept(place) {
            return false;
        }
        let Some(checked) = self.checked.get(digest) else {
            return false;
        };
        if checked.place == place && now().saturating_duration_since(checked.at) <= HELD_FOR {
            return true;
        }
        self.checked.remove_if(digest, |kept| *kept == checked);
        false
    }

    /// `digest`'s bytes at `place` were hashed at `now()` (not kept, nor
    /// the clock read, for a blob too small).
    pub(crate) fn checked(&self, digest: Digest, place: Place, now: impl FnOnce() -> Instant) {
        if kept(place) {
            self.checked.insert(digest, Checked { place, at: now() });
        }
    }

    /// Forgets `digest`'s check (its blob is being removed, or was found
    /// damaged).
    pub fn let_go(&self, digest: &Digest) {
        self.checked.remove(digest);
    }
}

/// Whether a check of a blob at `place` is kept: of one of at least
/// [`RANGES_CHECKED_FROM`] bytes.
fn kept(place: Place) -> bool {
    place.len >= RANGES_CHECKED_FROM
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &std::path::Path, name: &str) -> Arc<File> {
        let path = dir.join(name);
        std::fs::write(&path, name).unwrap();
        Arc::new(File::open(path).unwrap())
    }

    /// A file serves for [`HELD_FOR`] after its open, then is let go at its
    /// next hit, or by the sweep; the count stays within its bound; a
    /// digest let go is no longer held.
    #[test]
    fn a_file_is_held_for_a_while_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let held = HeldFiles::new(4);
        let (a, b, at) = (Digest([1; 32]), Digest([2; 32]), Instant::now());
        held.hold(a, &file(dir.path(), "a"), at);
        assert!(held.get(&a, at + HELD_FOR).is_some());
        assert!(held
            .get(&a, at + HELD_FOR + Duration::from_millis(1))
            .is_none());
        assert_eq!(held.len(), 0, "let go once past its time");
        held.hold(a, &file(dir.path(), "a"), at);
        held.hold(b, &file(dir.path(), "b"), at + HELD_FOR);
        held.let_go_stale(at + HELD_FOR + Duration::from_millis(1));
        assert_eq!(held.len(), 1, "the sweep lets go of the stale one only");
        assert!(held.get(&b, at + HELD_FOR).is_some());
        for i in 0..16u8 {
            held.hold(Digest([i; 32]), &file(dir.path(), &format!("f{i}")), at);
        }
        assert!(held.len() <= 4, "{} held", held.len());
        held.hold(b, &file(dir.path(), "b"), at);
        held.let_go(&b);
        assert!(held.get(&b, at).is_none());
        assert!(HeldFiles::new(0).get(&b, at).is_none());
    }

    /// A file unlinked before it is held (its blob removed meanwhile) is
    /// not held; one unlinked while held (behind the server) no longer
    /// serves, and the sweep lets it go.
    #[test]
    fn an_unlinked_file_is_not_held_nor_served() {
        let dir = tempfile::tempdir().unwrap();
        let held = HeldFiles::new(4);
        let (a, b, at) = (Digest([3; 32]), Digest([4; 32]), Instant::now());
        let gone = file(dir.path(), "gone");
        std::fs::remove_file(dir.path().join("gone")).unwrap();
        held.hold(a, &gone, at);
        assert_eq!(held.len(), 0);
        held.hold(b, &file(dir.path(), "later"), at);
        assert!(held.get(&b, at).is_some());
        std::fs::remove_file(dir.path().join("later")).unwrap();
        held.let_go_stale(at);
        assert_eq!(held.len(), 0);
        held.hold(b, &file(dir.path(), "again"), at);
        std::fs::remove_file(dir.path().join("again")).unwrap();
        assert!(held.get(&b, at).is_some(), "looked at a second apart");
        assert!(held.get(&b, at + LINK_CHECKED_EVERY).is_none());
    }

    /// A packed blob's check serves its place for [`HELD_FOR`], not a
    /// place it moved to (another pack at the same start, the same pack
    /// at another), nor after it is let go; a small one is not kept, and
    /// costs no read of the clock.
    #[test]
    fn a_check_serves_its_place_for_a_while() {
        let ranges = CheckedRanges::default();
        let (a, b, at) = (Digest([5; 32]), Digest([6; 32]), Instant::now());
        let len = RANGES_CHECKED_FROM;
        let place = |pack, start| Place { pack, start, len };
        for moved in [place(2, 64), place(1, 0)] {
            ranges.checked(a, place(1, 64), || at);
            assert!(ranges.serves(&a, place(1, 64), || at + HELD_FOR));
            assert!(!ranges.serves(&a, moved, || at), "moved by compaction");
            assert!(
                !ranges.serves(&a, place(1, 64), || at),
                "forgotten once moved"
            );
        }
        ranges.checked(a, place(1, 64), || at);
        let late = at + HELD_FOR + Duration::from_millis(1);
        assert!(!ranges.serves(&a, place(1, 64), || late));
        ranges.checked(a, place(1, 64), || at);
        ranges.let_go(&a);
        assert!(!ranges.serves(&a, place(1, 64), || at));
        let small = Place {
            len: len - 1,
            ..place(1, 0)
        };
        let never = || -> Instant { unreachable!("the clock read for a small blob") };
        ranges.checked(b, small, never);
        assert!(!ranges.serves(&b, small, never), "too small to keep");
    }
}
