//! Running one fill: take the cross-instance lock, fetch from the remote's
//! mirrors (a 304 refreshes the stale entry), and hand each 200 to
//! [`super::receive`], asking the next mirror when its body is refused.

use std::sync::Arc;

use tokio::sync::watch;

use super::learn::{self, FillDigests};
use super::receive::{receive, Landing, Outcome};
use super::{FillRegistry, FillState, Me, Slot};
use crate::cache::{Cache, Entry};
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::meta::cluster::{Cluster, Lock, LockOutcome};
use crate::path::ArtifactPath;
use crate::upstream::fetch::{self, Fetched, Validators};
use crate::upstream::Remote;

/// The fill task: one per cold (or stale) key, spawned by
/// [`FillRegistry::join_or_start`]. Returns what is left once the readers
/// have what they get: the [`End`], which the task runs after dropping
/// this (much larger) future.
pub(super) async fn run(
    fills: Arc<FillRegistry>,
    remote: Arc<Remote>,
    path: ArtifactPath,
    accept: Option<&'static str>,
    stale: Option<Arc<Entry>>,
    tx: watch::Sender<FillState>,
    (mut slot, me): (Slot, Me),
) -> End {
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
                return End::new(path, tx, me);
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
                    return End::new(path, tx, me);
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
    let landing = match result {
        Ok(landing) => landing.map(|landing| (landing, remote)),
        Err(error) => {
            tracing::debug!(key = path.key(), %error, "fill failed");
            if let ProxyError::NotFound { status } = error {
                cache
                    .meta
                    .memory
                    .remember_absent(&path, status, now_ms(), me.ticket);
            }
            tx.send_replace(FillState::Failed(error));
            None
        }
    };
    End {
        landing,
        held,
        ..End::new(path, tx, me)
    }
}

/// The end of a fill task, once its readers have what they get: the
/// commit waited for (while the key stays in the registry, so a request
/// that comes meanwhile joins the complete fill), the cross-instance lock
/// released (after the entry is recorded: a peer waiting on it finds the
/// entry), then the fill out of the registry.
pub(super) struct End {
    landing: Option<(Landing, Arc<Remote>)>,
    held: Option<(Arc<Cluster>, Lock, AbortOnDrop)>,
    path: ArtifactPath,
    /// Kept open until the fill leaves the registry.
    tx: watch::Sender<FillState>,
    me: Me,
}

impl End {
    fn new(path: ArtifactPath, tx: watch::Sender<FillState>, me: Me) -> End {
        End {
            landing: None,
            held: None,
            path,
            tx,
            me,
        }
    }

    // Its parts used in place, not moved out: a local moved out of an
    // async fn's argument takes room in the future a second time.
    pub(super) async fn run(mut self, fills: &FillRegistry) {
        if let Some((landing, remote)) = &mut self.landing {
            landing.land(&fills.cache, remote, &self.path).await;
        }
        if let Some((cluster, lock, renewal)) = self.held.take() {
            drop(renewal);
            // Boxed: only a cluster's fills have a lock.
            Box::pin(cluster.release(lock)).await;
        }
        fills.finish(self.path.key(), self.me);
        drop(self.tx);
    }
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
/// commit (its [`Landing`] returned, to be waited for). A body that does
/// not match its declared digest is refused and the next mirror asked,
/// until one sends the declared bytes or none is left.
async fn fill(
    fills: &Arc<FillRegistry>,
    remote: &Arc<Remote>,
    path: &ArtifactPath,
    accept: Option<&'static str>,
    stale: Option<&Entry>,
    tx: &mut watch::Sender<FillState>,
    (slot, me): (&mut Slot, Me),
) -> Result<Option<Landing>, ProxyError> {
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
                return Ok(None);
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
            Outcome::Done(landing) => return Ok(landing),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::proxy::Proxy;

    /// The task of a fill whose commit waits holds its end, not the whole
    /// fill: the end's future takes at most 1 KiB, the fill's several
    /// (hundreds of fills may wait behind the group commit at once).
    #[tokio::test]
    async fn a_fill_waiting_for_its_commit_holds_a_small_part_of_the_fill() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[storage]\npath = \"{d}/store\"\n\n[metadata]\nurl = \"sqlite://{d}/meta.db\"\n\n\
             [[remote]]\nname = \"r\"\nmirrors = [\"http://127.0.0.1:9/\"]\n",
            d = dir.path().display()
        );
        let proxy = Proxy::build(&Config::parse(&text, "test").unwrap())
            .await
            .unwrap();
        let (path, me) = (
            ArtifactPath::parse("/r/a/b").unwrap(),
            Me {
                ticket: proxy.cache.meta.memory.purges.ticket(),
                id: 0,
            },
        );
        let (tx, _rx) = watch::channel(FillState::Connecting);
        let fill = run(
            proxy.fills.clone(),
            proxy.remote("r").unwrap(),
            path.clone(),
            None,
            None,
            tx.clone(),
            (Slot(None), me),
        );
        let end = End::new(path, tx, me);
        let ending = end.run(&proxy.fills);
        let (fill, ending) = (std::mem::size_of_val(&fill), std::mem::size_of_val(&ending));
        assert!(
            ending <= 1024 && ending * 4 < fill,
            "the end's {ending} bytes, the fill's {fill}"
        );
    }
}
