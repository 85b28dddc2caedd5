//! `mirrorcache import --config C BUNDLE [--verify-key PUB]`: adds a
//! bundle's entries to this cache, keeping every entry it already has.
//!
//! Nothing becomes visible before the whole bundle is checked:
//! 1. the manifest and signature are read (they come first) and the
//!    signature checked; every row is checked (a digest, a path that parses
//!    to the same key, a blob listed for it with its size);
//! 2. every blob is read and hashed against its name, and the ones this
//!    cache needs are staged as temp files in the store's `tmp/` (counted
//!    against `storage.max_size`, deleted if anything fails);
//! 3. only then each missing row is committed through
//!    [`Cache::commit_entry`], the fill's own commit (blob renamed into
//!    place, fsynced, then its row), so a running server on the same store
//!    and database sees each entry whole or not at all, and a row that
//!    appeared meanwhile is kept rather than replaced;
//! 4. the advisory feeds the bundle carries (checked with the manifest in
//!    step 1: hashed against it, read as OSV exports) are saved as the
//!    feeds of those names; a running server reads them within
//!    [`SAVED_POLL`](crate::advisories::SAVED_POLL).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use sha2::{Digest as _, Sha256};

use super::rows::{self, BundledEntry};
use super::{
    check_signature, verifying_key, BundledBlob, BundledFeed, Manifest, SignatureFile, ADVISORIES,
    BLOBS, FORMAT, MANIFEST, SIGNATURE,
};
use crate::cache::{Cache, ContentStore, Digest, Entry, TempBlob};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::ops::progress::Progress;
use crate::path::ArtifactPath;

pub struct Options {
    pub bundle: PathBuf,
    /// The public key (PEM) the bundle must be signed with.
    pub verify_key: Option<PathBuf>,
    pub terminal: bool,
}

/// How the signature was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Signed {
    /// Signed by the `--verify-key`.
    ByTrustedKey,
    /// Signed, intact, but by a key nobody named (no `--verify-key`).
    ByUncheckedKey,
    #[default]
    Unsigned,
}

#[derive(Debug, Default)]
pub struct Imported {
    /// Entries added.
    pub added: usize,
    /// Entries this cache already had (kept as they were).
    pub kept: usize,
    /// Entries of remotes this config does not have.
    pub skipped: usize,
    /// Blobs checked (all of the bundle's).
    pub blobs_checked: usize,
    /// Bytes of blobs written to the store.
    pub bytes_written: u64,
    pub declared_added: usize,
    /// Advisory feeds saved.
    pub advisories: usize,
    pub signed: Signed,
    pub seconds: f64,
    /// Bytes of blobs read from the bundle.
    pub bytes_read: u64,
}

impl std::fmt::Display for Imported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let signed = match self.signed {
            Signed::ByTrustedKey => "signature checked against --verify-key",
            Signed::ByUncheckedKey => {
                "signature intact, but its key unchecked (no --verify-key given)"
            }
            Signed::Unsigned => "unsigned",
        };
        write!(
            f,
            "imported {} entries ({} already cached and kept, {} of remotes not in this config skipped), \
             {} blobs checked, {} written, {} declared digests added, {} advisory feeds saved; {signed}; {:.1} s ({:.0} MB/s)",
            self.added,
            self.kept,
            self.skipped,
            self.blobs_checked,
            bytesize::ByteSize(self.bytes_written).display().iec(),
            self.declared_added,
            self.advisories,
            self.seconds,
            self.bytes_read as f64 / 1e6 / self.seconds.max(1e-3),
        )
    }
}

