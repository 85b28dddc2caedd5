//! The content store: blobs on local disk, addressed by their sha256.
//!
//! Layout under the root: `blobs/ab/<sha256 hex>` for committed blobs (an
//! older store keeps `blobs/ab/cd/`: see [`super::layout`]) and `tmp/` for
//! fills in progress (same filesystem, so the commit is one atomic rename). **Invariant:** nothing outside
//! this module (and the layout it reads) knows a blob's path;
//! everyone else holds a [`Digest`] or an open handle.
//!
//! Temp files have an owner that dies with its process ([`super::owner`]).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use super::budget::Budget;
use super::digest::Digest;
use super::layout::Layout;
use super::owner::{remove_dead_temp_files, Owner};
use super::DigestTable;

/// The group commit's side of the store: a child, for the one module that
/// knows a blob's path.
pub(super) mod batch;
/// Small blobs packed together: a child too.
pub(super) mod pack;

use pack::{Packs, PlaceRow, PlaceRows};

/// A directory of the blob tree that a group commit renamed blobs into and
/// must sync; opaque outside this module, which alone knows blob paths.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlobDir(PathBuf);

/// A hold on the store's commit lock ([`ContentStore::commit_lock`]);
/// dropping it lets go.
#[derive(Debug)]
pub struct CommitLock(#[allow(dead_code)] fs::File);

pub struct ContentStore {
    blobs: PathBuf,
    /// Where under `blobs` a blob's file is, read off the tree at open.
    layout: Layout,
    tmp: PathBuf,
    next_temp: AtomicU64,
    /// This store's claim on its temp files; `None` for tools that only read
    /// (`verify`) and create none.
    owner: Option<Owner>,
    /// Where temp files reserve their bytes against `storage.max_size`.
    budget: Arc<Budget>,
    /// Below how many bytes waiting to be written, machine-wide, a small
    /// batch is synced with `syncfs` too ([`ContentStore::commit_synced_if_quiet`]).
    quiet: AtomicU64,
    /// Small blobs, packed together (`packs/`).
    pub(crate) packs: Arc<Packs>,
}

impl ContentStore {
    /// Opens (creating if needed) the store at `root` for filling, with temp
    /// files counted against `budget`; removes the temp files of dead owners:
    /// fills that never committed.
    pub fn open(root: &Path, budget: Arc<Budget>) -> io::Result<ContentStore> {
        let (blobs, tmp) = dirs(root)?;
        let layout = Layout::of(&blobs)?;
        layout.prepare(&blobs)?;
        let owner = Owner::claim(&tmp)?;
        let removed = remove_dead_temp_files(&tmp, &owner.name)?;
        if removed > 0 {
            tracing::info!(removed, "removed temp files left by dead processes");
        }
        Ok(ContentStore {
            blobs,
            layout,
            tmp,
            next_temp: AtomicU64::new(0),
            owner: Some(owner),
            packs: Arc::new(Packs::open(root, budget.clone())?),
            budget,
            quiet: AtomicU64::new(QUIET_BYTES),
        })
    }

    /// Opens the store without touching `tmp/`: for tools that run beside a
    /// live server (`verify`), whose fills own those files.
    pub fn open_existing(root: &Path) -> io::Result<ContentStore> {
        let (blobs, tmp) = dirs(root)?;
        let budget = Arc::new(Budget::new(u64::MAX));
        Ok(ContentStore {
            layout: Layout::of(&blobs)?,
            blobs,
            tmp,
            next_temp: AtomicU64::new(0),
            owner: None,
            packs: Arc::new(Packs::open(root, budget.clone())?),
            budget,
            quiet: AtomicU64::new(QUIET_BYTES),
        })
    }

    /// Calls `visit(digest, metadata)` for every committed blob. Blocking.
    pub fn for_each_blob(&self, mut visit: impl FnMut(Digest, &fs::Metadata)) -> io::Result<()> {
        self.layout.for_each_blob(&self.blobs, &mut visit)
    }

    /// Bytes of committed blobs on disk, counted by walking them, packs
    /// included. Blocking.
    pub fn bytes_on_disk(&self) -> io::Result<u64> {
        let mut bytes = self.packs.bytes_on_disk()?;
        self.for_each_blob(|_, meta| bytes += meta.len())?;
        Ok(bytes)
    }

    /// Re-reads a blob (its range, when packed) and returns the sha256 of
    /// what is on disk. Blocking.
    pub fn rehash(&self, digest: &Digest) -> io::Result<Digest> {
        let mut hasher = Sha256::new();
        match self.packs.open_range(digest) {
            Some(range) => {
                let (file, place) = range?;
                hasher.update(read_at(&file, place.start, place.len as usize)?);
            }
            None => {
                let mut file = File::open(self.blob_path(digest))?;
                io::copy(&mut file, &mut hasher)?;
            }
        }
        Ok(Digest(hasher.finalize().into()))
    }

    /// Packs blobs of at most `below` bytes from now on (0: none);
    /// packed blobs stay readable either way.
    pub fn set_pack_below(&self, below: u64) {
        self.packs.set_below(below);
    }

    /// Whether a blob of `len` bytes is packed (at most
    /// `storage.pack_below`).
    pub fn packs_len(&self, len: u64) -> bool {
        self.packs.takes(len)
    }

    /// Reads the places of packed blobs from `rows`, a page at a time (no
    /// copy of them all in memory), calling `seen` with each.
    pub async fn read_places(
        &self,
        rows: &dyn PlaceRows,
        mut seen: impl FnMut(&PlaceRow),
    ) -> io::Result<()> {
        each_page(rows, |page| {
            page.iter().for_each(&mut seen);
            self.packs.add(page);
        })
        .await
    }

    /// Learns the places another process wrote since they were read (an
    /// `import` beside the server): memory's places are then every row's,
    /// as on the first read, so the open of a blob another process packed
    /// asks the database nothing (which keeps no index on digests where
    /// the server's memory is complete). Places this process forgot while
    /// the rows were read are not brought back.
    pub async fn learn_places(&self) -> io::Result<()> {
        let Some(rows) = self.packs.rows.get().cloned() else {
            return Ok(());
        };
        self.packs.begin_learning();
        let learned = each_page(&*rows, |page| self.packs.learn_absent(page)).await;
        self.packs.end_learning();
        learned
    }

    /// Once the places are read ([`ContentStore::read_places`]): cuts or
    /// removes what no place names in packs no live process writes
    /// (`super::pack`); a store opened only to read changes no pack.
    /// Blocking.
    pub fn load_places(&self) -> io::Result<()> {
        self.packs.load(self.owner.is_some())
    }

    /// The place memory holds for a packed blob, as its row.
    pub fn place_row(&self, digest: &Digest) -> Option<PlaceRow> {
        self.packs.row_of(digest)
    }

    /// The table holding each digest this process knows once: the places
    /// of packed blobs, and the entry index's counts (shared with it:
    /// `MetadataStore::connect_sharing`).
    pub fn digest_table(&self) -> Arc<DigestTable> {
        self.packs.digest_table().clone()
    }

    /// Where the places of packed blobs are read and deleted from.
    pub fn attach_place_rows(&self, rows: Arc<dyn PlaceRows>) {
        let _ = self.packs.rows.set(rows);
    }

    /// Bytes of packs that no blob uses any more, until compacted.
    pub fn dead_pack_bytes(&self) -> u64 {
        self.packs.dead_bytes()
    }

    fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.layout.blob_path(&self.blobs, digest)
    }

    /// Creates a temp file for a fill with `len` bytes reserved
    /// ([`TempBlob::reserve`]). The budget is taken before the file exists, so
    /// a fill refused for want of room never shows a temp file at all.
    pub fn create_temp_for(&self, len: u64) -> io::Result<TempBlob> {
        let temp = self.create_temp_counted(len)?;
        temp.allocate(len)?;
        Ok(temp)
    }

    /// A temp file holding `bytes` (a body kept in memory), counted as
    /// [`ContentStore::create_temp_for`] counts one, without its
    /// `fallocate`: the one write allocates as much, and a full disk fails
    /// it the same way. Blocking.
    pub fn create_temp_holding(&self, bytes: &[u8]) -> io::Result<TempBlob> {
        let temp = self.create_temp_counted(bytes.len() as u64)?;
        temp.write_at(bytes, 0)?;
        Ok(temp)
    }

    /// An empty temp file with `len` bytes counted against the budget.
    fn create_temp_counted(&self, len: u64) -> io::Result<TempBlob> {
        take_budget(&self.budget, len)?;
        let temp = match self.create_temp() {
            Ok(temp) => temp,
            Err(e) => {
                self.budget.unreserve(len);
                return Err(e);
            }
        };
        // Counted from here on, and given back when the temp file goes.
        temp.reserved.store(len, Ordering::Relaxed);
        Ok(temp)
    }

    /// This store's claim on the files it writes; refused for a store
    /// opened only to read.
    fn owner(&self) -> io::Result<&Owner> {
        self.owner
            .as_ref()
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "store opened read-only"))
    }

    /// Creates an empty temp file for a fill, named after this store's owner.
    pub fn create_temp(&self) -> io::Result<TempBlob> {
        let owner = self.owner()?;
        let n = self.next_temp.fetch_add(1, Ordering::Relaxed);
        let path = self.tmp.join(format!("{}-{n}", owner.name));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(TempBlob {
            path,
            file: Arc::new(file),
            seq: n,
            committed: false,
            reserved: AtomicU64::new(0),
            budget: self.budget.clone(),
        })
    }

    /// Whether a file names the blob `digest` (no hash: for a blob a row
    /// references, synced before that row). Blocking, one `stat`.
    pub fn holds(&self, digest: &Digest) -> bool {
        self.packs.holds(digest) || self.blob_path(digest).is_file()
    }

    /// How many temp files this store has made.
    pub fn temp_files_made(&self) -> u64 {
        self.next_temp.load(Ordering::Relaxed)
    }

    /// Opens a committed blob for (positional) reading; `NotFound` if it is
    /// gone. Blocking.
    pub fn open_blob(&self, digest: &Digest) -> io::Result<File> {
        File::open(self.blob_path(digest))
    }

    /// Deletes a blob; returns the bytes freed. A reader that already has it
    /// open keeps its handle and reads on: Unix frees the data on last close.
    /// The store's commit lock (`commit.lock` beside `blobs/`), on a
    /// descriptor of its own: a group commit holds it shared from before
    /// its blobs are placed (or found in place) until its rows are written;
    /// `verify --remove` holds it exclusively while it checks once more that
    /// no row names a blob and unlinks it. So a blob a commit is giving a
    /// row is never unlinked under it, by this process or another.
    /// `flock` locks belong to the open file: each holder opens its own,
    /// and closing it (dropping the lock) lets go. Blocks while another
    /// holds it in the other mode; `wait = false` answers `None` instead.
    pub fn commit_lock(&self, exclusive: bool, wait: bool) -> io::Result<Option<CommitLock>> {
        use rustix::fs::{flock, FlockOperation};
        let root = self.blobs.parent().unwrap_or(&self.blobs);
        let file = fs::OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(root.join("commit.lock"))?;
        let operation = match (exclusive, wait) {
            (true, true) => FlockOperation::LockExclusive,
            (true, false) => FlockOperation::NonBlockingLockExclusive,
            (false, true) => FlockOperation::LockShared,
            (false, false) => FlockOperation::NonBlockingLockShared,
        };
        match flock(&file, operation) {
            Ok(()) => Ok(Some(CommitLock(file))),
            Err(rustix::io::Errno::WOULDBLOCK) if !wait => Ok(None),
            Err(errno) => Err(errno.into()),
        }
    }

    pub fn remove_blob(&self, digest: &Digest) -> io::Result<u64> {
        let path = self.blob_path(digest);
        let len = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        match fs::remove_file(&path) {
            Ok(()) => Ok(len),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }
}

