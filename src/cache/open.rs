//! Opening the [`Cache`]: the store, the database, the blob backend and
//! Redis, and the background tasks (the committer, the index's load, the
//! pruner, the evictor).

use std::sync::Arc;

use anyhow::Context;

use super::commit_queue::Commits;
use super::evictor::Evictor;
use super::facade::Cache;
use super::locks::Locks;
use super::{commit, evict, prune};
use crate::config::Config;
use crate::meta::cluster::Cluster;
use crate::meta::places::PlaceTable;
use crate::meta::MetadataStore;
use crate::metrics::Metrics;
use crate::store::{BlobStore, Budget, ContentStore, HotBlobs, LocalBlobs, S3Blobs};

/// Rows above which `Cache::open` counts the stored bytes in the background.
pub(super) const DEFER_ABOVE_ROWS: usize = 100_000;

/// Loads memory (the entry index, the declared keys) while the server
/// answers (from the database, meanwhile), then marks it complete if it
/// may be; where it may, loads it again each time another process wrote
/// the database (see `crate::meta::other_writers`).
async fn load_index(cache: Arc<Cache>, complete: bool, size_first: bool) {
    let started = std::time::Instant::now();
    // Where the index will be complete its digest counts sum the sizes as
    // they load: no query reads every row for them.
    if size_first && !complete {
        count_stored_bytes(&cache, started).await;
    }
    load_memory(&cache, complete, started).await;
    if size_first && complete {
        count_stored_bytes(&cache, started).await;
    }
    if !complete {
        return;
    }
    let (others, cache) = (cache.meta.memory.others.clone(), Arc::downgrade(&cache));
    loop {
        others.reloads().await;
        let Some(cache) = cache.upgrade() else {
            return;
        };
        // Begun before the rows are read: what the server writes meanwhile
        // is noted (see `crate::meta::index`).
        cache.meta.memory.index.begin_load();
        load_memory(&cache, true, std::time::Instant::now()).await;
        // And the places of the blobs it packed: the database keeps no
        // index to find one by digest here (`Database::index_digests`).
        if let Err(error) = cache.store.learn_places().await {
            tracing::warn!(%error, "could not read the places another process wrote; their blobs are read from the database as they are asked for");
        }
    }
}

/// The store's size from the source of truth, at start-up.
async fn count_stored_bytes(cache: &Cache, started: std::time::Instant) {
    match cache.rederive_size().await {
        Ok(bytes) => tracing::info!(bytes, took = ?started.elapsed(), "stored bytes counted"),
        Err(error) => {
            tracing::warn!(%error, "could not count the stored bytes; the evictor will")
        }
    }
    cache.budget.wake_if_over();
}

/// One load of memory (the caller began the index's). Complete only if no
/// other process's write was seen since it began: that write may be in a
/// range already read.
async fn load_memory(cache: &Cache, complete: bool, started: std::time::Instant) {
    let meta = &cache.meta;
    let generation = meta.memory.others.generation();
    let declarations = meta.declarations();
    let (entries, keys) = futures_util::join!(meta.load_index(), declarations.load_declared_keys());
    let complete = complete && generation == meta.memory.others.generation();
    match entries {
        Ok(entries) => {
            meta.memory.index.end_load(complete);
            tracing::info!(entries, took = ?started.elapsed(), complete, "entry index loaded");
        }
        Err(error) => {
            // Unlisted keys keep being read from the database.
            meta.memory.index.end_load(false);
            tracing::warn!(%error, "could not load the entry index; looking rows up instead");
        }
    }
    match keys {
        Ok(keys) => {
            meta.memory.declared_keys.set_complete(complete);
            tracing::info!(keys, complete, "declared keys loaded");
        }
        Err(error) => {
            tracing::warn!(%error, "could not load the declared keys; looking them up instead")
        }
    }
}