pub async fn run(config: &Config, options: &Options) -> anyhow::Result<Imported> {
    let started = std::time::Instant::now();
    let trusted = options
        .verify_key
        .as_deref()
        .map(verifying_key)
        .transpose()?;
    let path = options.bundle.clone();
    let (manifest_bytes, signature) = tokio::task::spawn_blocking(move || read_head(&path))
        .await?
        .map_err(|e| nothing(e.context("reading the bundle")))?;
    check_signature(&manifest_bytes, signature.as_ref(), trusted.as_ref()).map_err(nothing)?;
    let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
        .context("the manifest is not a bundle manifest")
        .map_err(nothing)?;
    let paths = check_manifest(&manifest).map_err(nothing)?;
    let feeds = {
        let (bundle, carried) = (options.bundle.clone(), manifest.advisories.clone());
        tokio::task::spawn_blocking(move || read_feeds(&bundle, &carried))
            .await?
            .map_err(nothing)?
    };

    let cache = Cache::open(config, Arc::new(Metrics::new()))
        .await
        .context("opening the cache")?;
    let mut imported = Imported {
        signed: match (&signature, &trusted) {
            (None, _) => Signed::Unsigned,
            (Some(_), Some(_)) => Signed::ByTrustedKey,
            (Some(_), None) => Signed::ByUncheckedKey,
        },
        blobs_checked: manifest.blobs.len(),
        bytes_read: manifest.blob_bytes(),
        ..Imported::default()
    };
    // The rows this cache lacks, and how many of them each digest serves.
    let mut wanted: Vec<(&BundledEntry, ArtifactPath)> = Vec::new();
    for (entry, path) in manifest.entries.iter().zip(paths) {
        if !config.remotes.iter().any(|r| r.name == entry.remote) {
            imported.skipped += 1;
        } else if cache
            .meta
            .db
            .stored_digest(&entry.remote, &entry.path)
            .await?
            .is_some()
        {
            imported.kept += 1;
        } else {
            wanted.push((entry, path));
        }
    }
    let mut uses: HashMap<String, usize> = HashMap::new();
    for (entry, _) in &wanted {
        *uses.entry(entry.digest.clone()).or_default() += 1;
    }

    let progress = Arc::new(Progress::with_terminal(
        "blobs",
        manifest.blobs.len() as u64,
        manifest.blob_bytes(),
        options.terminal,
    ));
    let staging = {
        let (bundle, blobs, progress) = (
            options.bundle.clone(),
            manifest.blobs.clone(),
            progress.clone(),
        );
        let needed: HashSet<String> = uses.keys().cloned().collect();
        cache
            .store_blocking(move |store| {
                stage(store, &bundle, &manifest_bytes, &blobs, &needed, &progress)
                    .map_err(|e| io::Error::other(format!("{e:#}")))
            })
            .await
    };
    progress.finish();
    let mut staged = staging.map_err(|e| nothing(anyhow::anyhow!("{e}")))?;

    for (entry, path) in wanted {
        // A row that appeared since (a live fill, another import) is kept.
        if cache
            .meta
            .db
            .stored_digest(&entry.remote, &entry.path)
            .await?
            .is_some()
        {
            imported.kept += 1;
            continue;
        }
        let left = uses.get_mut(&entry.digest).expect("counted above");
        *left -= 1;
        let temp = if *left == 0 {
            staged.remove(&entry.digest).expect("staged above")
        } else {
            let source = staged[&entry.digest].reader();
            let size = entry.size;
            cache
                .store_blocking(move |store| copy_temp(store, &source, size))
                .await?
        };
        let digest = Digest::from_hex(&entry.digest).expect("checked above");
        let row = Entry::new(
            digest,
            entry.size,
            entry.content_type.clone(),
            entry.upstream_etag.clone(),
            entry.upstream_last_modified.clone(),
            entry.fetched_at_ms,
        );
        cache
            .commit_entry(temp, &path, row)
            .await
            .with_context(|| format!("committing {}/{}", entry.remote, entry.path))?;
        imported.added += 1;
        imported.bytes_written += entry.size;
    }
    let declared: Vec<_> = manifest
        .declared
        .iter()
        .filter(|d| config.remotes.iter().any(|r| r.name == d.remote))
        .cloned()
        .collect();
    imported.declared_added = rows::add_declared_if_absent(&cache.meta, &declared).await?;
    cache.meta.db.close().await;
    let feed_dir = crate::advisories::feed_dir(&config.storage.path);
    for (name, bytes) in &feeds {
        crate::advisories::save(&feed_dir, name, bytes)
            .with_context(|| format!("saving advisory feed {name:?}"))?;
    }
    imported.advisories = feeds.len();
    imported.seconds = started.elapsed().as_secs_f64();
    Ok(imported)
}

