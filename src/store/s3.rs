//! [`S3Blobs`]: committed blobs in an S3-compatible bucket, removed through
//! tombstones `storage.delete_delay` late (see [`super::blobs`]).

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use tokio::io::AsyncWriteExt;

use super::blob::{local_stream, Blob};
use super::blobs::BlobStore;
use super::content::TempBlob;
use super::digest::Digest;
use crate::config::S3Config;

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
