//! Where committed blobs live, behind one small trait: the local content store
//! (default) or S3-compatible object storage through the `object_store` crate
//! (`[storage] url = "s3://bucket/prefix"`), which several instances can share.
//!
//! Either way a fill is staged in the local store's `tmp/` (readers stream
//! from it while it grows); [`BlobStore::commit`] runs only after the length
//! is checked and the hash computed, and makes the bytes visible under their
//! digest: a rename locally, an upload to S3. Hits stream from wherever the
//! blob lives; a byte range is passed through to S3 as a ranged GET.
//!
//! Deleting is immediate on local disk (a reader holds an open file, which
//! outlives the unlink) and deferred on S3, which has no unlink-while-open:
//! [`S3Blobs::remove`] leaves a tombstone, and the object is deleted
//! `storage.delete_delay` later unless it was uploaded again meanwhile, so a
//! read that another instance (or this one) started before the removal has
//! that long to finish.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore};
use tokio::io::AsyncWriteExt;

use super::store::{self, BatchBody, ContentStore, Digest, TempBlob};
use crate::config::S3Config;

/// Bytes read from a local blob at a time: large enough that a 1 MiB hit is
/// four reads, small enough that 64 connections in flight stay within the
/// memory target.
const FILE_CHUNK: usize = 256 * 1024;

/// The smallest batch whose blobs are made durable by syncing the whole
/// file system (`syncfs`, twice) however much else waits to be written (a
/// smaller one too while little does): for 128 files of 1 KiB in new
/// directories, 12–32 ms against 35–71 ms file by file (BENCHMARKS.md).
const SYNCFS_FROM: usize = 16;

/// A committed blob, opened for reading.
pub enum Blob {
    /// A small hot blob, held in memory (see [`HotBlobs`]).
    Memory(Bytes),
    /// An open file: positional reads, and it survives deletion of its path.
    Local(Arc<File>),
    Remote {
        store: Arc<dyn ObjectStore>,
        location: ObjectPath,
    },
}

impl Blob {
    /// `len` bytes from `start`, streamed: one chunk in memory at a time.
    pub fn stream(&self, start: u64, len: u64) -> BoxStream<'static, io::Result<Bytes>> {
        match self {
            Blob::Memory(bytes) => {
                let part = bytes.slice(start as usize..(start + len) as usize);
                futures_util::stream::once(async move { Ok(part) }).boxed()
            }
            Blob::Local(file) => local_stream(file.clone(), start, len),
            Blob::Remote { store, location } => {
                if len == 0 {
                    return futures_util::stream::empty().boxed();
                }
                let (store, location) = (store.clone(), location.clone());
                futures_util::stream::once(async move {
                    let options = GetOptions {
                        range: Some(GetRange::Bounded(start..start + len)),
                        ..GetOptions::default()
                    };
                    let result = store
                        .get_opts(&location, options)
                        .await
                        .map_err(io::Error::other)?;
                    Ok::<_, io::Error>(result.into_stream().map_err(io::Error::other))
                })
                .try_flatten()
                .boxed()
            }
        }
    }

    /// The whole blob in memory (index documents, capped by the caller).
    pub async fn read_all(&self, size: u64) -> io::Result<Vec<u8>> {
        match self {
            Blob::Memory(bytes) => Ok(bytes.to_vec()),
            Blob::Local(file) => {
                let file = file.clone();
                tokio::task::spawn_blocking(move || {
                    store::read_at(&file, 0, size as usize).map(Vec::from)
                })
                .await
                .map_err(io::Error::other)?
            }
            Blob::Remote { .. } => {
                let mut out = Vec::with_capacity(size as usize);
                let mut stream = self.stream(0, size);
                while let Some(chunk) = stream.next().await {
                    out.extend_from_slice(&chunk?);
                }
                Ok(out)
            }
        }
    }
}

/// The in-memory tier: small hot blobs kept whole, bounded by total bytes.
/// A hit on one is served from memory with no file open, no read and no
/// blocking-pool hop. Keyed by digest, so an entry is never stale.
pub struct HotBlobs {
    cache: moka::sync::Cache<Digest, Bytes>,
    max_object: u64,
    /// Taken while a blob is read into the tier (striped by digest): the
    /// first hits of one blob, arriving together, read it once.
    loading: Box<[tokio::sync::Mutex<()>]>,
    /// Blobs put into the tier (each read once, [`HotBlobs::loading`]).
    loads: std::sync::atomic::AtomicU64,
}

