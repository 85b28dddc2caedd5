//! Packs: small blobs appended to shared files (`packs/<id>.pack`), each
//! blob a byte range of one (a child of the content store, the one module
//! that knows where a blob lies), so a small fill costs no file of its own and a
//! hit on one costs no `open`.
//!
//! A group commit appends its small blobs to the current pack with one
//! `pwrite` and makes them durable with one `fdatasync`
//! ([`Packs::append`]); their places (pack, start, length, by digest) are
//! then written in the batch's own transaction (the caller's: the rows are
//! [`PlaceRow`]s the metadata database keeps for the store, through
//! [`PlaceRows`]). A pack rolls over at [`ROLL_AT`] bytes and is never
//! written again. Readers `pread` their range through an `Arc<File>` from a
//! small table of open packs; an unlinked pack stays readable through the
//! descriptors that hold it.
//!
//! Each pack's length and dead bytes (ranges no place names any more) are
//! tallied as places come and go; a pack more than half dead is compacted
//! (`compact`):
//! its live blobs are appended to the current pack, their places moved in
//! one transaction each chunk, and the old pack unlinked. A process holds
//! an exclusive `flock` on every pack it writes (or adopts from a dead
//! writer) for its lifetime: at start-up a pack whose lock can be taken has
//! no live writer, and its tail past the last byte a place names, left by
//! a batch a crash cut short, is truncated; a pack no place names is
//! removed.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rustix::fs::{flock, FlockOperation};

use crate::store::budget::Budget;
use crate::store::DigestTable;

mod compact;
mod place;
use crate::store::digest::Digest;
pub(crate) use compact::compact;
pub(crate) use place::Place;
pub use place::{PlaceRow, PlaceRows};

/// The length past which a pack is rolled over: the next append starts a
/// new one.
pub(crate) const ROLL_AT: u64 = 256 * 1024 * 1024;

/// The pack being appended to.
struct Writer {
    id: u64,
    file: Arc<File>,
    len: u64,
}

/// A pack's bytes: its length and how many of them no place names.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    len: u64,
    dead: u64,
}

pub(crate) struct Packs {
    dir: PathBuf,
    /// Blobs of at most this size are packed; 0: none (`storage.pack_below`).
    below: AtomicU64,
    /// Where every packed blob this process knows of lies (loaded at start,
    /// learned from the database when another process packed it), in the
    /// digest table the entry index shares, so a digest is held once.
    places: Arc<DigestTable>,
    /// Places appended here whose rows are not written yet.
    pending: Mutex<HashMap<Digest, Place>>,
    /// While places another process wrote are learned
    /// ([`Packs::learn_absent`]): the digests forgotten meanwhile, whose
    /// rows a page read earlier may still name.
    forgotten: Mutex<Option<std::collections::HashSet<Digest>>>,
    /// Open packs, for readers. This is a `std` lock and not a Tokio one
    /// because no async operation happens while it is held.
    readers: RwLock<HashMap<u64, Arc<File>>>,
    writer: Mutex<Option<Writer>>,
    /// The packs this process holds the lock of: those it wrote, and those
    /// of dead writers it adopted at start-up. Only these are compacted.
    held: Mutex<HashMap<u64, File>>,
    tallies: Mutex<HashMap<u64, Tally>>,
    /// The rows of places, once the cache has attached them.
    pub(crate) rows: OnceLock<Arc<dyn PlaceRows>>,
    /// One compaction at a time.
    compacting: tokio::sync::Mutex<()>,
    budget: Arc<Budget>,
}

impl Packs {
    /// The packs under `root` (the directory made if missing), nothing
    /// loaded yet ([`Packs::load`]); packing off until
    /// [`Packs::set_below`].
    pub(crate) fn open(root: &Path, budget: Arc<Budget>) -> io::Result<Packs> {
        let dir = root.join("packs");
        fs::create_dir_all(&dir)?;
        Ok(Packs {
            dir,
            below: AtomicU64::new(0),
            places: Arc::default(),
            pending: Mutex::default(),
            forgotten: Mutex::default(),
            readers: RwLock::default(),
            writer: Mutex::default(),
            held: Mutex::default(),
            tallies: Mutex::default(),
            rows: OnceLock::new(),
            compacting: tokio::sync::Mutex::new(()),
            budget,
        })
    }

    pub(crate) fn set_below(&self, below: u64) {
        self.below.store(below, Ordering::Relaxed);
    }

