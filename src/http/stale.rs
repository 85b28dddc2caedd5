//! Serving a cached copy when the mirrors will not: stale-if-error (every
//! mirror failed, refused or rate-limited: a copy up to `max_stale` old, or
//! the 404 last remembered) and `keep_deleted` (every mirror now says "not
//! found" for a path that was cached: the copy, whatever its age).

use std::sync::Arc;

use super::respond;
use super::{ArtifactRequest, CacheStatus, Served};
use crate::cache::Entry;
use crate::clock::now_ms;
use crate::error::ProxyError;

impl ArtifactRequest<'_> {
    /// With `keep_deleted`: every mirror answered "not found" for this path
    /// within `negative_ttl`, so its stale copy is served without asking.
    pub(super) fn kept_deleted(&self, now: i64) -> bool {
        let config = &self.remote.config;
        config.keep_deleted
            && self
                .proxy
                .cache
                .meta
                .memory
                .absent(&self.path)
                .is_some_and(|(_, at)| now - at < config.negative_ttl.as_millis() as i64)
    }

    /// Stale-if-error: when the mirrors fail (not when they say "not found"), a
    /// cached copy up to `max_stale` old is served as `STALE`, and a path whose
    /// last known answer was a 404 gets that 404 again rather than a 502.
    /// With `keep_deleted`, a "not found" for a cached path serves the copy
    /// too, whatever its age.
    pub(super) async fn when_mirrors_fail(
        &self,
        stale: Option<Arc<Entry>>,
        error: ProxyError,
    ) -> Result<Served, ProxyError> {
        let deleted = self.remote.config.keep_deleted
            && matches!(error, ProxyError::NotFound { status: 404 | 410 });
        if !deleted
            && !matches!(
                error,
                ProxyError::MirrorsFailed { .. }
                    | ProxyError::MirrorsBusy
                    | ProxyError::RateLimited { .. }
                    | ProxyError::IntegrityMismatch { .. }
            )
        {
            return Err(error);
        }
        let now = now_ms();
        let max_stale = self.remote.config.max_stale;
        // A request that joined a fill without a lookup learns of a stale
        // copy only now, on the failure path.
        let stale = match stale {
            Some(entry) => Some(entry),
            None => self
                .proxy
                .cache
                .meta
                .lookup(&self.path)
                .await
                .ok()
                .flatten(),
        };
        if let Some(entry) = stale.filter(|e| deleted || e.age(now) <= max_stale) {
            if let Ok(file) = self.proxy.cache.open_blob(&entry.digest, entry.size).await {
                tracing::warn!(key = self.path.key(), %error, "every mirror failed; serving a stale copy");
                let response = self.complete(&entry, file, CacheStatus::Stale).await?;
                return Ok(Served::hit(response, CacheStatus::Stale));
            }
        }
        if let Some((status, at)) = self.proxy.cache.meta.memory.absent(&self.path) {
            if now - at <= max_stale.as_millis() as i64 {
                return Ok(Served::hit(
                    respond::absent(status, CacheStatus::Stale),
                    CacheStatus::Stale,
                ));
            }
        }
        Err(error)
    }
}