/// Bytes waiting to be written, machine-wide, below which a batch of a
/// few blobs is synced with one `syncfs` rather than file by file
/// ([`ContentStore::commit_synced_if_quiet`]): a `syncfs` then has little
/// else to write. (64 KiB misses one after another: 484–503 µs of CPU and
/// 8.6–9.1 context switches a miss against 629–643 and 16.4–16.6 file by
/// file; BENCHMARKS.md.)
pub(crate) const QUIET_BYTES: u64 = 16 * 1024 * 1024;

/// Takes `len` bytes of `storage.max_size` for a fill (nothing for 0), or
/// says that fills in progress already hold it.
fn take_budget(budget: &Budget, len: u64) -> io::Result<()> {
    if len == 0 || budget.reserve(len) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::StorageFull,
        "fills in progress already hold storage.max_size",
    ))
}

/// Reads `n` bytes at `pos` into a fresh buffer, without zeroing it first.
/// Blocking. `UnexpectedEof` if the file is shorter.
pub fn read_at(file: &File, pos: u64, n: usize) -> io::Result<bytes::Bytes> {
    let mut buf: Vec<u8> = Vec::with_capacity(n);
    while buf.len() < n {
        let at = pos + buf.len() as u64;
        if rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(bytes::Bytes::from(buf))
}

/// Up to `n` bytes at `pos`, but only what the page cache holds now
/// (`preadv2` with `RWF_NOWAIT`): never waits for the disk, so it may run on
/// an async thread, where it saves the hop to the blocking pool and back
/// (two thread wake-ups per read). `Ok(None)` when nothing is cached there
/// (or the kernel cannot tell): read with [`read_at`] on the blocking pool
/// instead. A shorter result than `n` is the cached prefix.
pub(crate) fn read_cached_at(file: &File, pos: u64, n: usize) -> io::Result<Option<bytes::Bytes>> {
    // Zeroed: `preadv2` takes initialised slices only (no `unsafe` here);
    // the zeroing costs less than the hop it saves.
    let mut buf = vec![0u8; n];
    let flags = rustix::io::ReadWriteFlags::NOWAIT;
    match rustix::io::preadv2(file, &mut [io::IoSliceMut::new(&mut buf)], pos, flags) {
        Ok(0) => Ok(None),
        Ok(read) => {
            buf.truncate(read);
            Ok(Some(bytes::Bytes::from(buf)))
        }
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

fn dirs(root: &Path) -> io::Result<(PathBuf, PathBuf)> {
    let (blobs, tmp) = (root.join("blobs"), root.join("tmp"));
    fs::create_dir_all(&blobs)?;
    fs::create_dir_all(&tmp)?;
    Ok((blobs, tmp))
}

impl Drop for ContentStore {
    fn drop(&mut self) {
        // The file goes first and the lock (closed with the field) after, so
        // no one ever finds it unlocked while our temp files could exist.
        if let Some(owner) = &self.owner {
            let _ = fs::remove_file(&owner.lock_path);
        }
    }
}

/// A fill's temp file. Dropped without [`ContentStore::place`], it deletes
/// itself, so a failed fill leaves nothing behind. Its bytes count against
/// `storage.max_size` (as in progress) until it is dropped, committed or not.
pub struct TempBlob {
    path: PathBuf,
    file: Arc<File>,
    /// Its number among this store's temp files, in the order they were
    /// opened (its name's).
    seq: u64,
    committed: bool,
    /// Bytes counted in `budget` for this file: the reservation, grown by
    /// writes past it.
    reserved: AtomicU64,
    budget: Arc<Budget>,
}

impl TempBlob {
    /// A shared handle for readers: positional reads, so readers never share
    /// a cursor, and the handle outlives the rename at commit.
    pub fn reader(&self) -> Arc<File> {
        self.file.clone()
    }

    /// Reserves `len` bytes up front, against `storage.max_size` (refused
    /// when fills in progress would then hold more than it) and on disk, so
    /// a full store or disk is found before the first byte is streamed
    /// rather than in the middle. Blocking.
    pub fn reserve(&self, len: u64) -> io::Result<()> {
        take_budget(&self.budget, len)?;
        self.reserved.fetch_add(len, Ordering::Relaxed);
        self.allocate(len)
    }

    /// Allocates `len` bytes on disk (`fallocate`). Blocking.
    fn allocate(&self, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        rustix::fs::fallocate(&*self.file, rustix::fs::FallocateFlags::empty(), 0, len)
            .map_err(io::Error::from)
    }

    /// Writes `bytes` at `offset`; bytes past the reservation are counted as
    /// in progress too. Blocking.
    pub fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        let end = offset + bytes.len() as u64;
        let before = self.reserved.fetch_max(end, Ordering::Relaxed);
        if end > before {
            self.budget.grow(end - before);
        }
        self.file.write_all_at(bytes, offset)
    }
}

impl Drop for TempBlob {
    fn drop(&mut self) {
        self.budget.unreserve(*self.reserved.get_mut());
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Every row of `rows`, a page at a time in the order of their places,
/// each page handed to `each` (no copy of them all in memory).
async fn each_page(rows: &dyn PlaceRows, mut each: impl FnMut(&[PlaceRow])) -> io::Result<()> {
    let mut after = None;
    loop {
        let page = rows.page(after).await?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = Some(*last);
        each(&page);
    }
}