    /// Whether a blob of `len` bytes is packed (at most `below`: 64 KiB, all a fill holds in memory).
    pub(crate) fn takes(&self, len: u64) -> bool {
        let below = self.below.load(Ordering::Relaxed);
        below > 0 && len <= below
    }

    fn path(&self, pack: u64) -> PathBuf {
        self.dir.join(format!("{pack:016x}.pack"))
    }

    /// The digest table holding the places, which the entry index shares.
    pub(crate) fn digest_table(&self) -> &Arc<DigestTable> {
        &self.places
    }

    /// Takes places the database holds (a page of them); one that does not
    /// fit the table (no write of this store made it) is not taken, so its
    /// blob is not taken to be packed.
    pub(crate) fn add(&self, rows: &[PlaceRow]) {
        for row in rows {
            self.places.set_place(&row.digest, row.place());
        }
    }

    /// Once the places are taken ([`Packs::add`]), and where `adopt`, each
    /// pack no live process writes is adopted: cut back to the last byte a
    /// place names, or removed when none does. Blocking.
    pub(crate) fn load(&self, adopt: bool) -> io::Result<()> {
        let mut ends: HashMap<u64, (u64, u64)> = HashMap::new();
        self.places.for_each_place(|_, place| {
            let (end, live) = ends.entry(place.pack).or_default();
            *end = (*end).max(place.start + place.len);
            *live += place.len;
        });
        // A place in a pack that is gone (compacted away since its row was
        // read, or removed behind the store's back) is not trusted: its
        // blob's next commit packs it again.
        let files = self.pack_files()?;
        (self.places).retain_places(|p| files.iter().any(|(id, _)| *id == p.pack));
        let mut tallies = self.tallies.lock().expect("tallies poisoned");
        let mut held = self.held.lock().expect("held poisoned");
        let mut cut = 0u64;
        for (pack, path) in files {
            let Ok(file) = OpenOptions::new().read(true).write(adopt).open(&path) else {
                continue;
            };
            let (end, live) = ends.get(&pack).copied().unwrap_or_default();
            let mut len = file.metadata()?.len();
            if adopt && flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok() {
                if live == 0 {
                    cut += len;
                    let _ = fs::remove_file(&path);
                    continue;
                }
                if len > end {
                    cut += len - end;
                    file.set_len(end)?;
                    len = end;
                }
                held.insert(pack, file);
            }
            tallies.insert(
                pack,
                Tally {
                    len,
                    dead: len.saturating_sub(live),
                },
            );
        }
        if cut > 0 {
            tracing::info!(bytes = cut, "cut pack bytes no place names");
        }
        Ok(())
    }

