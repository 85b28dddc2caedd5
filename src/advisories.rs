//! The advisory feeds at run time: the OSV exports `[[advisories]]` names,
//! each kept as its last good zip under the storage path (so a restart
//! without network still has it) and as an index in memory; the indexes in
//! force are swapped whole ([`ArcSwap`]) when a feed is read again. A feed
//! that cannot be used (not a zip, truncated, a malformed record) leaves
//! the last good index in force and its reason in [`Advisories::status`].
//! A saved copy written by another process (`mirrorcache advisories
//! import`, a bundle's import) is read within [`SAVED_POLL`]. The feeds'
//! bytes come through the cache (`http::feeds` asks each feed's remote);
//! this room only reads them.

mod refusals;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use serde::Serialize;

use crate::clock::now_ms;
use crate::kind::advisory::{AdvisoryIndex, AdvisorySet, IndexReport};
use crate::store::Digest;
pub use refusals::{Refusal, Refusals};

/// The advisory indexes in force and what became of each feed.
pub struct Advisories {
    /// One index per feed with a good copy: read per request.
    set: ArcSwap<Vec<Arc<AdvisoryIndex>>>,
    /// Bumped on every swap, so documents filtered by the old set are rebuilt.
    generation: AtomicU64,
    /// This is a `std::sync::Mutex`: it is held only to update a map, never
    /// across an await.
    feeds: Mutex<BTreeMap<String, Feed>>,
    dir: PathBuf,
    /// Each saved copy as last read or written here (modified time,
    /// length), by feed name: a copy that differs was written by another
    /// process. A `std::sync::Mutex`, held only to update the map.
    saved: Mutex<HashMap<String, (Option<SystemTime>, u64)>>,
    /// What the quarantine refused, for the dashboard.
    pub refusals: Refusals,
}

struct Feed {
    index: Option<Arc<AdvisoryIndex>>,
    /// The sha256 of the export the index in force was read from.
    digest: Option<Digest>,
    status: FeedStatus,
}

/// One feed on `/-/status`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FeedStatus {
    pub name: String,
    /// Where the index in force was read from (a URL, or the saved copy).
    pub source: Option<String>,
    /// When it was put in force (unix ms).
    pub loaded_at_ms: Option<i64>,
    /// The sha256 of the export in force (hex).
    pub sha256: Option<String>,
    pub report: Option<IndexReport>,
    /// Why the last read failed; the index in force (if any) is older.
    pub error: Option<String>,
    /// When a refresh last found the feed unchanged (its cached copy
    /// fresh, or revalidated upstream, and the bytes in force: nothing
    /// downloaded or read again), unix ms.
    pub unchanged_at_ms: Option<i64>,
}

/// Where the saved copies of the feeds are, below the storage path.
pub fn feed_dir(storage: &Path) -> PathBuf {
    storage.join("advisories")
}

impl Advisories {
    /// Nothing in force; the saved copies are read by [`Advisories::load_saved`].
    pub fn new(dir: PathBuf) -> Advisories {
        Advisories {
            set: ArcSwap::from_pointee(Vec::new()),
            generation: AtomicU64::new(0),
            feeds: Mutex::new(BTreeMap::new()),
            dir,
            saved: Mutex::new(HashMap::new()),
            refusals: Refusals::default(),
        }
    }

    /// The indexes in force now.
    pub fn current(&self) -> AdvisorySet {
        self.set.load_full()
    }