/// The advisory feeds of the bundle (they come before the blobs), each
/// matching the manifest and read as an OSV export, by name.
fn read_feeds(bundle: &Path, carried: &[BundledFeed]) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    if carried.is_empty() {
        return Ok(Vec::new());
    }
    let mut archive = open_archive(bundle)?;
    let mut feeds = Vec::new();
    for entry in archive.entries()? {
        let entry = entry?;
        let name = entry.path()?.to_string_lossy().into_owned();
        if name.starts_with(BLOBS) {
            break;
        }
        let Some(file) = name.strip_prefix(ADVISORIES) else {
            continue;
        };
        let feed = carried
            .iter()
            .find(|f| format!("{}.zip", f.name) == file)
            .filter(|f| crate::advisories::valid_feed_name(&f.name))
            .ok_or_else(|| anyhow::anyhow!("advisory feed {file:?} is not in the manifest"))?;
        let bytes = read_limited(entry, feed.size, "an advisory feed")?;
        if hex::encode(Sha256::digest(&bytes)) != feed.digest {
            bail!("advisory feed {:?} does not match the manifest", feed.name);
        }
        crate::kind::advisory::AdvisoryIndex::from_zip(&bytes)
            .map_err(|e| anyhow::anyhow!("advisory feed {:?}: {e}", feed.name))?;
        feeds.push((feed.name.clone(), bytes));
    }
    if feeds.len() != carried.len() {
        bail!("the bundle lacks advisory feeds its manifest lists");
    }
    Ok(feeds)
}

/// The error of a bundle refused before anything was added.
fn nothing(error: anyhow::Error) -> anyhow::Error {
    error.context("bundle refused, nothing imported")
}

type Archive = tar::Archive<zstd::stream::read::Decoder<'static, io::BufReader<File>>>;

fn open_archive(path: &Path) -> anyhow::Result<Archive> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(tar::Archive::new(zstd::stream::read::Decoder::new(file)?))
}

/// Reads at most `limit` bytes of an archive entry.
fn read_limited(entry: impl Read, limit: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    entry.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        bail!("{what} is larger than {limit} bytes");
    }
    Ok(bytes)
}

/// The manifest is at most this large (about a million rows).
const MANIFEST_LIMIT: u64 = 1 << 30;

/// The manifest's bytes and the signature, from the archive's first entries.
fn read_head(path: &Path) -> anyhow::Result<(Vec<u8>, Option<SignatureFile>)> {
    let mut archive = open_archive(path)?;
    let mut entries = archive.entries()?;
    let first = entries
        .next()
        .ok_or_else(|| anyhow::anyhow!("empty archive"))??;
    if first.path()?.to_str() != Some(MANIFEST) {
        bail!("not a mirrorcache bundle: its first file is not {MANIFEST}");
    }
    let manifest = read_limited(first, MANIFEST_LIMIT, "the manifest")?;
    let signature = match entries.next() {
        Some(entry) => {
            let entry = entry?;
            if entry.path()?.to_str() == Some(SIGNATURE) {
                let bytes = read_limited(entry, 64 << 10, "the signature")?;
                Some(serde_json::from_slice(&bytes).context("bad signature: unreadable")?)
            } else {
                None
            }
        }
        None => None,
    };
    Ok((manifest, signature))
}

