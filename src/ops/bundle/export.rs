//! `mirrorcache export --config C --out BUNDLE [REMOTE[/PREFIX]]… [--since
//! 30d] [--sign KEY]`: the selected entries' rows and blobs (each blob once)
//! into one bundle, with the saved advisory feeds. Safe beside a running server: it only reads the
//! database and opens blobs.
//!
//! Blobs are read on the async side (the store's own reads) and handed in
//! chunks over a bounded channel to one thread that tars and
//! compresses, so reading and compressing overlap and memory stays a few
//! chunks; the reading side hashes each blob as it goes. The bundle is written as `BUNDLE.partial` and renamed at the end:
//! a failed export never leaves a file that looks complete. A blob that
//! does not hash to its name is an error, not a bundle that `import` would
//! refuse.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use futures_util::StreamExt as _;
use sha2::{Digest as _, Sha256};

use super::{
    sign, signing_key, BundledBlob, BundledFeed, Manifest, Selection, ADVISORIES, FORMAT, MANIFEST,
    SIGNATURE,
};
use crate::cache::{Cache, Digest};
use crate::clock::now_ms;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::ops::progress::Progress;

pub struct Options {
    pub out: PathBuf,
    /// `REMOTE[/PREFIX]`; none: every configured remote.
    pub select: Vec<String>,
    /// Only entries fetched (or revalidated) this recently.
    pub since: Option<Duration>,
    /// The ed25519 key (PKCS#8 PEM) to sign the manifest with.
    pub sign: Option<PathBuf>,
    pub terminal: bool,
}

#[derive(Debug, Default)]
pub struct Exported {
    pub entries: usize,
    pub blobs: usize,
    pub blob_bytes: u64,
    pub declared: usize,
    /// Advisory feeds carried.
    pub advisories: usize,
    /// The bundle's size on disk.
    pub bundle_bytes: u64,
    pub signed: bool,
    pub seconds: f64,
}

impl std::fmt::Display for Exported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exported {} entries, {} blobs ({}), {} declared digests, {} advisory feeds: {} bundle{} in {:.1} s ({:.0} MB/s)",
            self.entries,
            self.blobs,
            bytesize::ByteSize(self.blob_bytes).display().iec(),
            self.declared,
            self.advisories,
            bytesize::ByteSize(self.bundle_bytes).display().iec(),
            if self.signed { ", signed" } else { ", unsigned" },
            self.seconds,
            self.blob_bytes as f64 / 1e6 / self.seconds.max(1e-3),
        )
    }
}

/// What travels from the reading side to the writing thread.
enum Piece {
    Chunk(Bytes),
    Failed(io::Error),
}

/// Chunks per channel: a few MiB in flight at most.
const IN_FLIGHT: usize = 16;

/// zstd's level: 3 (its default) compresses about as well as gzip -6 at
/// several times its speed; artifacts are mostly compressed already.
const LEVEL: i32 = 3;

