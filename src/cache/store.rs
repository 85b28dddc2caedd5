//! The content store: blobs on local disk, addressed by their sha256.
//!
//! Layout under the root: `blobs/ab/cd/<sha256 hex>` for committed blobs and
//! `tmp/` for fills in progress (same filesystem, so the commit is one atomic
//! rename). **Invariant:** nothing outside this module knows a blob's path;
//! everyone else holds a [`Digest`] or an open handle.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

/// A blob's identity: the sha256 of its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn from_hex(text: &str) -> Option<Digest> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(Digest(out))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.to_hex())
    }
}

pub struct ContentStore {
    blobs: PathBuf,
    tmp: PathBuf,
    next_temp: AtomicU64,
    /// Bytes of committed blobs on disk: counted at open, then kept by
    /// `commit` and `remove_blob`.
    bytes: AtomicU64,
}

impl ContentStore {
    /// Opens (creating if needed) the store at `root`, and removes temp files
    /// left by a previous process: they are fills that never committed.
    pub fn open(root: &Path) -> io::Result<ContentStore> {
        ContentStore::open_with(root, true)
    }

    /// Opens the store without touching `tmp/`: for tools that run beside a
    /// live server (`verify`), whose fills own those files.
    pub fn open_existing(root: &Path) -> io::Result<ContentStore> {
        ContentStore::open_with(root, false)
    }

    fn open_with(root: &Path, clean_temp: bool) -> io::Result<ContentStore> {
        let blobs = root.join("blobs");
        let tmp = root.join("tmp");
        fs::create_dir_all(&blobs)?;
        fs::create_dir_all(&tmp)?;
        let mut removed = 0;
        for entry in fs::read_dir(&tmp)?.filter(|_| clean_temp) {
            let entry = entry?;
            // Temp files are named `{pid}-{n}`: leave those of a live process
            // (another instance sharing this store); the rest are fills that
            // died with their process.
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            let alive = pid.is_some_and(|p| {
                p != std::process::id() && Path::new(&format!("/proc/{p}")).exists()
            });
            if !alive {
                fs::remove_file(entry.path())?;
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(removed, "removed temp files left by an earlier run");
        }
        let store = ContentStore {
            blobs,
            tmp,
            next_temp: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        };
        let mut bytes = 0;
        store.for_each_blob(|_, len| bytes += len)?;
        store.bytes.store(bytes, Ordering::Relaxed);
        Ok(store)
    }

    /// Bytes of committed blobs.
    pub fn size(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Calls `visit(digest, len)` for every committed blob. Blocking.
    pub fn for_each_blob(&self, mut visit: impl FnMut(Digest, u64)) -> io::Result<()> {
        for a in fs::read_dir(&self.blobs)? {
            for b in fs::read_dir(a?.path())? {
                for blob in fs::read_dir(b?.path())? {
                    let blob = blob?;
                    if let Some(digest) = blob.file_name().to_str().and_then(Digest::from_hex) {
                        visit(digest, blob.metadata()?.len());
                    }
                }
            }
        }
        Ok(())
    }

    /// Re-reads a blob and returns the sha256 of what is on disk. Blocking.
    pub fn rehash(&self, digest: &Digest) -> io::Result<Digest> {
        let mut file = File::open(self.blob_path(digest))?;
        let mut hasher = Sha256::new();
        io::copy(&mut file, &mut hasher)?;
        Ok(Digest(hasher.finalize().into()))
    }

    fn blob_path(&self, digest: &Digest) -> PathBuf {
        let hex = digest.to_hex();
        self.blobs.join(&hex[0..2]).join(&hex[2..4]).join(hex)
    }

    /// Creates an empty temp file for a fill.
    pub fn create_temp(&self) -> io::Result<TempBlob> {
        let n = self.next_temp.fetch_add(1, Ordering::Relaxed);
        let path = self.tmp.join(format!("{}-{n}", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(TempBlob {
            path,
            file: Arc::new(file),
            committed: false,
        })
    }

    /// Makes a fully written temp file visible as the blob `digest`: fsync the
    /// data, rename it into place, fsync the directory. Blocking.
    pub fn commit(&self, mut temp: TempBlob, digest: &Digest) -> io::Result<()> {
        temp.file.sync_all()?;
        let len = temp.file.metadata()?.len();
        let dest = self.blob_path(digest);
        let dir = dest.parent().expect("blob paths have a parent");
        if !dir.is_dir() {
            fs::create_dir_all(dir)?;
        }
        let existed = dest.exists();
        fs::rename(&temp.path, &dest)?;
        temp.committed = true;
        File::open(dir)?.sync_all()?;
        if !existed {
            self.bytes.fetch_add(len, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Opens a committed blob for (positional) reading; `NotFound` if it is
    /// gone. Blocking.
    pub fn open_blob(&self, digest: &Digest) -> io::Result<File> {
        File::open(self.blob_path(digest))
    }

    /// Deletes a blob; returns the bytes freed. A reader that already has it
    /// open keeps its handle and reads on: Unix frees the data on last close.
    pub fn remove_blob(&self, digest: &Digest) -> io::Result<u64> {
        let path = self.blob_path(digest);
        let len = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        match fs::remove_file(&path) {
            Ok(()) => {
                self.bytes
                    .fetch_sub(len.min(self.size()), Ordering::Relaxed);
                Ok(len)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }
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

/// A fill's temp file. Dropped without [`ContentStore::commit`], it deletes
/// itself, so a failed fill leaves nothing behind.
pub struct TempBlob {
    path: PathBuf,
    file: Arc<File>,
    committed: bool,
}

impl TempBlob {
    /// A shared handle for readers: positional reads, so readers never share
    /// a cursor, and the handle outlives the rename at commit.
    pub fn reader(&self) -> Arc<File> {
        self.file.clone()
    }

    /// Reserves `len` bytes on disk up front, so a full disk is found before
    /// the first byte is streamed rather than in the middle. Blocking.
    pub fn reserve(&self, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        rustix::fs::fallocate(&*self.file, rustix::fs::FallocateFlags::empty(), 0, len)
            .map_err(io::Error::from)
    }

    /// Writes `bytes` at `offset`. Blocking.
    pub fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(bytes, offset)
    }
}

impl Drop for TempBlob {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}