/// Stripes of [`HotBlobs::loading`].
const LOADING_STRIPES: usize = 256;

impl HotBlobs {
    /// `total` bytes at most, objects of at most `max_object` bytes; `total`
    /// 0 turns the tier off.
    pub fn new(total: u64, max_object: u64) -> HotBlobs {
        HotBlobs {
            cache: moka::sync::Cache::builder()
                .weigher(|_: &Digest, bytes: &Bytes| u32::try_from(bytes.len()).unwrap_or(u32::MAX))
                .max_capacity(total)
                .build(),
            max_object: if total == 0 { 0 } else { max_object },
            loading: (0..LOADING_STRIPES).map(|_| Default::default()).collect(),
            loads: Default::default(),
        }
    }

    /// Held while `digest` is read into the tier: whoever waited for it
    /// finds the blob there.
    pub async fn loading(&self, digest: &Digest) -> tokio::sync::MutexGuard<'_, ()> {
        self.loading[digest.0[0] as usize % LOADING_STRIPES]
            .lock()
            .await
    }

    /// How many blobs were put into the tier (for tests).
    pub fn loads(&self) -> u64 {
        self.loads.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn get(&self, digest: &Digest) -> Option<Bytes> {
        self.cache.get(digest)
    }

    /// Whether a blob of `size` bytes belongs in memory.
    pub fn admits(&self, size: u64) -> bool {
        size <= self.max_object
    }

    pub fn insert(&self, digest: Digest, bytes: Bytes) {
        self.loads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.cache.insert(digest, bytes);
    }

    pub fn remove(&self, digest: &Digest) {
        self.cache.invalidate(digest);
    }
}

fn local_stream(file: Arc<File>, start: u64, len: u64) -> BoxStream<'static, io::Result<Bytes>> {
    let end = start + len;
    futures_util::stream::try_unfold(start, move |pos| {
        let file = file.clone();
        async move {
            if pos >= end {
                return Ok(None);
            }
            let n = (end - pos).min(FILE_CHUNK as u64) as usize;
            // From the page cache on this thread when it is there (no hop);
            // from the disk on the blocking pool otherwise.
            let bytes = match store::read_cached_at(&file, pos, n)? {
                Some(bytes) => bytes,
                None => tokio::task::spawn_blocking(move || store::read_at(&file, pos, n))
                    .await
                    .map_err(io::Error::other)??,
            };
            let next = pos + bytes.len() as u64;
            Ok(Some((bytes, next)))
        }
    })
    .boxed()
}

/// Where committed blobs live.
///
/// Contract: `open` of a digest that was never committed, or was removed,
/// fails with `NotFound` (the caller treats it as a miss); `remove` of an
/// absent blob is not an error and frees 0 bytes; a blob being read when it
/// is removed can still be read to its end (for at least `delete_delay` on
/// S3). Counting bytes is not the store's business but the
/// [`super::Cache`]'s, under the digest's lock.
pub trait BlobStore: Send + Sync {
    /// Makes the blob durable under its digest; `Ok(true)` when it was not
    /// there before (no row can reference it yet: the commit asks nothing
    /// about it), `Ok(false)` when it was, or the store cannot tell.
    fn commit(&self, temp: TempBlob, digest: Digest) -> BoxFuture<'_, io::Result<bool>>;
    /// Makes `bytes` durable as the blob `digest`, which no row references
    /// and no other commit has in flight ([`BatchBody::Fresh`]); what
    /// [`BlobStore::commit`] returns.
    fn commit_fresh(&self, bytes: Bytes, digest: Digest) -> BoxFuture<'_, io::Result<bool>>;
    /// Commits a batch (distinct digests), one result per item in order:
    /// each blob durable under its digest when its result is `Ok`, which
    /// says what [`BlobStore::commit`]'s does. By default the commits run
    /// side by side.
    fn commit_batch(
        &self,
        items: Vec<(BatchBody, Digest)>,
    ) -> BoxFuture<'_, Vec<io::Result<bool>>> {
        Box::pin(futures_util::future::join_all(items.into_iter().map(
            |(body, digest)| match body {
                BatchBody::Temp(temp) => self.commit(temp, digest),
                BatchBody::Fresh(bytes) => self.commit_fresh(bytes, digest),
            },
        )))
    }
    fn open<'a>(&'a self, digest: &'a Digest) -> BoxFuture<'a, io::Result<Blob>>;
    /// Whether a blob a row references is in place, if the store can tell
    /// at once (a local `stat` of a page-cached name); `None` when asking
    /// takes a round trip. No hash: such a blob was synced before its row.
    fn holds_now(&self, _digest: &Digest) -> Option<bool> {
        None
    }
    fn remove<'a>(&'a self, digest: &'a Digest) -> BoxFuture<'a, io::Result<u64>>;
}

