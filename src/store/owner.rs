//! Temp files have an owner that dies with its process: each store that
//! fills holds an exclusive `flock` on `tmp/<owner>.lock` for its lifetime
//! and names its temp files `<owner>-<n>`. The kernel drops the lock when the
//! process dies, however it dies, and whether or not it is reaped or its PID
//! reused; at start-up a temp file whose owner's lock can be taken (or is
//! missing) belongs to a dead fill and is removed.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{flock, FlockOperation};

/// The lock that says this process's temp files are alive.
pub(super) struct Owner {
    pub(super) name: String,
    /// Held (`LOCK_EX`) for the store's lifetime; the kernel releases it when
    /// the process dies. Never read: holding it open is its job.
    _lock: File,
    pub(super) lock_path: PathBuf,
}

impl Owner {
    /// Creates and locks `tmp/<owner>.lock` under a name no other store
    /// (in this process or another, now or before) has used.
    pub(super) fn claim(tmp: &Path) -> io::Result<Owner> {
        static CLAIMS: AtomicU64 = AtomicU64::new(0);
        loop {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let n = CLAIMS.fetch_add(1, Ordering::Relaxed);
            let name = format!("{}.{nanos:x}.{n}", std::process::id());
            let lock_path = tmp.join(format!("{name}.lock"));
            let lock = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock_path)?;
            flock(&lock, FlockOperation::NonBlockingLockExclusive)?;
            // Another store's start-up may have found the file before it was
            // locked, taken it for a dead owner's and removed it: then this
            // lock guards nothing, and we start again.
            let held = lock.metadata()?;
            match fs::metadata(&lock_path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(Owner {
                        name,
                        _lock: lock,
                        lock_path,
                    })
                }
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Removes the temp files (and lock files) in `tmp` whose owner is dead:
/// its lock file is missing or can be locked. Keeps those of `own` and of
/// every owner whose lock is held. Returns how many temp files went.
pub(super) fn remove_dead_temp_files(tmp: &Path, own: &str) -> io::Result<usize> {
    let mut dead: HashMap<String, bool> = HashMap::new();
    let mut is_dead = |owner: &str| {
        *dead
            .entry(owner.to_string())
            .or_insert_with(|| owner_is_dead(tmp, owner))
    };
    let mut removed = 0;
    let mut dead_locks = Vec::new();
    for entry in fs::read_dir(tmp)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(owner) = name.strip_suffix(".lock") {
            if owner != own && is_dead(owner) {
                dead_locks.push(name.to_string());
            }
            continue;
        }
        let owner = name.split('-').next().unwrap_or(name);
        if owner != own && is_dead(owner) {
            match fs::remove_file(tmp.join(name)) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    // Lock files last, so a dead owner's temp files are never left without one.
    for name in dead_locks {
        let _ = fs::remove_file(tmp.join(name));
    }
    Ok(removed)
}

/// Whether the owner of `tmp/<owner>.lock` is gone: the file is missing, or
/// its exclusive lock can be taken (then it is released again at once).
fn owner_is_dead(tmp: &Path, owner: &str) -> bool {
    let file = match File::open(tmp.join(format!("{owner}.lock"))) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return true,
        // Cannot tell: keep its files.
        Err(_) => return false,
    };
    flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok()
}
