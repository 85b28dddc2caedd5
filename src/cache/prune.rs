//! Pruning `declared`: digests index documents declared for artifacts that
//! no cached document lists any more.
//!
//! Concretely, a `declared` row is the document's once a prune round saw a
//! cached document list it (`listed_at` set); a later round that finds no
//! cached document of its remote listing it (the document was evicted,
//! purged, or replaced by a version that dropped the artifact) deletes it.
//! A row no round ever saw listed is kept: a **pin** (the sha256 of an
//! artifact's first download, `pin_on_first_use`) is the trust anchor that
//! makes a later download with other bytes fail after the artifact was
//! evicted, and nothing lists it; so are digests a Maven sidecar declared
//! (the sidecar is not a document of the cache). A pin a document later
//! declared the same digest for becomes the document's row.
//!
//! A round is a pass over the remote's cached documents (each read and
//! parsed again, as a fill learns it) and costs what learning them did; it
//! runs every [`PRUNE_INTERVAL`]. It deletes nothing for a remote when a
//! document could not be read, or when a document was fetched or
//! revalidated while the round ran (it may list what the pass missed), and
//! nothing learned since the round began.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::facade::Cache;
use crate::clock::now_ms;
use crate::config::RemoteConfig;
use crate::error::ProxyError;
use crate::kind::declared::{canonical, Declared, Document};
use crate::meta::sql::{db_error, placeholders};
use crate::path::ArtifactPath;
use crate::store::Digest;

/// How often the rows are pruned.
pub(crate) const PRUNE_INTERVAL: Duration = Duration::from_secs(6 * 3600);

/// Artifacts per statement.
const CHUNK: usize = 200;

/// What one round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    /// Cached documents read.
    pub documents: usize,
    /// Rows seen listed for the first time.
    pub marked: u64,
    /// Rows deleted.
    pub deleted: u64,
}

/// Every (artifact, digest) the document at `path` of `config`'s remote
/// declares, keyed as a request for the artifact normalises its path, once
/// each (a JSON API page lists a file under `urls` and `releases`). What a
/// fill learns and what a prune round counts as listed.
pub fn listed(config: &RemoteConfig, path: &str, body: &[u8]) -> Vec<(String, Declared)> {
    let Some(digests) = config.kind.digests() else {
        return Vec::new();
    };
    let name = &config.name;
    let document = Document::new(name, &config.mirrors, &config.files, path)
        .with_max_unpacked(config.max_learned_size);
    let unique: BTreeMap<String, Declared> = digests
        .learn(&document, body)
        .into_iter()
        .filter_map(|(artifact, digest)| {
            let parsed = ArtifactPath::parse(&format!("/{name}/{artifact}")).ok()?;
            Some((canonical(parsed.path()), digest))
        })
        .collect();
    unique.into_iter().collect()
}

/// Prunes every [`PRUNE_INTERVAL`] until the cache is dropped.
pub async fn run(cache: Weak<Cache>, remotes: Arc<[RemoteConfig]>) {
    loop {
        tokio::time::sleep(PRUNE_INTERVAL).await;
        let Some(cache) = cache.upgrade() else { return };
        for remote in remotes.iter() {
            match prune_declared(&cache, remote).await {
                Ok(pruned) if pruned.deleted > 0 => {
                    tracing::info!(remote = remote.name, ?pruned, "pruned declared digests")
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(remote = remote.name, %error, "pruning declared digests failed")
                }
            }
        }
    }
}

/// One prune round over the `declared` rows of `remote` (see the module).
pub async fn prune_declared(cache: &Cache, remote: &RemoteConfig) -> Result<Pruned, ProxyError> {
    let mut pruned = Pruned::default();
    let Some(digests) = remote.kind.digests() else {
        return Ok(pruned);
    };
    let started = now_ms();
    let pool = cache.meta.db.pool();
    let rows: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT path, digest, size FROM entries WHERE remote = $1")
            .bind(&remote.name)
            .fetch_all(pool)
            .await
            .map_err(db_error)?;
    let mut listed_now: HashSet<String> = HashSet::new();
    for (stored, digest, size) in rows {
        let path = stored.split_once('?').map_or(stored.as_str(), |(p, _)| p);
        if !digests.declares(path) {
            continue;
        }
        let size = size.max(0) as u64;
        let read = match Digest::from_hex(&digest) {
            Some(digest) if size <= remote.max_document_size => {
                match cache.open_blob(&digest, size).await {
                    Ok(blob) => blob.read_all(size).await.ok(),
                    Err(_) => None,
                }
            }
            _ => None,
        };
        // What this document lists is unknown: delete nothing in this run.
        let Some(body) = read else {
            return Ok(pruned);
        };
        let (config, path) = (remote.clone(), path.to_string());
        let items = tokio::task::spawn_blocking(move || listed(&config, &path, &body))
            .await
            .map_err(|e| ProxyError::Store(e.to_string()))?;
        listed_now.extend(items.into_iter().map(|(artifact, _)| artifact));
        pruned.documents += 1;
    }
    let listed_now: Vec<String> = listed_now.into_iter().collect();
    for chunk in listed_now.chunks(CHUNK) {
        let sql = format!(
            "UPDATE declared SET listed_at = $2 WHERE remote = $1 AND listed_at IS NULL \
             AND artifact IN ({})",
            placeholders(3, chunk.len())
        );
        let mut query = sqlx::query(&sql).bind(&remote.name).bind(started);
        for artifact in chunk {
            query = query.bind(artifact.as_str());
        }
        pruned.marked += query.execute(pool).await.map_err(db_error)?.rows_affected();
    }
    // A document fetched or revalidated meanwhile may list what this
    // round missed.
    let since: Vec<(String,)> =
        sqlx::query_as("SELECT path FROM entries WHERE remote = $1 AND fetched_at >= $2")
            .bind(&remote.name)
            .bind(started)
            .fetch_all(pool)
            .await
            .map_err(db_error)?;
    if since.iter().any(|(stored,)| {
        digests.declares(stored.split_once('?').map_or(stored.as_str(), |(p, _)| p))
    }) {
        return Ok(pruned);
    }
    let listed_now: HashSet<&str> = listed_now.iter().map(String::as_str).collect();
    let known: Vec<(String,)> = sqlx::query_as(
        "SELECT artifact FROM declared WHERE remote = $1 AND listed_at IS NOT NULL \
         AND learned_at < $2",
    )
    .bind(&remote.name)
    .bind(started)
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    let gone: Vec<String> = known
        .into_iter()
        .map(|(artifact,)| artifact)
        .filter(|artifact| !listed_now.contains(artifact.as_str()))
        .collect();
    for chunk in gone.chunks(CHUNK) {
        let sql = format!(
            "DELETE FROM declared WHERE remote = $1 AND learned_at < $2 \
             AND listed_at IS NOT NULL AND artifact IN ({})",
            placeholders(3, chunk.len())
        );
        let mut query = sqlx::query(&sql).bind(&remote.name).bind(started);
        for artifact in chunk {
            query = query.bind(artifact.as_str());
        }
        pruned.deleted += query.execute(pool).await.map_err(db_error)?.rows_affected();
    }
    Ok(pruned)
}