/// Blobs on local disk, in the content store itself.
pub struct LocalBlobs(pub Arc<ContentStore>);

impl BlobStore for LocalBlobs {
    fn commit(&self, temp: TempBlob, digest: Digest) -> BoxFuture<'_, io::Result<bool>> {
        let store = self.0.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.commit_one(temp, &digest))
                .await
                .map_err(io::Error::other)?
        })
    }

    fn holds_now(&self, digest: &Digest) -> Option<bool> {
        Some(self.0.holds(digest))
    }

    fn commit_fresh(&self, bytes: Bytes, digest: Digest) -> BoxFuture<'_, io::Result<bool>> {
        let store = self.0.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let temp = store.create_temp_holding(&bytes)?;
                store.commit_one(temp, &digest)
            })
            .await
            .map_err(io::Error::other)?
        })
    }

    /// One blob: its data synced, renamed, its directory synced, in one hop
    /// ([`ContentStore::commit_one`]). A batch of [`SYNCFS_FROM`] or more:
    /// in one hop, the small fresh bodies written under their own names,
    /// the file system synced whole, the temp files renamed and synced
    /// again ([`ContentStore::commit_synced`]). One in between: the same
    /// while the machine holds little waiting to be written
    /// ([`ContentStore::commit_synced_if_quiet`]); else
    /// every temp file's data synced side by side, the renames in one hop,
    /// then each directory they went into synced once, side by side too
    /// (a few small syncs cost less than writing out whatever else is dirty,
    /// a large fill in progress included). A blob already in place costs
    /// only a `stat`.
    fn commit_batch(
        &self,
        items: Vec<(BatchBody, Digest)>,
    ) -> BoxFuture<'_, Vec<io::Result<bool>>> {
        let store = self.0.clone();
        let count = items.len();
        Box::pin(async move {
            if count == 1 {
                // One blob: its three steps in one hop.
                return match items.into_iter().next().expect("one item") {
                    (BatchBody::Temp(temp), digest) => vec![self.commit(temp, digest).await],
                    (BatchBody::Fresh(bytes), digest) => {
                        vec![self.commit_fresh(bytes, digest).await]
                    }
                };
            }
            // The file system synced whole, in one hop: always for a large
            // batch, for a few blobs while little else waits to be written;
            // file by file otherwise.
            let tried = tokio::task::spawn_blocking(move || {
                let tried = if count >= SYNCFS_FROM {
                    Ok(store.commit_synced(items))
                } else {
                    store.commit_synced_if_quiet(items)
                };
                (store, tried)
            })
            .await;
            let (store, items) = match tried {
                Ok((_, Ok(results))) => return results,
                Ok((store, Err(items))) => (store, items),
                Err(e) => {
                    return (0..count)
                        .map(|_| Err(io::Error::other(e.to_string())))
                        .collect()
                }
            };
            let synced = futures_util::future::join_all(items.into_iter().map(|(body, digest)| {
                let store = store.clone();
                async move {
                    let result = tokio::task::spawn_blocking(move || {
                        let temp = store.into_temp(body)?;
                        let needed = store.sync_temp(&temp, &digest)?;
                        Ok::<_, io::Error>((temp, needed))
                    })
                    .await;
                    (digest, result)
                }
            }))
            .await;
            let placing = store.clone();
            let placed = tokio::task::spawn_blocking(move || {
                let mut dirs = Vec::new();
                let results: Vec<io::Result<bool>> = synced
                    .into_iter()
                    .map(|(digest, result)| {
                        let (temp, needed) = result.map_err(io::Error::other)??;
                        if !needed {
                            return Ok(false);
                        }
                        for dir in placing.place(temp, &digest)? {
                            if !dirs.contains(&dir) {
                                dirs.push(dir);
                            }
                        }
                        Ok(true)
                    })
                    .collect();
                (results, dirs)
            })
            .await;
            let (mut results, dirs) = match placed {
                Ok(placed) => placed,
                Err(e) => {
                    return (0..count)
                        .map(|_| Err(io::Error::other(e.to_string())))
                        .collect()
                }
            };
            let synced = futures_util::future::join_all(
                dirs.into_iter()
                    .map(|dir| tokio::task::spawn_blocking(move || ContentStore::sync_dir(&dir))),
            )
            .await;
            // A directory that could not be synced leaves every blob of the
            // batch unproven: none of them gets a row.
            if let Some(error) = synced.into_iter().find_map(|r| match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(e) => Some(io::Error::other(e)),
            }) {
                let text = error.to_string();
                for result in &mut results {
                    if result.is_ok() {
                        *result = Err(io::Error::new(error.kind(), text.clone()));
                    }
                }
            }
            results
        })
    }

    fn open<'a>(&'a self, digest: &'a Digest) -> BoxFuture<'a, io::Result<Blob>> {
        let (store, digest) = (self.0.clone(), *digest);
        Box::pin(async move {
            let file = tokio::task::spawn_blocking(move || store.open_blob(&digest))
                .await
                .map_err(io::Error::other)??;
            Ok(Blob::Local(Arc::new(file)))
        })
    }

    fn remove<'a>(&'a self, digest: &'a Digest) -> BoxFuture<'a, io::Result<u64>> {
        let (store, digest) = (self.0.clone(), *digest);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.remove_blob(&digest))
                .await
                .map_err(io::Error::other)?
        })
    }
}