impl Cache {
    /// Opens the store (cleaning temp files of dead processes), connects and
    /// migrates the metadata database, opens the blob store, joins the
    /// cluster when `[redis]` is set, and starts the evictor.
    pub async fn open(config: &Config, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Cache>> {
        let store_path = config.storage.path.clone();
        let budget = Arc::new(Budget::new(config.storage.max_size));
        let store_budget = budget.clone();
        let store =
            tokio::task::spawn_blocking(move || ContentStore::open(&store_path, store_budget))
                .await?
                .with_context(|| {
                    format!(
                        "opening the content store at {}",
                        config.storage.path.display()
                    )
                })?;
        let meta = MetadataStore::connect_sharing(
            &config.metadata.url,
            config.metadata.cache_entries,
            config.metadata.cache_memory,
            store.digest_table(),
        )
        .await
        .with_context(|| {
            format!(
                "opening the metadata database {}",
                redact_url(&config.metadata.url)
            )
        })?;
        let complete = memory_complete(config);
        if config.metadata.url.starts_with("sqlite:") {
            meta.db
                .index_digests(!complete)
                .await
                .context("indexing the metadata database's digests")?;
        }
        // Before the cache is shared: no writer can change a row unnoticed
        // by the load (see `crate::meta::index`).
        meta.memory.index.begin_load();
        let store = Arc::new(store);
        if config.storage.s3.is_none() {
            open_packs(&store, &meta, config.storage.pack_below, !complete).await?;
        }
        let blobs: Arc<dyn BlobStore> = match &config.storage.s3 {
            None => Arc::new(LocalBlobs::new(
                store.clone(),
                crate::store::descriptors_for(config.storage.open_files),
            )),
            Some(s3) => Arc::new(
                S3Blobs::connect(s3)
                    .await
                    .with_context(|| format!("opening the blob store {}", s3.url))?,
            ),
        };
        metrics.store_max_bytes.set(config.storage.max_size as i64);
        // As many commits may wait as fills may run.
        let (commits, queued) = Commits::new(config.server.max_fills, &metrics);
        let cache = Arc::new(Cache {
            store,
            blobs,
            hot: HotBlobs::new(
                config.storage.memory_cache_size,
                config.storage.memory_object_max,
            ),
            meta,
            evictor: Evictor::new(budget.clone()),
            budget,
            locks: Locks::default(),
            commits,
            metrics,
        });
        tokio::spawn(commit::run(Arc::downgrade(&cache), queued));
        // Summing the blobs' sizes reads every row (about 0.6 s a million
        // on SQLite): with many rows it is done beside the index's load
        // (after it, from the index's own sum, where the index will be
        // complete), and until then the store counts only what commits add
        // (fills are not held back by the limit meanwhile; commits wait
        // while the sum is taken, which holds the count's lock, then it is
        // exact).
        let deferred = cache.meta.db.rows_at_start > DEFER_ABOVE_ROWS;
        if !deferred {
            cache
                .rederive_size()
                .await
                .context("counting the stored bytes in the metadata database")?;
        }
        if let Some(redis) = &config.redis {
            let weak = Arc::downgrade(&cache);
            let cluster = Cluster::start(redis, cache.metrics.redis_errors.clone(), move |key| {
                if let Some(cache) = weak.upgrade() {
                    cache.meta.memory.invalidate_local(key);
                }
            })
            .context("configuring redis")?;
            cache.meta.memory.attach_cluster(cluster);
        }
        tokio::spawn(load_index(cache.clone(), complete, deferred));
        let declaring: Arc<[_]> = (config.remotes.iter())
            .filter(|r| r.kind.digests().is_some())
            .cloned()
            .collect();
        tokio::spawn(prune::run(Arc::downgrade(&cache), declaring));
        tokio::spawn(evict::run(Arc::downgrade(&cache)));
        cache.budget.wake_if_over();
        Ok(cache)
    }
}

/// Whether memory (the entry index, the store's places) is complete once
/// loaded: only where no other instance writes rows the server must see at
/// once (another process's import tells the server:
/// `crate::meta::other_writers`). Where it is, the embedded database keeps
/// no index on digests (`Database::index_digests`).
pub(crate) fn memory_complete(config: &Config) -> bool {
    config.metadata.url.starts_with("sqlite:") && config.redis.is_none()
}

/// Opens the store's packs: the places of packed blobs read from the
/// database (and their rows attached, for what a commit does not write),
/// each pack no live process writes cut back to its last named byte, and
/// blobs of at most `pack_below` bytes packed from now on. Local blobs only:
/// S3 keeps one object per blob (it has no append, a range is a GET of
/// its own, and an object is deleted whole).
async fn open_packs(
    store: &Arc<ContentStore>,
    meta: &MetadataStore,
    pack_below: u64,
    by_digest: bool,
) -> anyhow::Result<()> {
    let table = Arc::new(PlaceTable::new(meta.db.pool.clone(), by_digest));
    store
        .read_places(&*table, |_| {})
        .await
        .context("reading the places of packed blobs")?;
    let s = store.clone();
    tokio::task::spawn_blocking(move || s.load_places())
        .await?
        .context("opening the packs")?;
    store.attach_place_rows(table);
    store.set_pack_below(pack_below);
    Ok(())
}

/// A database URL with any password replaced, for logs and errors.
pub(crate) fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}