pub async fn run(config: &Config, options: &Options) -> anyhow::Result<Exported> {
    let started = std::time::Instant::now();
    let key = options.sign.as_deref().map(signing_key).transpose()?;
    let selections: Vec<Selection> = if options.select.is_empty() {
        let mut names: Vec<&String> = config.remotes.iter().map(|r| &r.name).collect();
        names.sort();
        names.into_iter().map(|n| Selection::parse(n)).collect()
    } else {
        options.select.iter().map(|s| Selection::parse(s)).collect()
    };
    for selection in &selections {
        if !config.remotes.iter().any(|r| r.name == selection.remote) {
            bail!("no remote named {:?} in the config", selection.remote);
        }
    }
    let since_ms = options.since.map_or(0, |d| now_ms() - d.as_millis() as i64);
    let cache = Cache::open(config, Arc::new(Metrics::new()))
        .await
        .context("opening the cache")?;

    let mut manifest = manifest(&cache, &selections, since_ms).await?;
    let feeds = saved_feeds(&crate::advisories::feed_dir(&config.storage.path))?;
    manifest.advisories = feeds.iter().map(|(feed, _)| feed.clone()).collect();
    let manifest_bytes = serde_json::to_vec_pretty(&manifest)?;
    let signature = key.as_ref().map(|k| sign(k, &manifest_bytes));
    let progress = Progress::with_terminal(
        "blobs",
        manifest.blobs.len() as u64,
        manifest.blob_bytes(),
        options.terminal,
    );

    let partial = partial_path(&options.out);
    let file = File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
    let (tx, rx) = sync_channel::<Piece>(IN_FLIGHT);
    let blobs = manifest.blobs.clone();
    let signature_bytes = signature
        .as_ref()
        .map(serde_json::to_vec_pretty)
        .transpose()?;
    let writer = std::thread::spawn(move || {
        write_bundle(
            file,
            &manifest_bytes,
            signature_bytes.as_deref(),
            &feeds,
            &blobs,
            &rx,
        )
    });

    let mut read_error = None;
    for blob in &manifest.blobs {
        match send_blob(&cache, blob, &tx).await {
            Ok(()) => progress.advance(blob.size, false),
            Err(error) => {
                read_error = Some(error);
                break;
            }
        }
    }
    drop(tx);
    let written = writer
        .join()
        .map_err(|_| anyhow::anyhow!("the bundle writer panicked"))?;
    progress.finish();
    if let Err(error) = read_error.map_or(written, Err) {
        let _ = std::fs::remove_file(&partial);
        return Err(error);
    }
    std::fs::rename(&partial, &options.out)
        .with_context(|| format!("renaming the bundle to {}", options.out.display()))?;
    let bundle_bytes = std::fs::metadata(&options.out)?.len();
    Ok(Exported {
        entries: manifest.entries.len(),
        blobs: manifest.blobs.len(),
        blob_bytes: manifest.blob_bytes(),
        declared: manifest.declared.len(),
        advisories: manifest.advisories.len(),
        bundle_bytes,
        signed: signature.is_some(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// The rows the selections name (each once), their remotes' declared
/// digests, and each digest once.
async fn manifest(
    cache: &Cache,
    selections: &[Selection],
    since_ms: i64,
) -> anyhow::Result<Manifest> {
    let mut entries = Vec::new();
    let mut seen_rows = HashSet::new();
    let mut remotes = Vec::new();
    for selection in selections {
        let rows =
            super::rows::entries(&cache.meta, &selection.remote, &selection.prefix, since_ms)
                .await?;
        for row in rows {
            if seen_rows.insert((row.remote.clone(), row.path.clone())) {
                entries.push(row);
            }
        }
        if !remotes.contains(&selection.remote) {
            remotes.push(selection.remote.clone());
        }
    }
    let mut declared = Vec::new();
    for remote in &remotes {
        declared.extend(super::rows::declared(&cache.meta, remote, since_ms).await?);
    }
    let mut seen_digests = HashSet::new();
    let blobs = entries
        .iter()
        .filter(|e| seen_digests.insert(e.digest.clone()))
        .map(|e| BundledBlob {
            digest: e.digest.clone(),
            size: e.size,
        })
        .collect();
    Ok(Manifest {
        format: FORMAT,
        created_at_ms: now_ms(),
        entries,
        declared,
        blobs,
        advisories: Vec::new(),
    })
}

/// The saved advisory feeds (`<name>.zip` under `dir`), each with its
/// bytes, by name.
fn saved_feeds(dir: &Path) -> anyhow::Result<Vec<(BundledFeed, Vec<u8>)>> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut paths: Vec<PathBuf> = listing
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "zip"))
        .collect();
    paths.sort();
    let mut feeds = Vec::new();
    for path in paths {
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let feed = BundledFeed {
            name: name.to_string(),
            digest: hex::encode(Sha256::digest(&bytes)),
            size: bytes.len() as u64,
        };
        feeds.push((feed, bytes));
    }
    Ok(feeds)
}

/// Streams one blob to the writer.
async fn send_blob(
    cache: &Cache,
    blob: &BundledBlob,
    tx: &std::sync::mpsc::SyncSender<Piece>,
) -> anyhow::Result<()> {
    let digest = Digest::from_hex(&blob.digest)
        .ok_or_else(|| anyhow::anyhow!("a row has a malformed digest {:?}", blob.digest))?;
    let opened = cache.open_blob(&digest, blob.size).await.with_context(|| {
        format!(
            "blob {} is missing from the store (`mirrorcache verify` finds such rows)",
            blob.digest
        )
    })?;
    // Hashed here, on the reading side, while the writer compresses the
    // chunks before: the two run on two cores.
    let mut hasher = Sha256::new();
    let mut chunks = opened.stream(0, blob.size);
    while let Some(chunk) = chunks.next().await {
        let piece = match chunk {
            Ok(bytes) => {
                hasher.update(&bytes);
                Piece::Chunk(bytes)
            }
            Err(error) => Piece::Failed(error),
        };
        let failed = matches!(piece, Piece::Failed(_));
        // A send fails only when the writer has stopped (its error wins).
        if tx.send(piece).is_err() || failed {
            return Ok(());
        }
    }
    let got = hex::encode(hasher.finalize());
    if got != blob.digest {
        bail!(
            "blob {} in the store hashes to {got}: it is corrupt (`mirrorcache verify --remove` drops it)",
            blob.digest
        );
    }
    Ok(())
}

/// The writing thread: manifest, signature, the advisory feeds, then each
/// blob's chunks as they come.
fn write_bundle(
    file: File,
    manifest: &[u8],
    signature: Option<&[u8]>,
    feeds: &[(BundledFeed, Vec<u8>)],
    blobs: &[BundledBlob],
    rx: &Receiver<Piece>,
) -> anyhow::Result<()> {
    let encoder =
        zstd::stream::write::Encoder::new(BufWriter::with_capacity(1 << 20, file), LEVEL)?;
    let mut tar = tar::Builder::new(encoder);
    let mtime = (now_ms() / 1000) as u64;
    append(&mut tar, MANIFEST, manifest.len() as u64, mtime, manifest)?;
    if let Some(signature) = signature {
        append(
            &mut tar,
            SIGNATURE,
            signature.len() as u64,
            mtime,
            signature,
        )?;
    }
    for (feed, bytes) in feeds {
        let name = format!("{ADVISORIES}{}.zip", feed.name);
        append(&mut tar, &name, feed.size, mtime, bytes.as_slice())?;
    }
    for blob in blobs {
        let mut reader = ChunkReader {
            rx,
            current: Bytes::new(),
            remaining: blob.size,
        };
        let name = format!("{}{}", super::BLOBS, blob.digest);
        append(&mut tar, &name, blob.size, mtime, &mut reader)
            .with_context(|| format!("reading blob {}", blob.digest))?;
    }
    let mut out = tar.into_inner()?.finish()?;
    out.flush()?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(())
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    size: u64,
    mtime: u64,
    data: impl Read,
) -> io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o644);
    header.set_mtime(mtime);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, name, data)
}

/// One blob's bytes as a `Read`, from the chunks the reading side sends.
struct ChunkReader<'a> {
    rx: &'a Receiver<Piece>,
    current: Bytes,
    remaining: u64,
}

impl Read for ChunkReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            return Ok(0);
        }
        while self.current.is_empty() {
            match self.rx.recv() {
                Ok(Piece::Chunk(bytes)) => self.current = bytes,
                Ok(Piece::Failed(error)) => return Err(error),
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the blob ended early",
                    ))
                }
            }
        }
        let n = buf
            .len()
            .min(self.current.len())
            .min(self.remaining as usize);
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        self.remaining -= n as u64;
        Ok(n)
    }
}