/// Blobs in an S3-compatible bucket, under `prefix/ab/cd/<sha256>`.
pub struct S3Blobs {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    delete_delay: Duration,
    /// Objects to delete, oldest first; a task of their own deletes them
    /// when due. Held in memory: a restart forgets them, and the objects stay
    /// in the bucket unreferenced (and uncounted).
    tombstones: Arc<Mutex<VecDeque<Tombstone>>>,
}

struct Tombstone {
    due: tokio::time::Instant,
    location: ObjectPath,
    /// The object's modification time when it was removed: a later one means
    /// it was uploaded again (by any instance) and must stay.
    modified_ms: i64,
}

/// An object's `Last-Modified` (unix ms), compared for equality only: no
/// clock but the bucket's is involved.
fn modified_ms(meta: &object_store::ObjectMeta) -> i64 {
    meta.last_modified.timestamp_millis()
}

impl S3Blobs {
    pub async fn connect(config: &S3Config) -> anyhow::Result<S3Blobs> {
        let url = url::Url::parse(&config.url)?;
        let bucket = url
            .host_str()
            .ok_or_else(|| anyhow::anyhow!("storage.url has no bucket"))?
            .to_string();
        let prefix = url.path().trim_matches('/').to_string();
        let mut builder = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_region(&config.region);
        if let Some(endpoint) = &config.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"));
        }
        if let Some(key) = &config.access_key_id {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &config.secret_access_key {
            builder = builder.with_secret_access_key(secret.expose());
        }
        let store: Arc<dyn ObjectStore> = Arc::new(builder.build()?);
        let blobs = S3Blobs {
            store,
            prefix,
            delete_delay: config.delete_delay,
            tombstones: Arc::default(),
        };
        // Prove the bucket answers before serving.
        let mut listing = blobs
            .store
            .list(Some(&ObjectPath::from(blobs.prefix.as_str())));
        listing.next().await.transpose()?;
        drop(listing);
        tokio::spawn(reap(blobs.store.clone(), Arc::downgrade(&blobs.tombstones)));
        Ok(blobs)
    }

    /// Uploaded again: a pending deletion of this instance's is void
    /// (another instance's sees the new modification time).
    fn uploaded(&self, digest: &Digest) {
        let location = self.location(digest);
        self.tombstones
            .lock()
            .expect("tombstones poisoned")
            .retain(|t| t.location != location);
    }

