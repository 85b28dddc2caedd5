//! Documents built once: the filtered and rewritten form of an index
//! document is a function of the stored entry (its digest), the path and
//! variant, the public base URL it is rewritten for, the remote's config
//! (its generation) and, where a guard filter judges by the clock, the
//! minute. [`Documents`] builds each such form once — concurrent requests
//! for it wait for the one build — keeps it in a tier bounded in bytes for
//! the requests after, and bounds the bytes of documents being built at
//! once: a build that would pass the budget waits (up to [`BUILD_WAIT`])
//! instead of allocating, then gets [`Refused::Busy`].
//!
//! Knows nothing of HTTP or of what a document says: the caller hands in
//! the key, the stored size and the build.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{OnceCell, Semaphore};

/// Bytes of built documents kept for later requests.
pub const KEPT_BYTES: u64 = 128 * 1024 * 1024;
/// Bytes of documents being built at once, counted as [`BUILD_FACTOR`]
/// times their stored size (the bytes read, filtered and rewritten).
pub const BUILDING_BYTES: u64 = 256 * 1024 * 1024;
/// How many copies of a document a build holds at its peak.
const BUILD_FACTOR: u64 = 3;
/// How long a build waits for room in the budget before it is refused.
pub const BUILD_WAIT: Duration = Duration::from_secs(30);
/// A built document unused for this long is dropped.
const IDLE: Duration = Duration::from_secs(300);
/// The budget's unit: permits are KiB.
const UNIT: u64 = 1024;

/// What a built document is a function of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DocumentKey {
    /// The remote's config, as built (`upstream::Remote::generation`): a
    /// reload that changes rules, hosts or access makes new keys.
    pub remote_generation: u64,
    /// `remote/path`, with its `?variant`.
    pub key: String,
    /// The stored entry's digest (hex): a revalidation that changed the
    /// document makes a new key.
    pub digest: String,
    /// The public base URL the document's links are rewritten to.
    pub base: String,
    /// The minute, for a document a guard filter judges by the clock (0
    /// otherwise).
    pub epoch: u64,
}

/// A document as served.
#[derive(Debug)]
pub struct Built {
    pub body: Bytes,
    /// The base its validator is made from (qualified by the body where
    /// what the body states follows more than the entry).
    pub base: String,
    /// Whether it may be kept for later requests: `false` for a body that
    /// states other entries' bytes, which may change on their own.
    pub keep: bool,
}

/// Why a document was not built.
#[derive(Debug)]
pub enum Refused<E> {
    /// The budget stayed full for [`BUILD_WAIT`].
    Busy,
    /// The build itself failed.
    Failed(E),
}

pub struct Documents {
    kept: moka::sync::Cache<DocumentKey, Arc<Built>>,
    /// Builds in progress: a request for a key being built waits for it.
    // A std mutex: held for a map lookup, never across an await.
    building: Mutex<HashMap<DocumentKey, Arc<OnceCell<Arc<Built>>>>>,
    budget: Semaphore,
    /// The budget in permits.
    budget_units: u32,
    /// How long a build waits for room ([`BUILD_WAIT`]).
    wait: Duration,
}

impl Default for Documents {
    fn default() -> Self {
        Documents::new(KEPT_BYTES, BUILDING_BYTES, BUILD_WAIT)
    }
}

impl Documents {
    pub fn new(kept_bytes: u64, building_bytes: u64, wait: Duration) -> Documents {
        let budget_units = u32::try_from(building_bytes / UNIT)
            .unwrap_or(u32::MAX)
            .max(1);
        Documents {
            kept: moka::sync::Cache::builder()
                .max_capacity(kept_bytes)
                .weigher(|key: &DocumentKey, built: &Arc<Built>| {
                    let bytes = built.body.len()
                        + built.base.len()
                        + key.key.len()
                        + key.base.len()
                        + key.digest.len();
                    u32::try_from(bytes).unwrap_or(u32::MAX)
                })
                .time_to_idle(IDLE)
                .build(),
            building: Mutex::new(HashMap::new()),
            budget: Semaphore::new(budget_units as usize),
            budget_units,
            wait,
        }
    }

