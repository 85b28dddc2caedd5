//! The deleting half of "never a row without its blob": rows forgotten and
//! blobs released, each under its digest's lock, so a release never falls
//! between a commit's rename and its row; and a committed blob opened (a
//! corrupt one found on the way is dropped with its rows).

use super::facade::Cache;
use crate::error::ProxyError;
use crate::path::ArtifactPath;
use crate::store::{Blob, Digest};

impl Cache {
    /// Opens a committed blob of `size` bytes; `NotFound` if it is gone. A
    /// small one is read whole and checked on each open the in-memory tier
    /// does not answer (a blob damaged on disk is never served: it is
    /// dropped with its rows and fetched again). A blob's own file is then
    /// held open: the hits after it read it with no `open` and no hash, for
    /// a minute after that open and while its file is linked, looked at
    /// once a second (`crate::store::HeldFiles`); a packed blob of at least
    /// [`crate::store::RANGES_CHECKED_FROM`] is read unhashed at the place
    /// it was hashed at for that minute (`CheckedRanges`). A small blob is
    /// kept in the tier, read and checked, when it was opened within
    /// [`crate::store::ADMIT_WITHIN_MS`] before (an S3 object always), so a
    /// local blob opened now and then is not inserted only to evict
    /// another; opens arriving together read it into the tier once (the
    /// others wait for that read and take it from the tier).
    pub async fn open_blob(&self, digest: &Digest, size: u64) -> std::io::Result<Blob> {
        if let Some(bytes) = self.hot.get(digest) {
            return Ok(Blob::Memory(bytes));
        }
        let blob = self.blobs.open(digest).await?;
        if !self.hot.admits(size) {
            self.blobs.hold(digest, &blob, false);
            return Ok(blob);
        }
        // An S3 object is kept from its first open: the tier saves it a
        // request to the bucket, not a read of the page cache.
        let keep =
            matches!(blob, Blob::Remote { .. }) || self.hot.wanted(digest, crate::clock::now_ms());
        // Checked when it was opened.
        if matches!(blob, Blob::Held { .. }) && !keep {
            return Ok(blob);
        }
        // Held until the blob is in the tier.
        let _loading = if keep {
            let loading = self.hot.loading(digest).await;
            if let Some(bytes) = self.hot.get(digest) {
                return Ok(Blob::Memory(bytes));
            }
            Some(loading)
        } else {
            None
        };
        let bytes = blob.read_whole(size).await?;
        if Digest::of(&bytes) != *digest {
            tracing::error!(?digest, "corrupt blob on disk; dropping it and its rows");
            self.blobs.let_go(digest);
            self.hot.remove(digest);
            let _counting = self.locks.accounting.read().await;
            let _digest = self.locks.digest(digest).lock().await;
            if self.meta.forget_digest(&digest.to_hex()).await.is_ok() {
                self.delete_blob(digest).await;
            }
            return Err(std::io::ErrorKind::NotFound.into());
        }
        self.blobs.hold(digest, &blob, true);
        if keep {
            self.hot.insert(*digest, bytes.clone());
        }
        Ok(Blob::Memory(bytes))
    }

    /// Deletes the blob if no metadata row references it any more; returns
    /// the bytes freed. The check and the deletion hold the digest's lock,
    /// so a commit of the same digest happens wholly before (and the blob
    /// stays) or wholly after (and puts it back).
    pub async fn release_blob(&self, digest: &Digest) -> u64 {
        let _counting = self.locks.accounting.read().await;
        let _digest = self.locks.digest(digest).lock().await;
        self.release_held(digest).await
    }

    /// [`Cache::release_blob`] for a caller that holds the digest's lock and
    /// a shared `accounting` (across the deletion of the row and this
    /// release, so neither a commit nor a re-derivation ever sees the row
    /// gone and the blob still counted).
    pub(crate) async fn release_held(&self, digest: &Digest) -> u64 {
        match self.meta.digest_referenced(&digest.to_hex()).await {
            Ok(false) => match self.commits.in_flight_size(digest) {
                // Its row is about to be written (see `commit`): the blob
                // stays, uncounted until that row counts it again.
                Some(size) => {
                    self.budget.sub_committed(size);
                    0
                }
                None => self.delete_blob(digest).await,
            },
            Ok(true) => 0,
            Err(error) => {
                tracing::warn!(%error, "cannot tell whether a blob is still referenced; keeping it");
                0
            }
        }
    }