/// Every row names a well-formed digest, a path that is its own key, and a
/// blob of its size listed once; returns each row's path.
fn check_manifest(manifest: &Manifest) -> anyhow::Result<Vec<ArtifactPath>> {
    if manifest.format != FORMAT {
        bail!(
            "bundle format {} (this mirrorcache reads {FORMAT})",
            manifest.format
        );
    }
    let mut sizes = HashMap::new();
    for blob in &manifest.blobs {
        if Digest::from_hex(&blob.digest).is_none() {
            bail!("the manifest lists a malformed digest {:?}", blob.digest);
        }
        if sizes.insert(blob.digest.as_str(), blob.size).is_some() {
            bail!("the manifest lists blob {} twice", blob.digest);
        }
    }
    manifest
        .entries
        .iter()
        .map(|entry| {
            if sizes.get(entry.digest.as_str()) != Some(&entry.size) {
                bail!(
                    "entry {}/{}: blob {} of {} bytes is not in the manifest",
                    entry.remote,
                    entry.path,
                    entry.digest,
                    entry.size
                );
            }
            stored_path(&entry.remote, &entry.path)
        })
        .collect()
}

/// The key of a row's remote and stored path, refused unless the path is
/// one a request could make (normalised, no traversal).
fn stored_path(remote: &str, stored: &str) -> anyhow::Result<ArtifactPath> {
    let (path, variant) = match stored.split_once('?') {
        Some((path, variant)) => (path, Some(variant)),
        None => (stored, None),
    };
    let parsed = ArtifactPath::parse(&format!("/{remote}/{path}"))
        .map_err(|e| anyhow::anyhow!("entry {remote}/{stored}: {e}"))?;
    let parsed = match variant {
        Some(v) => parsed.with_variant(v),
        None => parsed,
    };
    if parsed.remote() != remote || parsed.stored_path() != stored {
        bail!("entry {remote}/{stored}: not a path as this cache keeps it");
    }
    Ok(parsed)
}

