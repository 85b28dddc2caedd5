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

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::blob::Blob;
use super::content::batch::BatchBody;
use super::content::pack::{self, Place, PlaceRow};
use super::content::{ContentStore, TempBlob};
use super::digest::Digest;
use super::held::{CheckedRanges, HeldFiles};

/// The smallest batch whose blobs are made durable by syncing the whole
/// file system (`syncfs`, twice) however much else waits to be written (a
/// smaller one too while little does): for 128 files of 1 KiB in new
/// directories, 12–32 ms against 35–71 ms file by file (BENCHMARKS.md).
const SYNCFS_FROM: usize = 16;

/// Where committed blobs live.
///
/// Contract: `open` of a digest that was never committed, or was removed,
/// fails with `NotFound` (the caller treats it as a miss); `remove` of an
/// absent blob is not an error and frees 0 bytes; a blob being read when it
/// is removed can still be read to its end (for at least `delete_delay` on
/// S3). Counting bytes is not the store's business but the
/// [`crate::cache::Cache`]'s, under the digest's lock.
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
                BatchBody::Fresh(bytes) | BatchBody::Packed(bytes) => {
                    self.commit_fresh(bytes, digest)
                }
            },
        )))
    }
    fn open<'a>(&'a self, digest: &'a Digest) -> BoxFuture<'a, io::Result<Blob>>;
    /// Keeps `blob`, just opened and (where `hashed`) checked, for the next
    /// hits: a file's descriptor either way, a pack range's check only when
    /// hashed. Nothing is kept by default.
    fn hold(&self, _digest: &Digest, _blob: &Blob, _hashed: bool) {}
    /// Lets go of what [`BlobStore::hold`] kept of `digest` (found
    /// damaged).
    fn let_go(&self, _digest: &Digest) {}
    /// Lets go of what it kept that no longer serves (each eviction round).
    fn let_go_stale(&self) {}
    /// Whether a blob a row references is in place, if the store can tell
    /// at once (a local `stat` of a page-cached name); `None` when asking
    /// takes a round trip. No hash: such a blob was synced before its row.
    fn holds_now(&self, _digest: &Digest) -> Option<bool> {
        None
    }
    /// Returns the bytes freed on disk: none for a packed blob, whose
    /// range is dead until its pack is compacted.
    fn remove<'a>(&'a self, digest: &'a Digest) -> BoxFuture<'a, io::Result<u64>>;
    /// The places of `digests` this store packed whose rows are still to
    /// be written (in the batch's transaction, by the caller); none by
    /// default: a store that packs nothing.
    fn pending_places(&self, _digests: &[Digest]) -> Vec<PlaceRow> {
        Vec::new()
    }
    /// Those rows are written.
    fn places_written(&self, _rows: &[PlaceRow]) {}
    /// Bytes on disk that no blob uses, until compacted (counted against
    /// `storage.max_size` beside the live blobs).
    fn dead_bytes(&self) -> u64 {
        0
    }
    /// Reclaims dead bytes; returns the bytes freed and copied. Nothing
    /// by default.
    fn compact(&self) -> BoxFuture<'_, io::Result<(u64, u64)>> {
        Box::pin(async { Ok((0, 0)) })
    }
}

/// Blobs on local disk, in the content store itself.
pub struct LocalBlobs {
    store: Arc<ContentStore>,
    /// Blob files kept open for the next hits.
    held: Arc<HeldFiles>,
    /// Where packed blobs were hashed at an open, for the next hits.
    ranges: CheckedRanges,
}

impl LocalBlobs {
    /// The store's blobs, up to `open_files` of their files held open for
    /// hits ([`HeldFiles`]).
    pub fn new(store: Arc<ContentStore>, open_files: usize) -> LocalBlobs {
        LocalBlobs {
            store,
            held: Arc::new(HeldFiles::new(open_files)),
            ranges: CheckedRanges::default(),
        }
    }

