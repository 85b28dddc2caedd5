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
}

impl ContentStore {
    /// Opens (creating if needed) the store at `root`, and removes temp files
    /// left by a previous process: they are fills that never committed.
    pub fn open(root: &Path) -> io::Result<ContentStore> {
        let blobs = root.join("blobs");
        let tmp = root.join("tmp");
        fs::create_dir_all(&blobs)?;
        fs::create_dir_all(&tmp)?;
        let mut removed = 0;
        for entry in fs::read_dir(&tmp)? {
            let entry = entry?;
            fs::remove_file(entry.path())?;
            removed += 1;
        }
        if removed > 0 {
            tracing::info!(removed, "removed temp files left by an earlier run");
        }
        Ok(ContentStore {
            blobs,
            tmp,
            next_temp: AtomicU64::new(0),
        })
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
        let dest = self.blob_path(digest);
        let dir = dest.parent().expect("blob paths have a parent");
        fs::create_dir_all(dir)?;
        fs::rename(&temp.path, &dest)?;
        temp.committed = true;
        File::open(dir)?.sync_all()?;
        Ok(())
    }

    /// Opens a committed blob for (positional) reading; `NotFound` if it is
    /// gone. Blocking.
    pub fn open_blob(&self, digest: &Digest) -> io::Result<File> {
        File::open(self.blob_path(digest))
    }

    /// Whether the blob is present. Blocking.
    pub fn contains(&self, digest: &Digest) -> bool {
        self.blob_path(digest).is_file()
    }

    /// Deletes a blob; a reader that already has it open keeps its handle.
    pub fn remove_blob(&self, digest: &Digest) -> io::Result<()> {
        match fs::remove_file(self.blob_path(digest)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
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
