//! The miss, from the request's side: answering from a fill once it has a
//! head (streaming, complete, revalidated, another instance's entry,
//! streamed through, or failed), and from an entry another step vouched for.

use std::sync::Arc;

use tokio::sync::watch;

use super::{respond, ArtifactRequest, Served};
use crate::cache::Entry;
use crate::error::ProxyError;
use crate::fill::{self, FillState};
use crate::metrics::CacheStatus;
use crate::upstream::fetch::{self, Fetched, Validators};

impl ArtifactRequest<'_> {
    /// Answers from a fill once it has a head: streaming, complete, 304'd,
    /// filled by another instance, streamed through, or failed (then
    /// stale-if-error). `started`: this request started the fill.
    pub(super) async fn follow(
        &self,
        mut rx: watch::Receiver<FillState>,
        started: bool,
        stale: Option<Arc<Entry>>,
    ) -> Result<Served, ProxyError> {
        let (proxy, remote, path) = (self.proxy, self.remote, &self.path);
        // A document is rewritten (or filtered) whole: wait for the complete body.
        let document = self.whole();
        let state = rx
            .wait_for(|s| match s {
                FillState::Connecting => false,
                FillState::Streaming { .. } => !document,
                _ => true,
            })
            .await
            .map(|s| s.clone())
            .unwrap_or_else(|_| FillState::Failed(ProxyError::FillAborted));
        match state {
            FillState::Failed(error) => self.when_mirrors_fail(stale, error).await,
            FillState::Shared(entry) => self.cached(&entry, CacheStatus::Hit).await,
            FillState::Revalidated(entry) => self.cached(&entry, CacheStatus::Revalidated).await,
            FillState::Streaming {
                head,
                file,
                written,
                recent,
                ..
            } => {
                // A body kept whole in memory has no file: `recent` is all of
                // it, announced or chunked.
                let arrived = file.is_none() || head.content_length == Some(written);
                // Every byte had arrived when this request joined (a body
                // published before it is written): a hit, as for `Complete`.
                let (cache, mirror) = if !started && arrived {
                    (CacheStatus::Hit, None)
                } else {
                    (CacheStatus::Miss, Some(head.mirror.clone()))
                };
                // A range is served from the bytes as they are written.
                let response = match respond::range_of_fill(self.headers, head.content_length) {
                    Some(range) => {
                        let body = fill::body_range(rx, file, range.0, range.1);
                        let size = head.content_length.unwrap_or_default();
                        respond::from_fill_range(&head, body, range, size, self.method)
                    }
                    // Every byte in the fill's memory: sent as one frame of
                    // known length, with the head in one write, even when the
                    // upstream sent it chunked. (Only a body nothing can
                    // refuse is ever published whole before it is checked:
                    // `fill::receive`, `fill::download`.)
                    None => match recent.filter(|_| arrived).and_then(|r| r.whole(written)) {
                        Some(bytes) => respond::from_fill_whole(&head, bytes, self.method, cache),
                        None => respond::from_fill(&head, fill::body(rx, file), self.method, cache),
                    },
                };
                let response = self.with_kept(response, head.kept.as_deref());
                Ok(Served {
                    response,
                    cache,
                    mirror,
                })
            }
            // The body is complete and hashed, perhaps not yet committed, and is
            // served from the fill's own file: a miss for the request that started
            // the fill (a small body can finish before its starter looks), a hit
            // for one that joined after the upstream fetch was over.
            FillState::Complete {
                head,
                entry,
                file,
                recent,
            } => {
                let (cache, mirror) = if started {
                    (CacheStatus::Miss, Some(head.mirror.clone()))
                } else {
                    (CacheStatus::Hit, None)
                };
                let blob = fill::complete_blob(file, recent.as_ref(), entry.size);
                let response = self.complete(&entry, blob, cache).await?;
                Ok(Served {
                    response,
                    cache,
                    mirror,
                })
            }
            FillState::Bypass { head, response } => {
                if self.whole() {
                    // Too big for the store but a document: the store cap is the
                    // document cap's business; refuse rather than buffer.
                    return Err(ProxyError::TooLarge {
                        size: head.content_length.unwrap_or(0),
                        limit: proxy.cache.max_size(),
                    });
                }
                let taken = response.lock().expect("bypass slot poisoned").take();
                let upstream_response = match taken {
                    Some(r) => r,
                    // Someone else has the fill's response: fetch our own copy.
                    None => {
                        match fetch::fetch(
                            remote,
                            path.upstream(),
                            Validators::default(),
                            self.accept,
                        )
                        .await?
                        {
                            Fetched::Body(body) => body.response.into(),
                            Fetched::NotModified { .. } => unreachable!("no validators were sent"),
                        }
                    }
                };
                let body = fill::passthrough(upstream_response, remote.config.idle_timeout);
                let response = respond::from_fill(&head, body, self.method, CacheStatus::Miss);
                let response = self.with_kept(response, head.kept.as_deref());
                Ok(Served {
                    response,
                    cache: CacheStatus::Miss,
                    mirror: Some(head.mirror.clone()),
                })
            }
            FillState::Connecting => unreachable!("waited until the fill left Connecting"),
        }
    }

    /// A committed entry another step vouched for (a 304, another instance's
    /// fill): its blob must be there, so a missing one is an internal error.
    pub(super) async fn cached(
        &self,
        entry: &Entry,
        cache: CacheStatus,
    ) -> Result<Served, ProxyError> {
        let blob = self
            .proxy
            .cache
            .open_blob(&entry.digest, entry.size)
            .await
            .map_err(|e| ProxyError::Store(e.to_string()))?;
        let response = self.complete(entry, blob, cache).await?;
        Ok(Served::hit(response, cache))
    }
}