/// Reads the whole archive: the manifest again (it must be the one whose
/// signature was checked), then every blob, hashed; the `needed` ones are
/// written to temp files. Any mismatch stops it, and the temp files go.
/// This thread decompresses and reads the archive; a second one hashes and
/// writes, so the two overlap on two cores.
fn stage(
    store: &ContentStore,
    bundle: &Path,
    manifest: &[u8],
    blobs: &[BundledBlob],
    needed: &HashSet<String>,
    progress: &Progress,
) -> anyhow::Result<HashMap<String, TempBlob>> {
    let mut archive = open_archive(bundle)?;
    let mut entries = archive.entries()?;
    let first = entries
        .next()
        .ok_or_else(|| anyhow::anyhow!("empty archive"))??;
    if read_limited(first, MANIFEST_LIMIT, "the manifest")? != manifest {
        bail!("the bundle changed while it was read");
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<Staging>(8);
    std::thread::scope(|scope| {
        let checker = scope.spawn(move || check_blobs(&rx, progress));
        let read = read_blobs(store, entries, blobs, needed, &tx);
        drop(tx);
        let checked = checker
            .join()
            .map_err(|_| anyhow::anyhow!("the blob checker panicked"))?;
        // The checker's error (a corrupt blob) explains a reader that stopped.
        let staged = checked?;
        read?;
        Ok(staged)
    })
}

/// What the archive reader hands the checker.
enum Staging {
    Blob {
        hex: String,
        size: u64,
        temp: Option<TempBlob>,
    },
    Chunk(Vec<u8>),
}

/// Reads each blob entry in the manifest's order, in chunks, to `tx`.
fn read_blobs(
    store: &ContentStore,
    entries: tar::Entries<'_, zstd::stream::read::Decoder<'static, io::BufReader<File>>>,
    blobs: &[BundledBlob],
    needed: &HashSet<String>,
    tx: &std::sync::mpsc::SyncSender<Staging>,
) -> anyhow::Result<()> {
    let mut expected = blobs.iter();
    let stopped = || anyhow::anyhow!("the blob checker stopped");
    for entry in entries {
        let mut entry = entry?;
        let name = entry.path()?.to_string_lossy().into_owned();
        if name == SIGNATURE || name.starts_with(ADVISORIES) {
            continue;
        }
        let Some(hex) = name.strip_prefix(BLOBS) else {
            bail!("unexpected file {name:?} in the bundle");
        };
        let blob = expected
            .next()
            .filter(|b| b.digest == hex)
            .ok_or_else(|| anyhow::anyhow!("blob {hex} is not the next one the manifest lists"))?;
        if entry.size() != blob.size {
            bail!(
                "blob {hex}: {} bytes, the manifest says {}",
                entry.size(),
                blob.size
            );
        }
        let temp = if needed.contains(hex) {
            Some(
                store
                    .create_temp_for(blob.size)
                    .context("making room in the store")?,
            )
        } else {
            None
        };
        let begin = Staging::Blob {
            hex: hex.to_string(),
            size: blob.size,
            temp,
        };
        tx.send(begin).map_err(|_| stopped())?;
        loop {
            let mut chunk = vec![0u8; 1 << 20];
            let n =
                read_full(&mut entry, &mut chunk).with_context(|| format!("reading blob {hex}"))?;
            if n == 0 {
                break;
            }
            chunk.truncate(n);
            tx.send(Staging::Chunk(chunk)).map_err(|_| stopped())?;
        }
    }
    if let Some(missing) = expected.next() {
        bail!(
            "blob {} is in the manifest but not in the bundle",
            missing.digest
        );
    }
    Ok(())
}

/// Fills `buf` as far as the reader goes; returns the bytes read.
fn read_full(from: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match from.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Hashes each blob's chunks (writing them to its temp file, if any) and
/// compares the hash with its name when the next blob begins or the
/// archive ends.
fn check_blobs(
    rx: &std::sync::mpsc::Receiver<Staging>,
    progress: &Progress,
) -> anyhow::Result<HashMap<String, TempBlob>> {
    struct Current {
        hex: String,
        size: u64,
        temp: Option<TempBlob>,
        hasher: Sha256,
        written: u64,
    }
    let mut staged = HashMap::new();
    let mut current: Option<Current> = None;
    let mut finish = |done: Current| -> anyhow::Result<()> {
        let got = hex::encode(done.hasher.finalize());
        if got != done.hex || done.written != done.size {
            bail!(
                "blob {} is corrupt: its bytes hash to sha256 {got}",
                done.hex
            );
        }
        if let Some(temp) = done.temp {
            staged.insert(done.hex, temp);
        }
        progress.advance(done.size, false);
        Ok(())
    };
    for piece in rx {
        match piece {
            Staging::Blob { hex, size, temp } => {
                if let Some(done) = current.take() {
                    finish(done)?;
                }
                current = Some(Current {
                    hex,
                    size,
                    temp,
                    hasher: Sha256::new(),
                    written: 0,
                });
            }
            Staging::Chunk(bytes) => {
                let blob = current.as_mut().expect("a chunk follows its blob");
                blob.hasher.update(&bytes);
                if let Some(temp) = &blob.temp {
                    temp.write_at(&bytes, blob.written)
                        .with_context(|| format!("staging blob {}", blob.hex))?;
                }
                blob.written += bytes.len() as u64;
            }
        }
    }
    if let Some(done) = current.take() {
        finish(done)?;
    }
    Ok(staged)
}

/// A second temp file with the same bytes (two rows of one digest: each
/// commit takes its own).
fn copy_temp(store: &ContentStore, from: &File, size: u64) -> io::Result<TempBlob> {
    let temp = store.create_temp_for(size)?;
    let mut offset = 0;
    while offset < size {
        let chunk = crate::store::read_at(from, offset, (size - offset).min(1 << 20) as usize)?;
        if chunk.is_empty() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        temp.write_at(&chunk, offset)?;
        offset += chunk.len() as u64;
    }
    Ok(temp)
}
