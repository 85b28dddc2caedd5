//! Writes by other processes beside a running server: `mirrorcache import`
//! and `verify --remove` write the SQLite database a server is using.
//!
//! The server's memory knows every row once loaded (the entry index and
//! the declared keys, on SQLite without Redis), so a cold miss asks the
//! database nothing. A process that is not the server appends one byte to
//! a marker file beside the database after each of its writes; the server
//! looks at the marker (one `stat` of its name in the database's
//! directory, held open) before it trusts its memory to say a row is
//! absent. When the marker changed, the server reads rows again and loads
//! its memory anew ([`Others::reloads`]), so what the other process
//! wrote is found from the next miss on.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// What the marker looked like: inode, length and modification time (the
/// length grows with every write, so two writes within one tick of the
/// file system's clock still differ).
type Stamp = Option<(u64, u64, i64, i64)>;

pub struct Others {
    /// `<database>-writes`; `None` where there is none to watch (an
    /// in-memory database, Postgres: memory is never trusted there).
    marker: Option<PathBuf>,
    /// The marker's directory, held open, and its name there: a look is
    /// a `stat` of one name, not a walk of the whole path (a cold miss
    /// looks several times).
    at: Option<(OwnedFd, OsString)>,
    /// Set by the server: it watches the marker; any other process writes it.
    serving: AtomicBool,
    /// The marker as the server last saw it.
    seen: Mutex<Stamp>,
    /// Bumped each time the server sees the marker change: a load that
    /// began before the last bump does not make memory complete.
    generation: AtomicU64,
    /// Wakes the task that loads memory anew.
    reload: tokio::sync::Notify,
}

impl Others {
    /// The marker of the SQLite database at `database` (its file), as it
    /// is now.
    pub(crate) fn new(database: Option<PathBuf>) -> Others {
        let marker = database.map(|file| {
            let mut name = file.into_os_string();
            name.push("-writes");
            PathBuf::from(name)
        });
        let at = marker.as_deref().and_then(directory_of);
        let seen = stamp(marker.as_deref(), at.as_ref());
        Others {
            marker,
            at,
            serving: AtomicBool::new(false),
            seen: Mutex::new(seen),
            generation: AtomicU64::new(0),
            reload: tokio::sync::Notify::new(),
        }
    }

    /// This process is the server: it watches the marker (and never writes
    /// it).
    pub fn serve(&self) {
        self.serving.store(true, Ordering::Release);
    }

    /// After a write by this process: tells a server beside it, unless this
    /// is the server.
    pub(crate) fn wrote(&self) {
        let Some(marker) = self.marker.as_ref() else {
            return;
        };
        if self.serving.load(Ordering::Acquire) {
            return;
        }
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(marker)
            .and_then(|mut file| file.write_all(b"."));
        if let Err(error) = appended {
            tracing::warn!(marker = %marker.display(), %error, "could not tell a running server of this write; it sees it within its next restart");
        }
    }

    /// Whether memory may be trusted to say a row is absent, as far as
    /// other processes go: this is the server, and no other process wrote
    /// since it last looked. When one did, `distrust` marks memory
    /// incomplete, the reload task is woken, and this says `false`.
    pub(crate) fn none_wrote(&self, distrust: impl FnOnce()) -> bool {
        if !self.serving.load(Ordering::Acquire) || self.marker.is_none() {
            return false;
        }
        let now = stamp(self.marker.as_deref(), self.at.as_ref());
        let mut seen = self.seen.lock().expect("others poisoned");
        if *seen == now {
            return true;
        }
        *seen = now;
        self.generation.fetch_add(1, Ordering::AcqRel);
        distrust();
        self.reload.notify_one();
        false
    }

    /// The count of changes seen so far (see [`Others::generation`]).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Resolves when memory is to be loaded anew, or its cache is dropped
    /// ([`Others::close`]).
    pub(crate) async fn reloads(&self) {
        self.reload.notified().await;
    }

    /// The cache is dropped: ends the wait of its reload task.
    pub(crate) fn close(&self) {
        self.reload.notify_one();
    }
}

/// The marker's directory, opened to look at names in (`O_PATH`), and
/// the marker's name there; `None` if it cannot be opened (the marker is
/// then looked at by its whole path). The directory is the one the
/// database was opened in: moved while the server runs, the database's
/// own files (SQLite's journal, found by name) would not follow either.
fn directory_of(marker: &Path) -> Option<(OwnedFd, OsString)> {
    use rustix::fs::{Mode, OFlags};
    let name = marker.file_name()?.to_os_string();
    let dir = match marker.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty()).ok()?;
    Some((fd, name))
}

fn stamp(marker: Option<&Path>, at: Option<&(OwnedFd, OsString)>) -> Stamp {
    let stat = match at {
        Some((dir, name)) => {
            rustix::fs::statat(dir, name.as_os_str(), rustix::fs::AtFlags::empty())
        }
        None => rustix::fs::stat(marker?),
    }
    .ok()?;
    Some((
        stat.st_ino as u64,
        stat.st_size as u64,
        stat.st_mtime as i64,
        stat.st_mtime_nsec as i64,
    ))
}