    /// The pack files in the directory, by id.
    fn pack_files(&self) -> io::Result<Vec<(u64, PathBuf)>> {
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".pack")) else {
                continue;
            };
            if let Ok(id) = u64::from_str_radix(id, 16) {
                found.push((id, entry.path()));
            }
        }
        Ok(found)
    }

    /// Bytes of the pack files on disk. Blocking.
    pub(crate) fn bytes_on_disk(&self) -> io::Result<u64> {
        let mut bytes = 0;
        for (_, path) in self.pack_files()? {
            bytes += fs::metadata(path).map_or(0, |m| m.len());
        }
        Ok(bytes)
    }

    /// Bytes of packs that no place names, not yet compacted away.
    pub(crate) fn dead_bytes(&self) -> u64 {
        let tallies = self.tallies.lock().expect("tallies poisoned");
        tallies.values().map(|t| t.dead).sum()
    }

    fn place(&self, digest: &Digest) -> Option<Place> {
        self.places.place(digest)
    }

    /// Whether `digest` is packed (as far as this process knows).
    pub(crate) fn holds(&self, digest: &Digest) -> bool {
        self.place(digest).is_some()
    }

    /// Learns a place another process wrote (from its row).
    pub(crate) fn learn(&self, row: PlaceRow) {
        self.places.set_place(&row.digest, row.place());
    }

    /// Starts noting the digests forgotten, until [`Packs::end_learning`].
    pub(crate) fn begin_learning(&self) {
        *self.forgotten.lock().expect("forgotten poisoned") = Some(Default::default());
    }

    pub(crate) fn end_learning(&self) {
        *self.forgotten.lock().expect("forgotten poisoned") = None;
    }

    /// Learns the places of `rows` memory does not hold (another process
    /// packed their blobs), but none of a digest forgotten since
    /// [`Packs::begin_learning`]: its row may be gone.
    pub(crate) fn learn_absent(&self, rows: &[PlaceRow]) {
        // Held throughout: a forgetting notes its digest, then lets memory
        // go, so it either waits and takes away what is learned here, or
        // was noted and its digest is skipped.
        let forgotten = self.forgotten.lock().expect("forgotten poisoned");
        for row in rows {
            if !forgotten.as_ref().is_some_and(|f| f.contains(&row.digest)) {
                self.places.set_place_if_none(&row.digest, row.place());
            }
        }
    }

    /// The place memory holds for `digest` (its row's, or the one still to
    /// be written), as a row.
    pub(crate) fn row_of(&self, digest: &Digest) -> Option<PlaceRow> {
        self.place(digest).map(|place| PlaceRow::of(*digest, place))
    }

    /// Forgets a place whose pack is gone, unless its row is still to be
    /// written.
    pub(crate) fn unlearn(&self, digest: &Digest) {
        let pending = self.pending.lock().expect("pending poisoned");
        if !pending.contains_key(digest) {
            self.places.take_place(digest);
        }
    }

    /// The open pack `pack` (opened now if no reader has it). Blocking only
    /// the first time.
    fn reader(&self, pack: u64) -> io::Result<Arc<File>> {
        if let Some(file) = self.readers.read().expect("readers poisoned").get(&pack) {
            return Ok(file.clone());
        }
        let file = Arc::new(File::open(self.path(pack))?);
        let mut readers = self.readers.write().expect("readers poisoned");
        Ok(readers.entry(pack).or_insert(file).clone())
    }

    /// The pack holding `digest` and its place, if it is packed and its
    /// pack is open (`None` too when it must be opened:
    /// [`Packs::open_range`] off the async threads).
    pub(crate) fn open_now(&self, digest: &Digest) -> Option<(Arc<File>, Place)> {
        let place = self.place(digest)?;
        let readers = self.readers.read().expect("readers poisoned");
        let file = readers.get(&place.pack)?.clone();
        Some((file, place))
    }

    /// The pack holding `digest` and its place; `None` when it is not
    /// packed here. Blocking (opens the pack on first use).
    pub(crate) fn open_range(&self, digest: &Digest) -> Option<io::Result<(Arc<File>, Place)>> {
        let place = self.place(digest)?;
        Some(self.reader(place.pack).map(|file| (file, place)))
    }

    /// Appends the blobs not packed yet to the current pack, with one
    /// `pwrite` and one `fdatasync`; each one's result is whether it is new
    /// (false: already packed). Their places are known at once and pending
    /// until their rows are written ([`Packs::written`]). Blocking.
    pub(crate) fn append(&self, items: &[(Bytes, Digest)]) -> io::Result<Vec<bool>> {
        let mut fresh: Vec<&(Bytes, Digest)> = Vec::with_capacity(items.len());
        let mut new = Vec::with_capacity(items.len());
        for item in items {
            let is_new = !self.holds(&item.1) && !fresh.iter().any(|f| f.1 == item.1);
            if is_new {
                fresh.push(item);
            }
            new.push(is_new);
        }
        if fresh.is_empty() {
            return Ok(new);
        }
        let bodies = fresh.iter().map(|(bytes, _)| bytes.clone()).collect();
        let digests: Vec<Digest> = fresh.iter().map(|(_, digest)| *digest).collect();
        self.write(bodies, Some(&digests))?;
        Ok(new)
    }

    /// Writes `bodies` at the end of the current pack (rolled over or made
    /// first when needed) in one `pwrite`, then `fdatasync`s it; returns
    /// their places. With `digests`, their places are known and pending
    /// before the pack can be picked for compaction
    /// ([`Packs::compactable`] takes the writer first). Blocking; holds
    /// the writer throughout.
    fn write(&self, bodies: Vec<Bytes>, digests: Option<&[Digest]>) -> io::Result<Vec<Place>> {
        let total: u64 = bodies.iter().map(|b| b.len() as u64).sum();
        // A write goes to a pack holding at most ROLL_AT bytes with it, or
        // starts one: every place it makes ends within 4 GiB.
        if total > u64::from(u32::MAX) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a pack write of more than 4 GiB",
            ));
        }
        let mut writer = self.writer.lock().expect("writer poisoned");
        if writer
            .as_ref()
            .is_none_or(|w| w.len > 0 && w.len + total > ROLL_AT)
        {
            *writer = Some(self.create()?);
        }
        let writer = writer.as_mut().expect("a pack to write");
        let mut buffer = Vec::with_capacity(total as usize);
        let mut places = Vec::with_capacity(bodies.len());
        for body in &bodies {
            places.push(Place {
                pack: writer.id,
                start: writer.len + buffer.len() as u64,
                len: body.len() as u64,
            });
            buffer.extend_from_slice(body);
        }
        writer.file.write_all_at(&buffer, writer.len)?;
        writer.file.sync_data()?;
        writer.len += total;
        self.tallies
            .lock()
            .expect("tallies poisoned")
            .entry(writer.id)
            .or_default()
            .len = writer.len;
        if let Some(digests) = digests {
            // Pending held while the places are set: a forgetting or an
            // unlearning (each takes pending, then the place) sees both or
            // neither.
            let mut pending = self.pending.lock().expect("pending poisoned");
            for (digest, place) in digests.iter().zip(&places) {
                assert!(
                    self.places.set_place(digest, *place),
                    "a place within 4 GiB"
                );
                pending.insert(*digest, *place);
            }
        }
        Ok(places)
    }

    /// A new pack, locked, under an id no pack ever had (the time in
    /// milliseconds, shifted, plus a count: a place another process still
    /// remembers never names another pack's bytes). Its directory entry is
    /// synced before anything is written to it.
    fn create(&self) -> io::Result<Writer> {
        static MADE: AtomicU64 = AtomicU64::new(0);
        loop {
            let ms =
                (SystemTime::now().duration_since(UNIX_EPOCH)).map_or(0, |d| d.as_millis() as u64);
            let id = (ms << 16) | (MADE.fetch_add(1, Ordering::Relaxed) & 0xffff);
            let path = self.path(id);
            let file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            };
            flock(&file, FlockOperation::NonBlockingLockExclusive)?;
            // Another process's start-up may have taken it for a dead
            // writer's empty pack and removed it before it was locked.
            let held = file.metadata()?;
            match fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {}
                _ => continue,
            }
            File::open(&self.dir)?.sync_all()?;
            let file = Arc::new(file);
            self.held
                .lock()
                .expect("held poisoned")
                .insert(id, file.try_clone()?);
            self.readers
                .write()
                .expect("readers poisoned")
                .insert(id, file.clone());
            return Ok(Writer { id, file, len: 0 });
        }
    }

    /// The rows of places appended here, for `digests`, not yet written.
    pub(crate) fn pending_rows(&self, digests: &[Digest]) -> Vec<PlaceRow> {
        let pending = self.pending.lock().expect("pending poisoned");
        (digests.iter())
            .filter_map(|d| pending.get(d).map(|place| PlaceRow::of(*d, *place)))
            .collect()
    }

    /// Rows now written: their places no longer pending.
    pub(crate) fn written(&self, rows: &[PlaceRow]) {
        let mut pending = self.pending.lock().expect("pending poisoned");
        for row in rows {
            if pending.get(&row.digest) == Some(&row.place()) {
                pending.remove(&row.digest);
            }
        }
    }

    /// Forgets `digest`'s place; its bytes are dead (in the places of
    /// `rows` when its rows were deleted, else in the one memory knew).
    /// Whether it was packed.
    pub(crate) fn forget(&self, digest: &Digest, rows: &[PlaceRow]) -> bool {
        // Noted before memory lets go: a learning that finds the digest
        // absent then sees it here.
        if let Some(forgotten) = self.forgotten.lock().expect("forgotten poisoned").as_mut() {
            forgotten.insert(*digest);
        }
        let (known, pending) = {
            let mut pending = self.pending.lock().expect("pending poisoned");
            (self.places.take_place(digest), pending.remove(digest))
        };
        if !rows.is_empty() {
            for row in rows {
                self.count_dead(row.place().pack, row.place().len);
            }
            return true;
        }
        match pending.or(known) {
            Some(place) => {
                self.count_dead(place.pack, place.len);
                true
            }
            None => false,
        }
    }

    fn count_dead(&self, pack: u64, len: u64) {
        let mut tallies = self.tallies.lock().expect("tallies poisoned");
        tallies.entry(pack).or_default().dead += len;
    }
}
