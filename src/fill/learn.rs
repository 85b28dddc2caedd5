//! Declared digests on the fill's side: what a fill expects its body to hash
//! to (from the artifact's own path, or from what an index declared), and
//! learning those declarations from each index document a fill brings in.

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::FillRegistry;
use crate::cache::{Blob, Cache};
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::kind::declared::{self, Declared};
use crate::path::ArtifactPath;
use crate::upstream::Remote;

/// How long a fill with no declared digest waits for documents still being
/// learned (a client asks for an artifact right after its index).
const LEARNING_WAIT: Duration = Duration::from_secs(10);

/// The digest the body of `path` must have, if anything declares one.
/// `require_declared_hash` turns "nothing declared" into a refusal.
pub(super) async fn expected_digest(
    fills: &FillRegistry,
    remote: &Remote,
    path: &ArtifactPath,
) -> Result<Option<Declared>, ProxyError> {
    let kind = remote.config.kind;
    if let Some(declared) = declared::in_path(kind, path.path()) {
        return Ok(Some(declared));
    }
    let Some(artifact) = declared::artifact_key(kind, path.path()) else {
        return Ok(None);
    };
    let meta = &fills.cache.meta;
    let mut found = meta.declared(&remote.name, &artifact).await;
    if matches!(found, Ok(None)) && fills.wait_for_learning().await {
        found = meta.declared(&remote.name, &artifact).await;
    }
    match found {
        Ok(Some(declared)) => Ok(Some(declared)),
        Ok(None) if remote.config.require_declared_hash => Err(ProxyError::Undeclared),
        Ok(None) => Ok(None),
        Err(error) => {
            tracing::warn!(key = path.key(), %error, "declared digests unavailable");
            // Fail closed only where the operator asked for declared digests.
            if remote.config.require_declared_hash {
                Err(error)
            } else {
                Ok(None)
            }
        }
    }
}

impl FillRegistry {
    /// Waits (a bounded time) until no document is being learned; whether
    /// there was anything to wait for.
    async fn wait_for_learning(&self) -> bool {
        if self.learning.load(Ordering::Acquire) == 0 {
            return false;
        }
        let _ = tokio::time::timeout(LEARNING_WAIT, async {
            loop {
                let learned = self.learned.notified();
                if self.learning.load(Ordering::Acquire) == 0 {
                    return;
                }
                learned.await;
            }
        })
        .await;
        true
    }
}

/// Counts a document being learned, until dropped. Taken before the
/// document is published, so a client that asks for an artifact as soon as
/// it has read the index finds its fill waiting for the declarations.
pub(super) struct Learning<'a>(&'a FillRegistry);

impl<'a> Learning<'a> {
    pub(super) fn start(fills: &'a FillRegistry) -> Learning<'a> {
        fills.learning.fetch_add(1, Ordering::AcqRel);
        Learning(fills)
    }
}

impl Drop for Learning<'_> {
    fn drop(&mut self) {
        if self.0.learning.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.learned.notify_waiters();
        }
    }
}

/// Reads the digests the document just filled at `path` declares and keeps
/// them. Errors cost only the learning; they are logged.
pub(super) async fn from_document(
    learning: Learning<'_>,
    remote: &Remote,
    path: &ArtifactPath,
    file: Arc<File>,
    size: u64,
) {
    if let Err(error) = learn(&learning.0.cache, remote, path, file, size).await {
        tracing::warn!(key = path.key(), %error, "could not learn the declared digests");
    }
}

async fn learn(
    cache: &Cache,
    remote: &Remote,
    path: &ArtifactPath,
    file: Arc<File>,
    size: u64,
) -> Result<(), ProxyError> {
    if size > remote.config.max_document_size {
        return Ok(());
    }
    let body = Blob::Local(file)
        .read_all(size)
        .await
        .map_err(|e| ProxyError::Store(e.to_string()))?;
    let (config, doc) = (remote.config.clone(), path.path().to_string());
    // Parsing is a pass over up to max_document_size: off the async threads.
    let items = tokio::task::spawn_blocking(move || {
        let name = config.name.clone();
        // Kept under the path a request for it normalises to, once each (a
        // JSON API page lists a file under `urls` and `releases`).
        let unique: std::collections::BTreeMap<String, Declared> =
            declared::learn(&config, &doc, &body)
                .into_iter()
                .filter_map(|(artifact, digest)| {
                    let parsed = ArtifactPath::parse(&format!("/{name}/{artifact}")).ok()?;
                    Some((parsed.path().to_string(), digest))
                })
                .collect();
        unique.into_iter().collect::<Vec<_>>()
    })
    .await
    .map_err(|e| ProxyError::Store(e.to_string()))?;
    if items.is_empty() {
        return Ok(());
    }
    let learned = cache
        .learn_declared(&remote.name, remote.config.kind, &items, now_ms())
        .await?;
    tracing::debug!(key = path.key(), ?learned, "learned declared digests");
    Ok(())
}
