//! Writes by other processes beside a running server: `mirrorcache import`
//! and `verify --remove` write the SQLite database a server is using.
//!
//! The server's memory knows every row once loaded (the entry index and
//! the declared keys, on SQLite without Redis), so a cold miss asks the
//! database nothing. A process that is not the server appends one byte to
//! a marker file beside the database after each of its writes; the server
//! looks at the marker (one `stat`) before it trusts its memory to say a
//! row is absent. When the marker changed, the server reads rows again and
//! loads its memory anew ([`Others::reloads`]), so what the other process
//! wrote is found from the next miss on.

use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
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
        let seen = stamp(marker.as_ref());
        Others {
            marker,
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
        let now = stamp(self.marker.as_ref());
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

fn stamp(marker: Option<&PathBuf>) -> Stamp {
    let meta = std::fs::metadata(marker?).ok()?;
    Some((meta.ino(), meta.len(), meta.mtime(), meta.mtime_nsec()))
}
