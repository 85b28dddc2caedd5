//! `mirrorcache verify`: re-hash every blob the metadata references, report
//! corrupt, missing and unreferenced blobs, and (with `--remove`) delete them
//! with their rows, so a corrupt blob is never served once found.
//!
//! Safe beside a running server: it never touches `tmp/`, and anything it
//! removes is, to the server, a miss that is fetched again.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use anyhow::Context;

use crate::config::Config;
use super::meta::MetadataStore;
use super::store::{ContentStore, Digest};

#[derive(Debug, Default)]
pub struct Report {
    pub checked: usize,
    pub bytes: u64,
    pub corrupt: Vec<String>,
    pub missing: Vec<String>,
    pub unreferenced: Vec<String>,
    pub removed: bool,
}

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
            "checked {} blobs ({} bytes): {} corrupt, {} missing, {} unreferenced{}",
            self.checked,
            self.bytes,
            self.corrupt.len(),
            self.missing.len(),
            self.unreferenced.len(),
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
pub struct Silent;

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
    let meta = MetadataStore::connect(&config.metadata.url, 1)
        .await
        .context("opening the metadata database")?;
    let rows = meta.all_rows().await?;
    let mut sizes: BTreeMap<String, u64> = BTreeMap::new();
    for row in &rows {
        sizes.insert(row.digest.clone(), row.size);
    }
    let store = std::sync::Arc::new(store);
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
    let s = store.clone();
    let on_disk = tokio::task::spawn_blocking(move || {
        let mut all = Vec::new();
        s.for_each_blob(|d, _| all.push(d.to_hex())).map(|()| all)
    })
    .await??;
    report.unreferenced = on_disk
        .into_iter()
        .filter(|d| !referenced.contains(d))
        .collect();

    if remove {
        for hex in report.corrupt.iter().chain(&report.missing) {
            meta.forget_digest(hex).await?;
        }
        for hex in report.corrupt.iter().chain(&report.unreferenced) {
            if let Some(digest) = Digest::from_hex(hex) {
                store.remove_blob(&digest)?;
            }
        }
        report.removed = true;
    }
    meta.close().await;
    Ok(report)
}