    /// The document of `key`: kept, being built (then waited for), or built
    /// now by `build` within the budget (`size`: the stored bytes it reads).
    pub async fn get_or_build<E, F, Fut>(
        &self,
        key: DocumentKey,
        size: u64,
        build: F,
    ) -> Result<Arc<Built>, Refused<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Built, E>>,
    {
        if let Some(built) = self.kept.get(&key) {
            return Ok(built);
        }
        let cell = self
            .building
            .lock()
            .expect("documents poisoned")
            .entry(key.clone())
            .or_default()
            .clone();
        let result = cell
            .get_or_try_init(|| async {
                // Built and kept while this request waited for the lock.
                if let Some(built) = self.kept.get(&key) {
                    return Ok(built);
                }
                let units = (size.saturating_mul(BUILD_FACTOR) / UNIT).max(1);
                let units = u32::try_from(units)
                    .unwrap_or(u32::MAX)
                    .min(self.budget_units);
                let _room = tokio::time::timeout(self.wait, self.budget.acquire_many(units))
                    .await
                    .map_err(|_| Refused::Busy)?
                    .expect("the budget is never closed");
                let built = Arc::new(build().await.map_err(Refused::Failed)?);
                if built.keep {
                    self.kept.insert(key.clone(), built.clone());
                }
                Ok(built)
            })
            .await
            .cloned();
        // Whoever finishes takes the build off the map; a request that took
        // the cell before still reads its result from it.
        let mut building = self.building.lock().expect("documents poisoned");
        if building.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            building.remove(&key);
        }
        result
    }

    /// Bytes of built documents kept now.
    pub fn kept_bytes(&self) -> u64 {
        self.kept.run_pending_tasks();
        self.kept.weighted_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn key(n: u8) -> DocumentKey {
        DocumentKey {
            remote_generation: 1,
            key: format!("r/doc{n}"),
            digest: format!("{n:064x}"),
            base: "http://proxy/r".into(),
            epoch: 0,
        }
    }

    fn built(body: &'static [u8], keep: bool) -> Built {
        Built {
            body: Bytes::from_static(body),
            base: String::new(),
            keep,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_share_one_build_and_later_ones_none() {
        let documents = Arc::new(Documents::default());
        let builds = Arc::new(AtomicUsize::new(0));
        let mut waiting = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let (documents, builds) = (documents.clone(), builds.clone());
            waiting.spawn(async move {
                documents
                    .get_or_build::<(), _, _>(key(1), 100, || async {
                        builds.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(built(b"rewritten", true))
                    })
                    .await
                    .unwrap()
            });
        }
        while let Some(built) = waiting.join_next().await {
            assert_eq!(&built.unwrap().body[..], b"rewritten");
        }
        documents
            .get_or_build::<(), _, _>(key(1), 100, || async { panic!("kept") })
            .await
            .unwrap();
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        assert!(documents.building.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_failed_build_is_not_kept_and_one_that_may_not_be_is_built_again() {
        let documents = Documents::default();
        let failed = documents
            .get_or_build(key(2), 10, || async { Err::<Built, _>("upstream") })
            .await;
        assert!(matches!(failed, Err(Refused::Failed("upstream"))));
        for _ in 0..2 {
            documents
                .get_or_build::<(), _, _>(key(2), 10, || async { Ok(built(b"x", false)) })
                .await
                .unwrap();
        }
        assert_eq!(documents.kept_bytes(), 0);
    }

    #[tokio::test]
    async fn a_build_past_the_budget_waits_then_is_refused() {
        let wait = Duration::from_millis(100);
        let documents = Arc::new(Documents::new(KEPT_BYTES, 3 * UNIT * 100, wait));
        let (started, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let holder = {
            let (documents, started, release) =
                (documents.clone(), started.clone(), release.clone());
            tokio::spawn(async move {
                documents
                    .get_or_build::<(), _, _>(key(3), 100 * UNIT, || async move {
                        started.notify_one();
                        release.notified().await;
                        Ok(built(b"big", true))
                    })
                    .await
                    .unwrap();
            })
        };
        started.notified().await;
        let refused = documents
            .get_or_build::<(), _, _>(key(4), UNIT, || async { Ok(built(b"small", true)) })
            .await;
        assert!(matches!(refused, Err(Refused::Busy)));
        release.notify_one();
        holder.await.unwrap();
        documents
            .get_or_build::<(), _, _>(key(4), UNIT, || async { Ok(built(b"small", true)) })
            .await
            .unwrap();
    }
}
