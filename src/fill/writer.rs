//! Running one fill: take the cross-instance lock, fetch from the remote's
//! mirrors (a 304 refreshes the stale entry), and hand each 200 to
//! [`super::receive`], asking the next mirror when its body is refused.

use std::sync::Arc;

use tokio::sync::watch;

use super::learn::{self, FillDigests};
use super::receive::{receive, Outcome};
use super::{FillRegistry, FillState, Me, Slot};
use crate::cache::{Cache, Entry};
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::meta::cluster::{Cluster, LockOutcome};
use crate::path::ArtifactPath;
use crate::upstream::fetch::{self, Fetched, Validators};
use crate::upstream::Remote;

/// The fill task: one per cold (or stale) key, spawned by
/// [`FillRegistry::join_or_start`]; it leaves the registry when done.
pub(super) async fn run(
    fills: Arc<FillRegistry>,
    remote: Arc<Remote>,
    path: ArtifactPath,
    accept: Option<&'static str>,
    stale: Option<Arc<Entry>>,
    tx: watch::Sender<FillState>,
    (mut slot, me): (Slot, Me),
) {
    let cache = &fills.cache;
    // The entry index keeps no `ETag`: the row has it, for the revalidation.
    let stale = match stale {
        Some(entry) if entry.from_index => match cache.meta.read_row(&path).await {
            Ok(Some(row)) if row.digest == entry.digest => Some(Arc::new(row)),
            _ => Some(entry),
        },
        stale => stale,
    };
    if stale.is_none() {
        // Look again now that this fill holds the key: a fill that committed
        // between the request's lookup and its joining the registry has
        // already left it, and its entry is what this request wants.
        if let Ok(Some(entry)) = cache.meta.lookup_row(&path).await {
            let fresh = remote.policy.is_fresh(path.path(), entry.age(now_ms()));
            if fresh && cache.open_blob(&entry.digest, entry.size).await.is_ok() {
                tx.send_replace(FillState::Shared(entry));
                fills.finish(path.key(), me);
                return;
            }
        }
    }
    // Across instances: one fill per cold artifact, through a Redis lock.
    let mut held = None;
    if let (Some(cluster), None) = (cache.meta.memory.cluster(), &stale) {
        match cluster.try_lock(path.key()).await {
            LockOutcome::Acquired(lock) => {
                let renewal = AbortOnDrop(cluster.hold(&lock));
                held = Some((cluster.clone(), lock, renewal));
            }
            LockOutcome::Held => {
                if let Some(entry) = wait_for_peer(cache, cluster, &path).await {
                    tx.send_replace(FillState::Shared(entry));
                    fills.finish(path.key(), me);
                    return;
                }
            }
            LockOutcome::Unavailable => {}
        }
    }
    let mut tx = tx;
    let result = fill(
        &fills,
        &remote,
        &path,
        accept,
        stale.as_deref(),
        &mut tx,
        (&mut slot, me),
    )
    .await;
    if let Some((cluster, lock, renewal)) = held {
        drop(renewal);
        cluster.release(lock).await;
    }
    if let Err(error) = result {
        tracing::debug!(key = path.key(), %error, "fill failed");
        if let ProxyError::NotFound { status } = error {
            cache
                .meta
                .memory
                .remember_absent(&path, status, now_ms(), me.ticket);
        }
        tx.send_replace(FillState::Failed(error));
    }
    fills.finish(path.key(), me);
}

/// The Redis lock's renewal task, stopped when the fill ends — also when it
/// panics, so a dead fill's lock expires instead of being renewed forever.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Fetch, then either a 304 (the stale entry is refreshed), a stream-through
/// (the store cannot take the body), or download → verify → publish →
/// commit. A body that does not match its declared digest is refused and the
/// next mirror asked, until one sends the declared bytes or none is left.
async fn fill(
    fills: &Arc<FillRegistry>,
    remote: &Arc<Remote>,
    path: &ArtifactPath,
    accept: Option<&'static str>,
    stale: Option<&Entry>,
    tx: &mut watch::Sender<FillState>,
    (slot, me): (&mut Slot, Me),
) -> Result<(), ProxyError> {
    // Lets tests reach the panic path of a fill (debug builds only).
    #[cfg(debug_assertions)]
    if path.path().contains("__mirrorcache_test_panic_in_fill__") {
        panic!("test panic in a fill");
    }
    let cache = &fills.cache;
    let validators = stale
        .map(|e| Validators {
            etag: e.upstream_etag.as_deref(),
            last_modified: e.upstream_last_modified.as_deref(),
        })
        .unwrap_or_default();
    let digests = FillDigests::of(fills, remote, path).await?;
    // Mirrors (of the path's set) whose body was refused, and why.
    let mut refused = Vec::new();
    let mut mismatch = None;
    loop {
        let fetched = match fetch::fetch_avoiding(
            remote,
            path.upstream(),
            validators,
            accept,
            &refused,
        )
        .await
        {
            Ok(fetched) => fetched,
            // The mismatch says more than "no mirror left".
            Err(error) => return Err(mismatch.unwrap_or(error)),
        };
        let upstream = match fetched {
            Fetched::NotModified { mirror } => {
                let entry = stale.expect("a 304 is only accepted when validators were sent");
                let fresh = cache
                    .meta
                    .mark_revalidated(path, entry, now_ms(), me.ticket)
                    .await?;
                tracing::debug!(key = path.key(), mirror = mirror.base(), "revalidated");
                let learning = digests.learning(fills, remote, path, &fresh.digest);
                tx.send_replace(FillState::Revalidated(fresh.clone()));
                if let Some(learning) = learning {
                    // A document cached before this process learned from it.
                    if let Ok(blob) = cache.open_blob(&fresh.digest, fresh.size).await {
                        let body = (fresh.digest, fresh.size);
                        learn::from_document(learning, remote, path, blob, body).await;
                    }
                }
                return Ok(());
            }
            Fetched::Body(body) => body,
        };
        cache.meta.memory.forget_absent(path);
        match receive(
            fills,
            remote,
            path,
            upstream,
            &digests,
            stale,
            tx,
            (slot, me),
        )
        .await?
        {
            Outcome::Done => return Ok(()),
            Outcome::Refused {
                mirror_idx,
                error,
                published,
            } => {
                refused.push(mirror_idx);
                if published {
                    // Readers that had begun get a broken transfer; the
                    // requests from now on follow the next attempt.
                    *tx = fills.restart(path.key(), me, tx, error.clone());
                }
                mismatch = Some(error);
            }
        }
    }
}

/// Waits (up to `lock_wait`) for another instance's fill of `path` to land in
/// the shared metadata and store. `None` when it does not: the lock expired or
/// was released without an entry (the peer failed), or waiting took too long.
async fn wait_for_peer(
    cache: &Cache,
    cluster: &Cluster,
    path: &ArtifactPath,
) -> Option<Arc<Entry>> {
    let deadline = tokio::time::Instant::now() + cluster.lock_wait();
    let mut peer_done = false;
    loop {
        if let Ok(Some(entry)) = cache.meta.lookup(path).await {
            if cache.open_blob(&entry.digest, entry.size).await.is_ok() {
                return Some(entry);
            }
        }
        if peer_done || tokio::time::Instant::now() >= deadline {
            tracing::debug!(
                key = path.key(),
                "no shared entry from the other instance; fetching here"
            );
            return None;
        }
        // Look once more after the lock is gone: the entry is recorded before
        // the lock is released.
        peer_done = !cluster.is_locked(path.key()).await;
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}