    /// A packed blob at `place` of the open `file`: [`Blob::Held`] when
    /// its bytes there were hashed within the minute.
    fn packed(&self, digest: &Digest, file: Arc<File>, place: Place) -> Blob {
        if self.ranges.serves(digest, place, Instant::now) {
            return Blob::Held {
                file,
                start: place.start,
            };
        }
        Blob::Packed { file, place }
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
    fn commit_files(
        &self,
        items: Vec<(BatchBody, Digest)>,
    ) -> BoxFuture<'_, Vec<io::Result<bool>>> {
        let store = self.store.clone();
        let count = items.len();
        Box::pin(async move {
            if count == 1 {
                // One blob: its three steps in one hop.
                return match items.into_iter().next().expect("one item") {
                    (BatchBody::Temp(temp), digest) => vec![self.commit(temp, digest).await],
                    (BatchBody::Fresh(bytes) | BatchBody::Packed(bytes), digest) => {
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
                        let temp = store.temp_of(body)?;
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
}

impl BlobStore for LocalBlobs {
    fn commit(&self, temp: TempBlob, digest: Digest) -> BoxFuture<'_, io::Result<bool>> {
        let store = self.store.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.commit_one(temp, &digest))
                .await
                .map_err(io::Error::other)?
        })
    }

    fn holds_now(&self, digest: &Digest) -> Option<bool> {
        Some(self.store.holds(digest))
    }

    fn commit_fresh(&self, bytes: Bytes, digest: Digest) -> BoxFuture<'_, io::Result<bool>> {
        let store = self.store.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let temp = store.create_temp_holding(&bytes)?;
                store.commit_one(temp, &digest)
            })
            .await
            .map_err(io::Error::other)?
        })
    }

    /// The small bodies kept in memory ([`ContentStore::packs_len`])
    /// appended to the current pack in one hop (one `pwrite`, one
    /// `fdatasync`), beside the others committed as files
    /// ([`LocalBlobs::commit_files`]).
    fn commit_batch(
        &self,
        items: Vec<(BatchBody, Digest)>,
    ) -> BoxFuture<'_, Vec<io::Result<bool>>> {
        let packs = self.store.packs.clone();
        let (packed, files): (Vec<_>, Vec<_>) =
            items
                .into_iter()
                .enumerate()
                .partition(|(_, (body, _))| match body {
                    BatchBody::Fresh(bytes) | BatchBody::Packed(bytes) => {
                        packs.takes(bytes.len() as u64)
                    }
                    BatchBody::Temp(_) => false,
                });
        Box::pin(async move {
            let (file_at, files): (Vec<usize>, Vec<_>) = files.into_iter().unzip();
            if packed.is_empty() {
                return self.commit_files(files).await;
            }
            let (pack_at, bodies): (Vec<usize>, Vec<(Bytes, Digest)>) = packed
                .into_iter()
                .map(|(at, (body, digest))| match body {
                    BatchBody::Fresh(bytes) | BatchBody::Packed(bytes) => (at, (bytes, digest)),
                    BatchBody::Temp(_) => unreachable!("only bodies in memory are packed"),
                })
                .unzip();
            let appending = tokio::task::spawn_blocking(move || packs.append(&bodies));
            let filing = async {
                match files.is_empty() {
                    true => Vec::new(),
                    false => self.commit_files(files).await,
                }
            };
            let (appended, filed) = futures_util::join!(appending, filing);
            let mut results: Vec<Option<io::Result<bool>>> =
                (0..file_at.len() + pack_at.len()).map(|_| None).collect();
            for (at, result) in file_at.into_iter().zip(filed) {
                results[at] = Some(result);
            }
            match appended.map_err(io::Error::other).and_then(|r| r) {
                Ok(new) => {
                    for (at, new) in pack_at.into_iter().zip(new) {
                        results[at] = Some(Ok(new));
                    }
                }
                Err(error) => {
                    for at in pack_at {
                        results[at] = Some(Err(io::Error::new(error.kind(), error.to_string())));
                    }
                }
            }
            results
                .into_iter()
                .map(|r| r.expect("a result for each item"))
                .collect()
        })
    }

    /// A packed blob whose pack is open ([`Blob::Held`] where hashed at an
    /// open in the minute before: [`CheckedRanges`]), or a file held open
    /// since an earlier open: no hop, no `open`. Otherwise its pack or its
    /// own file is opened on the blocking pool; a blob neither memory nor a file
    /// knows may have been packed by another process: its place is read
    /// from the database.
    fn open<'a>(&'a self, digest: &'a Digest) -> BoxFuture<'a, io::Result<Blob>> {
        let (store, digest) = (self.store.clone(), *digest);
        Box::pin(async move {
            if let Some((file, place)) = store.packs.open_now(&digest) {
                return Ok(self.packed(&digest, file, place));
            }
            if let Some(file) = self.held.get(&digest, Instant::now()) {
                return Ok(Blob::Held { file, start: 0 });
            }
            match open_or_unlearn(&store, digest).await {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                opened => return opened,
            }
            let Some(rows) = store.packs.rows.get() else {
                return Err(io::ErrorKind::NotFound.into());
            };
            let Some(row) = rows.lookup(digest).await? else {
                return Err(io::ErrorKind::NotFound.into());
            };
            store.packs.learn(row);
            open_or_unlearn(&store, digest).await
        })
    }

    /// A packed blob's row is deleted and its range counted dead (nothing
    /// freed on disk until its pack is compacted); any other's file is
    /// unlinked.
    fn remove<'a>(&'a self, digest: &'a Digest) -> BoxFuture<'a, io::Result<u64>> {
        let (store, digest) = (self.store.clone(), *digest);
        Box::pin(async move {
            let deleted = match store.packs.rows.get() {
                Some(rows) => rows.forget(digest, store.packs.row_of(&digest)).await?,
                None => Vec::new(),
            };
            if store.packs.forget(&digest, &deleted) {
                self.ranges.let_go(&digest);
                return Ok(0);
            }
            // Let go of after the unlink, on the blocking thread (done
            // even if this future is dropped): a file held by an open that
            // raced the unlink is let go here, or not held at all
            // (`HeldFiles::hold`).
            let held = self.held.clone();
            tokio::task::spawn_blocking(move || {
                let freed = store.remove_blob(&digest);
                held.let_go(&digest);
                freed
            })
            .await
            .map_err(io::Error::other)?
        })
    }

    fn hold(&self, digest: &Digest, blob: &Blob, hashed: bool) {
        match *blob {
            Blob::Local(ref file) => self.held.hold(*digest, file, Instant::now()),
            Blob::Packed { place, .. } if hashed => {
                self.ranges.checked(*digest, place, Instant::now);
            }
            _ => {}
        }
    }

    fn let_go(&self, digest: &Digest) {
        self.held.let_go(digest);
        self.ranges.let_go(digest);
    }

    fn let_go_stale(&self) {
        self.held.let_go_stale(Instant::now());
    }

    fn pending_places(&self, digests: &[Digest]) -> Vec<PlaceRow> {
        self.store.packs.pending_rows(digests)
    }

    fn places_written(&self, rows: &[PlaceRow]) {
        self.store.packs.written(rows);
    }

    fn dead_bytes(&self) -> u64 {
        self.store.packs.dead_bytes()
    }

    fn compact(&self) -> BoxFuture<'_, io::Result<(u64, u64)>> {
        Box::pin(pack::compact(self.store.packs.clone()))
    }
}

/// [`open_local`] on the blocking pool; a place whose pack is gone
/// (removed behind the store's back) is forgotten, so the blob's next
/// commit packs it again.
async fn open_or_unlearn(store: &Arc<ContentStore>, digest: Digest) -> io::Result<Blob> {
    let s = store.clone();
    let opened = tokio::task::spawn_blocking(move || open_local(&s, &digest))
        .await
        .map_err(io::Error::other)?;
    if matches!(&opened, Err(e) if e.kind() == io::ErrorKind::NotFound) {
        store.packs.unlearn(&digest);
    }
    opened
}

/// A committed blob opened: its range of a pack, or its own file. Blocking.
fn open_local(store: &ContentStore, digest: &Digest) -> io::Result<Blob> {
    match store.packs.open_range(digest) {
        Some(range) => range.map(|(file, place)| Blob::Packed { file, place }),
        None => Ok(Blob::Local(Arc::new(store.open_blob(digest)?))),
    }
}
