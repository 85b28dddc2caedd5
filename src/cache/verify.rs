//! `mirrorcache verify`: re-hash every blob the metadata references, report
//! corrupt, missing and unreferenced blobs, and (with `--remove`) delete them
//! with their rows, so a corrupt blob is never served once found.
//!
//! Safe beside a running server: it never touches `tmp/`, and anything it
//! removes is, to the server, a miss that is fetched again. It never removes
//! a blob a fill is committing: the disk is listed *before* the rows are
//! read (a blob renamed into place after the listing is not looked at), a
//! blob without a row counts as unreferenced only once it is older than
//! [`UNREFERENCED_GRACE`] (a fill between its rename and its row is not),
//! and each removal re-checks the database just before it, holding the
//! store's commit lock exclusively (`ContentStore::commit_lock`), so that a
//! commit reusing an old unreferenced blob in place (which makes it no
//! younger) has written its row before the check.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::{Duration, SystemTime};

use anyhow::Context;

use crate::config::Config;
use crate::meta::places::PlaceTable;
use crate::meta::{cluster, MetadataStore, Scope};
use crate::store::{ContentStore, Digest, PlaceRows};

#[derive(Debug, Default)]
pub struct Report {
    pub checked: usize,
    pub bytes: u64,
    pub corrupt: Vec<String>,
    pub missing: Vec<String>,
    pub unreferenced: Vec<String>,
    /// Blobs without a row but younger than the grace period: probably a
    /// fill between its rename and its row; left alone.
    pub recent: usize,
    pub removed: bool,
}

/// How old a blob without a row must be before `verify` calls it
/// unreferenced: far longer than any fill takes from its rename to its row
/// (an fsync of the directory and one insert).
pub(crate) const UNREFERENCED_GRACE: Duration = Duration::from_secs(3600);

impl Report {
    pub fn is_clean(&self) -> bool {
        self.corrupt.is_empty() && self.missing.is_empty() && self.unreferenced.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.corrupt {
            writeln!(f, "corrupt: {d}")?;
        }
        for d in &self.missing {
            writeln!(f, "missing: {d}")?;
        }
        for d in &self.unreferenced {
            writeln!(f, "unreferenced: {d}")?;
        }
        write!(
            f,
            "checked {} blobs ({} bytes): {} corrupt, {} missing, {} unreferenced ({} recent left alone){}",
            self.checked,
            self.bytes,
            self.corrupt.len(),
            self.missing.len(),
            self.unreferenced.len(),
            self.recent,
            if self.removed && !self.is_clean() {
                "; removed"
            } else {
                ""
            }
        )
    }
}

/// What `verify` reports as it goes (the command shows it as progress).
pub trait Observer: Sync {
    /// Before the first blob: how many blobs and bytes will be re-hashed.
    fn start(&self, _blobs: u64, _bytes: u64) {}
    /// One blob re-hashed (or found missing), of `bytes` bytes.
    fn blob_done(&self, _bytes: u64) {}
}

/// Reports nothing.
pub(crate) struct Silent;

impl Observer for Silent {}

pub async fn run(config: &Config, remove: bool) -> anyhow::Result<Report> {
    run_observed(config, remove, &Silent).await
}