    /// Bumped whenever the indexes in force change.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    pub fn status(&self) -> Vec<FeedStatus> {
        let feeds = self.feeds.lock().expect("not poisoned");
        feeds.values().map(|f| f.status.clone()).collect()
    }

    /// Reads every saved feed (`<name>.zip`: fetched feeds and imported
    /// files) that is new or changed since it was last read or written
    /// here into force.
    pub fn load_saved(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "zip"))
            .collect();
        paths.sort();
        for path in paths {
            let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            let stamp = stamp(&path);
            if self.saved.lock().expect("not poisoned").get(name) == Some(&stamp) {
                continue;
            }
            self.saved
                .lock()
                .expect("not poisoned")
                .insert(name.to_string(), stamp);
            match std::fs::read(&path) {
                Ok(bytes) => {
                    let _ = self.install(name, &bytes, &path.display().to_string());
                }
                Err(e) => self.failed(name, format!("{}: {e}", path.display())),
            }
        }
    }

    /// Puts the OSV zip `bytes` in force as feed `name`; on a feed that
    /// cannot be used, keeps its last good index and records why.
    pub fn install(&self, name: &str, bytes: &[u8], source: &str) -> Result<IndexReport, String> {
        let read = AdvisoryIndex::from_zip(bytes);
        self.put_in_force(name, read, Digest::of(bytes), source)
    }

    /// Puts `read` (an index and its report, or why the feed cannot be
    /// used) in force as feed `name`.
    fn put_in_force(
        &self,
        name: &str,
        read: Result<(AdvisoryIndex, IndexReport), String>,
        digest: Digest,
        source: &str,
    ) -> Result<IndexReport, String> {
        match read {
            Ok((index, report)) => {
                let mut feeds = self.feeds.lock().expect("not poisoned");
                feeds.insert(
                    name.to_string(),
                    Feed {
                        index: Some(Arc::new(index)),
                        digest: Some(digest),
                        status: FeedStatus {
                            name: name.to_string(),
                            source: Some(source.to_string()),
                            loaded_at_ms: Some(now_ms()),
                            sha256: Some(digest.to_hex()),
                            report: Some(report.clone()),
                            error: None,
                            unchanged_at_ms: None,
                        },
                    },
                );
                let set = feeds.values().filter_map(|f| f.index.clone()).collect();
                self.set.store(Arc::new(set));
                self.generation.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    feed = name,
                    source,
                    records = report.records,
                    "advisories in force"
                );
                Ok(report)
            }
            Err(error) => {
                let error = format!("{source}: {error}");
                self.failed(name, error.clone());
                Err(error)
            }
        }
    }

    /// Records why feed `name` could not be read; its index in force stays.
    pub fn failed(&self, name: &str, error: String) {
        tracing::warn!(feed = name, %error, "advisory feed not used; the last good index stays");
        let mut feeds = self.feeds.lock().expect("not poisoned");
        let feed = feeds.entry(name.to_string()).or_insert_with(|| Feed {
            index: None,
            digest: None,
            status: FeedStatus {
                name: name.to_string(),
                ..FeedStatus::default()
            },
        });
        feed.status.error = Some(error);
    }

    /// The sha256 of the export feed `name`'s index in force was read from.
    pub fn digest_in_force(&self, name: &str) -> Option<Digest> {
        let feeds = self.feeds.lock().expect("not poisoned");
        feeds.get(name).and_then(|f| f.digest)
    }

    /// Notes that feed `name` was found unchanged: nothing read again.
    pub fn unchanged(&self, name: &str) {
        let mut feeds = self.feeds.lock().expect("not poisoned");
        if let Some(status) = feeds.get_mut(name).map(|f| &mut f.status) {
            status.unchanged_at_ms = Some(now_ms());
            status.error = None;
        }
    }

    /// Reads the OSV zip `bytes` (sha256 `digest`, from `source`) as feed
    /// `name` off the async threads; a usable one is saved and put in
    /// force, else the last good index stays and the error is recorded and
    /// returned.
    pub async fn take(
        &self,
        name: &str,
        bytes: bytes::Bytes,
        digest: Digest,
        source: &str,
    ) -> Result<IndexReport, String> {
        let (dir, owned) = (self.dir.clone(), name.to_string());
        // Reading a large export takes seconds.
        let read = tokio::task::spawn_blocking(move || {
            let read = AdvisoryIndex::from_zip(&bytes);
            let saved = read.is_ok().then(|| save(&dir, &owned, &bytes));
            (read, saved)
        })
        .await;
        let (read, saved) = read.unwrap_or_else(|e| (Err(e.to_string()), None));
        match saved {
            Some(Ok(())) => {
                let stamp = stamp(&self.dir.join(format!("{name}.zip")));
                let mut saved = self.saved.lock().expect("not poisoned");
                saved.insert(name.to_string(), stamp);
            }
            Some(Err(e)) => tracing::warn!(feed = name, error = %e, "advisory feed not saved"),
            None => {}
        }
        self.put_in_force(name, read, digest, source)
    }

    /// Writes `bytes` as the saved copy of feed `name` (whole, then renamed).
    pub fn save(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        save(&self.dir, name, bytes)?;
        let stamp = stamp(&self.dir.join(format!("{name}.zip")));
        let mut saved = self.saved.lock().expect("not poisoned");
        saved.insert(name.to_string(), stamp);
        Ok(())
    }
}

/// How often the saved copies are looked at for one another process wrote.
pub const SAVED_POLL: Duration = Duration::from_secs(5);

/// A saved copy's modified time and length, to tell a rewritten one.
fn stamp(path: &Path) -> (Option<SystemTime>, u64) {
    std::fs::metadata(path).map_or((None, 0), |m| (m.modified().ok(), m.len()))
}

/// Reads the saved copies another process wrote (an import beside the
/// running server) every [`SAVED_POLL`] while `advisories` lives.
pub async fn watch_saved(advisories: std::sync::Weak<Advisories>) {
    loop {
        tokio::time::sleep(SAVED_POLL).await;
        let Some(advisories) = advisories.upgrade() else {
            return;
        };
        // A large export takes seconds to read: off the async threads.
        let _ = tokio::task::spawn_blocking(move || advisories.load_saved()).await;
    }
}

/// Writes `bytes` as `dir/<name>.zip`, through a temporary file renamed
/// into place, so a reader never sees half a feed.
pub fn save(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{name}.zip.tmp"));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, dir.join(format!("{name}.zip")))
}

/// Checks the OSV zip at `file` and saves it as feed `name` under the
/// storage path: `mirrorcache advisories import`. A running proxy reads it
/// within [`SAVED_POLL`].
pub fn import(storage: &Path, name: &str, file: &Path) -> Result<IndexReport, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    import_bytes(storage, name, &bytes).map_err(|e| format!("{}: {e}", file.display()))
}

pub use crate::config::valid_feed_name;

/// Checks the OSV zip `bytes` and saves it as feed `name` under the
/// storage path (an import, or a feed a bundle carries).
pub fn import_bytes(storage: &Path, name: &str, bytes: &[u8]) -> Result<IndexReport, String> {
    if !valid_feed_name(name) {
        return Err(format!(
            "{name:?} is not a valid feed name (letters, digits, '-', '_', '.')"
        ));
    }
    let (_, report) = AdvisoryIndex::from_zip(bytes)?;
    save(&feed_dir(storage), name, bytes).map_err(|e| e.to_string())?;
    Ok(report)
}
