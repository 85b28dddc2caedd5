//! The group commit's side of the content store (see `crate::cache::commit`):
//! blobs made durable in batches, written in place or renamed from their
//! temp files. A child of [`super`], the one module that knows a blob's
//! path.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{take_budget, BlobDir, ContentStore, TempBlob};
use crate::store::budget::Budget;
use crate::store::digest::Digest;
use crate::store::layout::Layout;

impl ContentStore {
    /// A group commit of one blob, its steps in a row: [`sync_temp`],
    /// [`place`], each directory synced; whether the blob is new (it was
    /// not in place). Blocking.
    ///
    /// [`sync_temp`]: ContentStore::sync_temp
    /// [`place`]: ContentStore::place
    pub(crate) fn commit_one(&self, temp: TempBlob, digest: &Digest) -> io::Result<bool> {
        if !self.sync_temp(&temp, digest)? {
            return Ok(false);
        }
        for dir in self.place(temp, digest)? {
            ContentStore::sync_dir(&dir)?;
        }
        Ok(true)
    }

    /// A group commit's first step for one temp file (see `cache::commit`):
    /// its data on disk (`fdatasync`), unless the blob `digest` is there
    /// already, committed before and synced then; `Ok(false)` says so, and
    /// the temp file is simply dropped. Blocking; a batch runs these side by
    /// side, so a journaling file system makes one commit for them all.
    pub(crate) fn sync_temp(&self, temp: &TempBlob, digest: &Digest) -> io::Result<bool> {
        if self.in_place(digest) {
            return Ok(false);
        }
        temp.file.sync_data()?;
        Ok(true)
    }

    /// A group commit's second step: a synced temp file renamed into place
    /// as the blob `digest`. Returns the directory that now names it, to be
    /// synced ([`ContentStore::sync_dir`]) before anything points at the
    /// blob: its parent's too when the directory is new. Blocking.
    pub fn place(&self, mut temp: TempBlob, digest: &Digest) -> io::Result<Vec<BlobDir>> {
        let dest = self.blob_path(digest);
        let dir = dest.parent().expect("blob paths have a parent");
        let mut dirs = Vec::with_capacity(2);
        // A flat store's directories were made when it was opened: no
        // `stat` per blob, unless one was removed behind its back.
        let renamed = match self.layout {
            Layout::Flat => Some(fs::rename(&temp.path, &dest)),
            Layout::Nested => None,
        };
        match renamed {
            Some(Ok(())) => {}
            Some(Err(e)) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {
                if !dir.is_dir() {
                    fs::create_dir_all(dir)?;
                    let parent = dir.parent().expect("blob directories have a parent");
                    dirs.push(BlobDir(parent.to_path_buf()));
                }
                fs::rename(&temp.path, &dest)?;
            }
        }
        temp.committed = true;
        dirs.push(BlobDir(dir.to_path_buf()));
        Ok(dirs)
    }

    /// A large group commit, in one pass: every blob's bytes and every
    /// name made durable by one `syncfs` each (the file system's dirty
    /// pages written once, however many files: on this VM's unjournalled
    /// ext4 each `fdatasync` and each directory sync is its own write and
    /// cache flush). A [`BatchBody::Fresh`] body of at most [`IN_PLACE_MAX`]
    /// bytes is written under its blob's name at once
    /// ([`ContentStore::write_in_place`]: no temp file, no rename); temp
    /// files are synced by the first `syncfs`, renamed, and their names
    /// synced by a second (none when no temp file is renamed): a temp
    /// file's blob is never named before its bytes are on disk, and no blob
    /// is reported durable before its name is. A blob already in place is
    /// not written again. One result per item, in order, each whether the
    /// blob is new. Blocking.
    ///
    /// Both `syncfs` calls go through a descriptor opened before any byte
    /// of the batch was written: Linux reports to a `syncfs` only the
    /// write errors since its descriptor was opened that no `syncfs`
    /// through it reported yet, so a descriptor opened now would miss a
    /// temp file's write-back that failed during its fill and was reported
    /// to another batch's `syncfs` meanwhile (its bytes lost, its pages
    /// clean). The temp file opened first serves, or `tmp/` opened before
    /// the batch's own writes when no temp file predates them.
    pub fn commit_synced(&self, items: Vec<(BatchBody, Digest)>) -> Vec<io::Result<bool>> {
        let tmp = match File::open(&self.tmp) {
            Ok(tmp) => tmp,
            Err(error) => return items.iter().map(|_| Err(copy(&error))).collect(),
        };
        // Temp files numbered from here on are opened after `tmp`.
        let made_before = self.next_temp.load(Ordering::Relaxed);
        let steps: Vec<(Step, Digest)> = items
            .into_iter()
            .map(|(body, digest)| (self.first_step(body, &digest), digest))
            .collect();
        let oldest = steps
            .iter()
            .filter_map(|(step, _)| match step {
                Step::Temp(temp, _) if temp.seq < made_before => Some(temp),
                _ => None,
            })
            .min_by_key(|temp| temp.seq)
            .map(|temp| temp.file.clone());
        let through: &File = oldest.as_deref().unwrap_or(&tmp);
        let renames = steps
            .iter()
            .any(|(step, _)| matches!(step, Step::Temp(_, true)));
        // Every blob already in place (one digest under many names): no
        // byte to make durable, no sync.
        if !renames
            && !steps
                .iter()
                .any(|(step, _)| matches!(step, Step::Written(_)))
        {
            return steps.into_iter().map(|(step, _)| step.result()).collect();
        }
        if let Err(error) = rustix::fs::syncfs(through) {
            return all_failed(steps.into_iter().map(|(step, _)| step), error.into());
        }
        let steps: Vec<Step> = steps
            .into_iter()
            .map(|(step, digest)| match step {
                Step::Temp(temp, true) => match self.place(temp, &digest) {
                    Ok(_) => Step::Placed,
                    Err(error) => Step::Failed(error),
                },
                step => step,
            })
            .collect();
        if renames {
            if let Err(error) = rustix::fs::syncfs(through) {
                return all_failed(steps, error.into());
            }
        }
        steps.into_iter().map(Step::result).collect()
    }