    fn location(&self, digest: &Digest) -> ObjectPath {
        let hex = digest.to_hex();
        let key = format!("{}/{}/{hex}", &hex[0..2], &hex[2..4]);
        if self.prefix.is_empty() {
            ObjectPath::from(key)
        } else {
            ObjectPath::from(format!("{}/{key}", self.prefix))
        }
    }
}

impl BlobStore for S3Blobs {
    /// Never `Ok(true)`: whether the object was there is not asked.
    fn commit(&self, temp: TempBlob, digest: Digest) -> BoxFuture<'_, io::Result<bool>> {
        Box::pin(async move {
            let location = self.location(&digest);
            let file = temp.reader();
            let len = file.metadata()?.len();
            // Multipart upload through a buffered writer: memory stays at one
            // part whatever the size.
            let mut writer = object_store::buffered::BufWriter::new(self.store.clone(), location);
            let mut stream = local_stream(file, 0, len);
            while let Some(chunk) = stream.next().await {
                writer.write_all(&chunk?).await?;
            }
            writer.shutdown().await?;
            self.uploaded(&digest);
            drop(temp);
            Ok(false)
        })
    }

    /// One PUT of the bytes kept in memory: no temp file.
    fn commit_fresh(&self, bytes: Bytes, digest: Digest) -> BoxFuture<'_, io::Result<bool>> {
        Box::pin(async move {
            self.store
                .put(&self.location(&digest), bytes.into())
                .await
                .map_err(io::Error::other)?;
            self.uploaded(&digest);
            Ok(false)
        })
    }

    fn open<'a>(&'a self, digest: &'a Digest) -> BoxFuture<'a, io::Result<Blob>> {
        Box::pin(async move {
            let location = self.location(digest);
            match self.store.head(&location).await {
                Ok(_) => Ok(Blob::Remote {
                    store: self.store.clone(),
                    location,
                }),
                Err(object_store::Error::NotFound { .. }) => Err(io::ErrorKind::NotFound.into()),
                Err(e) => Err(io::Error::other(e)),
            }
        })
    }

    fn remove<'a>(&'a self, digest: &'a Digest) -> BoxFuture<'a, io::Result<u64>> {
        Box::pin(async move {
            let location = self.location(digest);
            let meta = match self.store.head(&location).await {
                Ok(meta) => meta,
                Err(object_store::Error::NotFound { .. }) => return Ok(0),
                Err(e) => return Err(io::Error::other(e)),
            };
            let mut tombstones = self.tombstones.lock().expect("tombstones poisoned");
            if !tombstones.iter().any(|t| t.location == location) {
                tombstones.push_back(Tombstone {
                    due: tokio::time::Instant::now() + self.delete_delay,
                    location,
                    modified_ms: modified_ms(&meta),
                });
            }
            Ok(meta.size)
        })
    }
}

/// Deletes tombstoned objects when they are due, unless they were uploaded
/// again since; runs until the `S3Blobs` is dropped.
async fn reap(store: Arc<dyn ObjectStore>, tombstones: Weak<Mutex<VecDeque<Tombstone>>>) {
    const IDLE: Duration = Duration::from_secs(1);
    loop {
        let Some(queue) = tombstones.upgrade() else {
            return;
        };
        let now = tokio::time::Instant::now();
        let (due, next) = {
            let mut queue = queue.lock().expect("tombstones poisoned");
            let mut due = Vec::new();
            while queue.front().is_some_and(|t| t.due <= now) {
                due.extend(queue.pop_front());
            }
            (due, queue.front().map(|t| t.due))
        };
        drop(queue);
        for tombstone in due {
            match store.head(&tombstone.location).await {
                Ok(meta) if modified_ms(&meta) == tombstone.modified_ms => {
                    if let Err(error) = store.delete(&tombstone.location).await {
                        tracing::warn!(%error, location = %tombstone.location, "could not delete a blob");
                    }
                }
                // Uploaded again, or already gone.
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(error) => {
                    tracing::warn!(%error, location = %tombstone.location, "could not check a blob before deleting it; keeping it");
                }
            }
        }
        let wait = next.map_or(IDLE, |at| at.saturating_duration_since(now).min(IDLE));
        tokio::time::sleep(wait).await;
    }
}