    /// Drops the entry for `path` and releases its blob (the one the deleted
    /// row referenced); returns the bytes freed.
    pub async fn forget_entry(&self, path: &ArtifactPath) -> Result<u64, ProxyError> {
        self.forget_row(path.remote(), path.stored_path()).await
    }

    /// [`Cache::forget_entry`] by the row's parts (eviction holds rows).
    /// Every row is deleted under its digest's lock, then that blob
    /// released under the same lock.
    pub async fn forget_row(&self, remote: &str, path: &str) -> Result<u64, ProxyError> {
        Ok(self.forget_row_counted(remote, path).await?.unwrap_or(0))
    }

    /// [`Cache::forget_row`]: `None` when there was no row, else the bytes
    /// freed.
    pub(crate) async fn forget_row_counted(
        &self,
        remote: &str,
        path: &str,
    ) -> Result<Option<u64>, ProxyError> {
        let _counting = self.locks.accounting.read().await;
        self.forget_row_held(remote, path).await
    }

    /// [`Cache::forget_row_counted`] for a caller holding `accounting`
    /// shared.
    pub(crate) async fn forget_row_held(
        &self,
        remote: &str,
        path: &str,
    ) -> Result<Option<u64>, ProxyError> {
        loop {
            let Some(hex) = self.meta.db.stored_digest(remote, path).await? else {
                return Ok(None);
            };
            let Some(digest) = Digest::from_hex(&hex) else {
                self.meta.forget_row(remote, path).await?;
                return Ok(Some(0));
            };
            let _digest = self.locks.digest(&digest).lock().await;
            if self.meta.forget_row_of(remote, path, Some(&hex)).await? {
                return Ok(Some(self.release_held(&digest).await));
            }
            // Replaced since it was read: look again.
        }
    }

    /// Drops every entry of `remote` (rows recorded while this runs may
    /// stay: a purge makes them stale first, `purge`) and releases their
    /// blobs, digest by digest under its lock; returns how many rows went,
    /// how many digests they referenced and the bytes freed. Memory and
    /// other instances are the purge's business.
    pub async fn forget_remote(&self, remote: &str) -> Result<(u64, usize, u64), ProxyError> {
        let _counting = self.locks.accounting.read().await;
        self.forget_remote_held(remote).await
    }

    /// [`Cache::forget_remote`] for a caller holding `accounting` shared.
    pub(crate) async fn forget_remote_held(
        &self,
        remote: &str,
    ) -> Result<(u64, usize, u64), ProxyError> {
        // By their keys, a digest's rows at a time: the embedded database
        // has no index on `entries.digest` to find them by.
        let by_digest = self.meta.db.remote_rows(remote).await?;
        let (mut rows, mut freed) = (0, 0);
        for (hex, paths) in &by_digest {
            let digest = Digest::from_hex(hex);
            let _digest = match &digest {
                Some(digest) => Some(self.locks.digest(digest).lock().await),
                None => None,
            };
            rows += self.meta.delete_remote_paths(remote, hex, paths).await?;
            if let Some(digest) = &digest {
                freed += self.release_held(digest).await;
            }
        }
        Ok((rows, by_digest.len(), freed))
    }

    /// Deletes an unreferenced blob and uncounts it. The caller holds the
    /// digest's lock and a shared `accounting`.
    pub(crate) async fn delete_blob(&self, digest: &Digest) -> u64 {
        let freed = self.remove_blob(digest).await;
        self.budget.sub_committed(freed);
        freed
    }

    /// Deletes a blob (and its copy in memory), counting nothing: for
    /// [`Cache::delete_blob`], and for one that is no longer counted.
    /// Returns the bytes freed.
    pub(crate) async fn remove_blob(&self, digest: &Digest) -> u64 {
        self.hot.remove(digest);
        self.blobs.remove(digest).await.unwrap_or_else(|error| {
            tracing::warn!(%error, "could not delete a blob");
            0
        })
    }
}