    /// [`ContentStore::commit_synced`] for a batch of a few blobs, while
    /// the machine holds less than [`super::QUIET_BYTES`] waiting to be written
    /// (`Dirty` and `Writeback` of `/proc/meminfo`, machine-wide: more than
    /// the one file system's, the cautious side), so the `syncfs` writes
    /// little besides the batch: one hop and one `syncfs` in place of a
    /// thread per file and per directory. Otherwise (a large fill's
    /// unsynced bytes, another program's, or no `/proc`) the items come
    /// back, for the caller to sync file by file. Blocking.
    #[allow(clippy::result_large_err)]
    pub(crate) fn commit_synced_if_quiet(
        &self,
        items: Vec<(BatchBody, Digest)>,
    ) -> Result<Vec<io::Result<bool>>, Vec<(BatchBody, Digest)>> {
        let quiet = self.quiet.load(Ordering::Relaxed);
        match fs::read_to_string("/proc/meminfo")
            .ok()
            .as_deref()
            .and_then(waiting_bytes)
        {
            Some(waiting) if waiting < quiet => Ok(self.commit_synced(items)),
            _ => Err(items),
        }
    }

    /// Sets below how many bytes waiting to be written a small batch is
    /// synced whole ([`ContentStore::commit_synced_if_quiet`]); 0: never.
    pub fn set_quiet_bytes(&self, bytes: u64) {
        self.quiet.store(bytes, Ordering::Relaxed);
    }

    /// A batch body before the first `syncfs`: written in place, or a temp
    /// file and whether its blob is still to be placed.
    fn first_step(&self, body: BatchBody, digest: &Digest) -> Step {
        let temp = match body {
            BatchBody::Fresh(bytes) if bytes.len() as u64 <= IN_PLACE_MAX => {
                match self.write_in_place(&bytes, digest) {
                    Ok(Some(written)) => return Step::Written(written),
                    // A file left there (by a crash, or no longer referenced):
                    // through a temp file, which replaces it unless it is
                    // whole.
                    Ok(None) => self.create_temp_holding(&bytes),
                    Err(error) => return Step::Failed(error),
                }
            }
            body => self.temp_of(body),
        };
        match temp {
            Ok(temp) => {
                let needed = !self.in_place(digest);
                Step::Temp(temp, needed)
            }
            Err(error) => Step::Failed(error),
        }
    }

    /// A batch body as a temp file: a body kept in memory written into one.
    /// Blocking.
    pub(crate) fn temp_of(&self, body: BatchBody) -> io::Result<TempBlob> {
        match body {
            BatchBody::Temp(temp) => Ok(temp),
            BatchBody::Fresh(bytes) | BatchBody::Packed(bytes) => self.create_temp_holding(&bytes),
        }
    }

    /// Whether the blob `digest` is in place and whole. A file of at most
    /// [`IN_PLACE_MAX`] bytes may be one written in place whose batch a
    /// crash cut short before its `syncfs` (its bytes never on disk): it is
    /// hashed before it is trusted. A larger one was renamed into place
    /// after its bytes were synced. Blocking.
    fn in_place(&self, digest: &Digest) -> bool {
        if self.packs.holds(digest) {
            return true;
        }
        match fs::metadata(self.blob_path(digest)) {
            Ok(meta) if meta.is_file() => {
                meta.len() > IN_PLACE_MAX || self.rehash(digest).is_ok_and(|d| d == *digest)
            }
            _ => false,
        }
    }