/// [`run`], telling `observer` how far it got.
pub async fn run_observed(
    config: &Config,
    remove: bool,
    observer: &dyn Observer,
) -> anyhow::Result<Report> {
    if let Some(s3) = &config.storage.s3 {
        anyhow::bail!(
            "verify re-hashes the local store only; blobs of this config are in {}",
            s3.url
        );
    }
    let root = config.storage.path.clone();
    let store = tokio::task::spawn_blocking(move || ContentStore::open_existing(&root)).await??;
    let meta = MetadataStore::connect(&config.metadata.url, 1, config.metadata.cache_memory)
        .await
        .context("opening the metadata database")?;
    let store = std::sync::Arc::new(store);
    // The disk first, then the rows: a blob committed after the listing is
    // not in it, one committed before has its row by the time they are read
    // (or is recent).
    let s = store.clone();
    let on_disk = tokio::task::spawn_blocking(move || {
        let mut all = Vec::new();
        s.for_each_blob(|d, m| all.push((d.to_hex(), m.modified().ok())))
            .map(|()| all)
    })
    .await??;
    // As the server finds places: by digest only where its memory of them
    // is not complete (the database then keeps an index on their digests).
    let places = PlaceTable::new(meta.db.pool.clone(), !super::open::memory_complete(config));
    let mut packed_digests: Vec<(String, Option<SystemTime>)> = Vec::new();
    store
        .read_places(&places, |row| {
            packed_digests.push((row.digest.to_hex(), None))
        })
        .await
        .context("reading the places of packed blobs")?;
    let s = store.clone();
    tokio::task::spawn_blocking(move || s.load_places()).await??;
    let rows = meta.db.all_rows().await?;
    let mut sizes: BTreeMap<String, u64> = BTreeMap::new();
    for row in &rows {
        sizes.insert(row.digest.clone(), row.size);
    }
    let mut report = Report::default();
    observer.start(sizes.len() as u64, sizes.values().sum());
    for (hex, size) in &sizes {
        let Some(digest) = Digest::from_hex(hex) else {
            report.corrupt.push(hex.clone());
            continue;
        };
        let s = store.clone();
        let found = tokio::task::spawn_blocking(move || s.rehash(&digest)).await?;
        report.checked += 1;
        match found {
            Ok(actual) if actual == digest => report.bytes += size,
            Ok(_) => report.corrupt.push(hex.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => report.missing.push(hex.clone()),
            Err(e) => return Err(e).with_context(|| format!("reading blob {hex}")),
        }
        observer.blob_done(*size);
    }
    let referenced: HashSet<&String> = sizes.keys().collect();
    let now = SystemTime::now();
    // A packed blob's place is written with its rows, in one transaction:
    // one no row references is left over from a removal cut short, however
    // recent.
    for (hex, modified) in on_disk.into_iter().chain(packed_digests) {
        if referenced.contains(&hex) {
            continue;
        }
        let age = modified.map_or(Some(UNREFERENCED_GRACE), |m| now.duration_since(m).ok());
        if age.is_some_and(|age| age >= UNREFERENCED_GRACE) {
            report.unreferenced.push(hex);
        } else {
            report.recent += 1;
        }
    }

    if remove {
        // The keys whose rows go: running servers sharing Redis are told, as
        // of a purge (they forget them and take the purge's generation).
        let mut purged_keys: Vec<String> = Vec::new();
        let mut keys_of = |hex: &str| {
            purged_keys.extend(
                rows.iter()
                    .filter(|row| row.digest == hex)
                    .map(|row| format!("{}/{}", row.remote, row.path)),
            )
        };
        for hex in report.corrupt.iter().chain(&report.missing) {
            keys_of(hex);
        }
        // Each decision is checked again just before it is acted on: a fill
        // may have committed the same bytes since they were looked at.
        for hex in &report.corrupt {
            let Some(digest) = Digest::from_hex(hex) else {
                meta.forget_digest(hex).await?;
                continue;
            };
            if rehash(&store, digest).await?.is_some_and(|d| d == digest) {
                continue;
            }
            meta.forget_digest(hex).await?;
            let _lock = store.commit_lock(true, true)?;
            places.forget(digest, store.place_row(&digest)).await?;
            store.remove_blob(&digest)?;
        }
        for hex in &report.missing {
            let Some(digest) = Digest::from_hex(hex) else {
                continue;
            };
            if rehash(&store, digest).await?.is_none() {
                meta.forget_digest(hex).await?;
            }
        }
        for hex in &report.unreferenced {
            // No commit is between its blobs and its rows while this is
            // held: one reusing this blob has written its row by now.
            let _lock = store.commit_lock(true, true)?;
            if meta.digest_referenced(hex).await? {
                continue;
            }
            if let Some(digest) = Digest::from_hex(hex) {
                places.forget(digest, store.place_row(&digest)).await?;
                store.remove_blob(&digest)?;
            }
        }
        report.removed = true;
        if let Some(redis) = &config.redis {
            announce_purges(&redis.url, &purged_keys).await;
        }
    }
    meta.db.close().await;
    Ok(report)
}

/// Tells the servers sharing Redis that `keys` were purged (their entries
/// deleted there, the purge published); a warning if Redis does not answer.
/// Without Redis a server learns it on its next hit of a removed blob: the
/// blob is gone, so the hit is a miss (a small blob it holds in memory was
/// checked when read, and stays servable until it is evicted from there).
async fn announce_purges(url: &str, keys: &[String]) {
    use redis::AsyncCommands;
    if keys.is_empty() {
        return;
    }
    let told = async {
        let mut conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        for key in keys {
            conn.del::<_, ()>(format!("mirrorcache:entry:{key}"))
                .await?;
            let message = cluster::purge_message("verify", &Scope::Key(key.clone()));
            conn.publish::<_, _, ()>(cluster::CHANNEL, message).await?;
        }
        Ok::<_, redis::RedisError>(())
    };
    match tokio::time::timeout(std::time::Duration::from_secs(10), told).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "could not tell the servers through redis"),
        Err(_) => tracing::warn!("redis too slow; the servers were not told"),
    }
}

/// The sha256 of the blob `digest` as it is on disk now; `None` if it is gone.
async fn rehash(
    store: &std::sync::Arc<ContentStore>,
    digest: Digest,
) -> anyhow::Result<Option<Digest>> {
    let s = store.clone();
    match tokio::task::spawn_blocking(move || s.rehash(&digest)).await? {
        Ok(found) => Ok(Some(found)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}