    /// Writes a small body straight under its blob's name, for a digest
    /// that no row references and no other commit has in flight (the
    /// caller's to know, and to keep true until the blob's rows are
    /// written, or its [`InPlace`] dropped): no reader can have the name
    /// open. `None` when a file is already there; then nothing was
    /// written. The bytes are not synced: the batch's `syncfs` does that
    /// ([`ContentStore::commit_synced`]). Blocking.
    pub(crate) fn write_in_place(
        &self,
        bytes: &[u8],
        digest: &Digest,
    ) -> io::Result<Option<InPlace>> {
        self.owner()?;
        let len = bytes.len() as u64;
        take_budget(&self.budget, len)?;
        let path = self.blob_path(digest);
        let open = || OpenOptions::new().write(true).create_new(true).open(&path);
        let opened = match open() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(path.parent().expect("blob paths have a parent"))
                    .and_then(|()| open())
            }
            opened => opened,
        };
        let file = match opened {
            Ok(file) => file,
            Err(e) => {
                self.budget.unreserve(len);
                return match e.kind() {
                    io::ErrorKind::AlreadyExists => Ok(None),
                    _ => Err(e),
                };
            }
        };
        let written = InPlace {
            path,
            reserved: len,
            budget: self.budget.clone(),
            kept: false,
        };
        file.write_all_at(bytes, 0)?;
        Ok(Some(written))
    }

    /// A group commit's third step: a directory that names new blobs, synced
    /// (each once per batch, side by side). Blocking.
    pub(crate) fn sync_dir(dir: &BlobDir) -> io::Result<()> {
        File::open(&dir.0)?.sync_all()
    }
}

/// `Dirty` plus `Writeback` of a `/proc/meminfo` text, in bytes; `None`
/// when either is missing or unreadable (the batch is then synced file by
/// file).
fn waiting_bytes(meminfo: &str) -> Option<u64> {
    let kib = |name: &str| {
        meminfo.lines().find_map(|line| {
            let value = line.strip_prefix(name)?.strip_prefix(':')?;
            value.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
    };
    kib("Dirty")?
        .checked_add(kib("Writeback")?)?
        .checked_mul(1024)
}

/// The largest body a group commit writes under its blob's name with no
/// temp file ([`ContentStore::write_in_place`]): a fill's body kept in
/// memory is at most this; a blob file this small is hashed before a
/// commit trusts it to be whole ([`ContentStore::in_place`]).
pub(crate) const IN_PLACE_MAX: u64 = 64 * 1024;

/// One blob of a group commit ([`crate::store::BlobStore::commit_batch`]).
pub enum BatchBody {
    /// Its temp file; dropped unused when the blob is already in place.
    Temp(TempBlob),
    /// A small body kept in memory whose digest no row references and no
    /// other commit has in flight, true until the batch's rows are
    /// written (the committer marks it): a store may write it under the
    /// blob's own name, once, with no temp file.
    Fresh(bytes::Bytes),
    /// A small body kept in memory, of a size the store packs
    /// ([`ContentStore::packs_len`]): appended to a pack unless packed
    /// already, never written under a name of its own.
    Packed(bytes::Bytes),
}

/// A batch body on its way through [`ContentStore::commit_synced`].
enum Step {
    Written(InPlace),
    /// A temp file, and whether its blob is to be placed (not in place).
    Temp(TempBlob, bool),
    Placed,
    Failed(io::Error),
}

impl Step {
    fn result(self) -> io::Result<bool> {
        match self {
            Step::Written(mut written) => {
                written.kept = true;
                Ok(true)
            }
            Step::Placed => Ok(true),
            Step::Temp(..) => Ok(false),
            Step::Failed(error) => Err(error),
        }
    }
}

fn copy(error: &io::Error) -> io::Error {
    io::Error::new(error.kind(), error.to_string())
}

/// The results of a batch whose sync failed: each step its own error, or
/// the sync's (a file written in place is removed as its step drops).
fn all_failed(steps: impl IntoIterator<Item = Step>, error: io::Error) -> Vec<io::Result<bool>> {
    steps
        .into_iter()
        .map(|step| match step {
            Step::Failed(own) => Err(own),
            _ => Err(copy(&error)),
        })
        .collect()
}

/// A blob written in place ([`ContentStore::write_in_place`]), its bytes
/// counted against `storage.max_size` as a temp file's are. Dropped before
/// its batch is durable, it removes its file: a failed batch leaves none.
pub(crate) struct InPlace {
    path: PathBuf,
    reserved: u64,
    budget: Arc<Budget>,
    kept: bool,
}

impl Drop for InPlace {
    fn drop(&mut self) {
        self.budget.unreserve(self.reserved);
        if !self.kept {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The group commit's blobs: written in place where they are fresh, never
    //! trusted in place unless whole, nothing left behind by a failure.

    use std::fs;
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::store::budget::Budget;

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
        use crate::store::blobs::{BlobStore, LocalBlobs};
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(open(dir.path(), u64::MAX));
        store.set_quiet_bytes(0);
        let bodies: [&'static [u8]; 3] = [b"three", b"four", b"five"];
        let results = LocalBlobs::new(store.clone(), 0)
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
}
