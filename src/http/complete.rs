//! The answer for a complete body (a blob, or a finished fill's file):
//! served as it is, or read whole and filtered, restated by its MD5, or
//! rewritten — built once per what it is a function of, in
//! `proxy.documents` — with the mirror's headers the ecosystem keeps for it.

use axum::response::Response;

use super::{access, guard, public_base, respond, ArtifactRequest};
use crate::cache::{Blob, Entry};
use crate::documents::{Built, DocumentKey, Refused};
use crate::error::ProxyError;
use crate::kind::rewrite::Rewrite;
use crate::metrics::CacheStatus;

impl ArtifactRequest<'_> {
    /// The mirror's headers the ecosystem keeps for this path, added to
    /// `response` (URLs on the remote's hosts re-pointed at the proxy).
    pub(super) fn with_kept(&self, mut response: Response, kept: Option<&str>) -> Response {
        if let Some(kept) = kept {
            let base = public_base(&self.proxy.server(), self.headers);
            let config = &self.remote.config;
            let rewrite = Rewrite::new(&config.name, &config.mirrors, &config.files, &base);
            respond::add_kept(&mut response, kept, &rewrite);
        }
        response
    }

    /// A complete body (a blob, or a finished fill's file), with the
    /// headers the ecosystem keeps for it.
    pub(super) async fn complete(
        &self,
        entry: &Entry,
        blob: Blob,
        cache: CacheStatus,
    ) -> Result<Response, ProxyError> {
        let response = self.complete_body(entry, blob, cache).await?;
        Ok(self.with_kept(response, entry.kept_headers.as_deref()))
    }

    /// A complete body: served as it is, or, for an index document, read
    /// whole and rewritten (a future of its own, so that a hit's is small).
    async fn complete_body(
        &self,
        entry: &Entry,
        blob: Blob,
        cache: CacheStatus,
    ) -> Result<Response, ProxyError> {
        if !self.whole() {
            return Ok(respond::from_entry(
                entry,
                &blob,
                cache,
                self.method,
                self.headers,
            ));
        }
        Box::pin(self.whole_body(entry, blob, cache)).await
    }

    /// A body read whole: filtered, restated by its MD5 or rewritten.
    async fn whole_body(
        &self,
        entry: &Entry,
        blob: Blob,
        cache: CacheStatus,
    ) -> Result<Response, ProxyError> {
        let limit = self.remote.config.max_document_size;
        if entry.size > limit {
            return Err(ProxyError::TooLarge {
                size: entry.size,
                limit,
            });
        }
        let base = public_base(&self.proxy.server(), self.headers);
        // What the filter leaves changes with the clock: a minute's build
        // serves that minute.
        let epoch = match self.filter {
            // and with the advisories in force.
            Some(_) => u64::try_from(crate::clock::now_ms() / 60_000)
                .unwrap_or(0)
                .wrapping_add(self.proxy.advisories.generation() << 40),
            None => 0,
        };
        let key = DocumentKey {
            remote_generation: self.remote.generation,
            key: self.path.key().to_string(),
            digest: entry.digest.to_hex(),
            base: base.clone(),
            epoch,
        };
        let built = self
            .proxy
            .documents
            .get_or_build(key, entry.size, || self.build(entry, blob, base))
            .await
            .map_err(|refused| match refused {
                Refused::Busy => ProxyError::DocumentsBusy,
                Refused::Failed(error) => error,
            })?;
        let body = built.body.clone();
        if self.md5_etag && !self.document {
            return Ok(respond::whole_md5(
                entry,
                body,
                cache,
                self.method,
                self.headers,
            ));
        }
        Ok(respond::document(
            entry,
            body,
            &built.base,
            cache,
            self.method,
            self.headers,
        ))
    }

    /// The body served for this request's document, read whole from `blob`
    /// and filtered, rewritten for `base`, marked for credentials, as
    /// applies; with the base its validator is made from.
    async fn build(
        &self,
        entry: &Entry,
        blob: Blob,
        mut base: String,
    ) -> Result<Built, ProxyError> {
        let config = &self.remote.config;
        let rewrite = Rewrite::new(&config.name, &config.mirrors, &config.files, &base);
        let mut bytes = blob
            .read_all(entry.size)
            .await
            .map_err(|e| ProxyError::Store(e.to_string()))?;
        if let Some(filter) = &self.filter {
            bytes = guard::filter_document(self.proxy, self.remote, filter, bytes).await?;
        }
        if self.md5_etag && !self.document {
            return Ok(Built {
                body: bytes.into(),
                base,
                keep: true,
            });
        }
        let ecosystem = config.kind.ecosystem();
        let mut others = Vec::new();
        if self.document {
            // Paths whose bytes the rewrite states (rpm: the primaries
            // `repomd.xml` lists; terraform: a version's download answers),
            // read through the cache at once; one that cannot be had is
            // left out.
            let wanted = ecosystem.rewritten_with(self.path.path(), &bytes);
            let read = futures_util::future::join_all(
                wanted
                    .iter()
                    .map(|other| guard::sibling_body(self.proxy, self.remote, other, None)),
            )
            .await;
            for (other, result) in wanted.into_iter().zip(read) {
                match result {
                    Ok((_, body)) => others.push((other, body)),
                    Err(error) => {
                        tracing::warn!(key = self.path.key(), other, %error, "not read for the rewrite")
                    }
                }
            }
        }
        // What it states follows other entries, which change on their own:
        // built for the requests waiting now, not kept.
        let stated = !others.is_empty();
        let body = if self.document {
            // Rewriting is a linear pass over up to max_document_size: off the async threads.
            let at = self.path.path().to_string();
            let body = tokio::task::spawn_blocking(move || {
                ecosystem.rewrite_body(&at, bytes, &rewrite, &others)
            })
            .await
            .map_err(|e| ProxyError::Store(e.to_string()))?;
            if stated {
                // What it states follows other bodies and the config: the
                // validator follows the body served.
                base = guard::qualified_base(&base, &body);
            }
            body
        } else {
            bytes
        };
        let body = access::mark_auth_required(&self.remote.config, self.path.path(), body);
        if self.filter.is_some() {
            // What the filter leaves changes with the config and the clock:
            // the validator follows the body served, not only the blob.
            base = guard::qualified_base(&base, &body);
        }
        Ok(Built {
            body: body.into(),
            base,
            keep: !stated,
        })
    }

    /// Whether the body is read whole before it is served (rewritten or filtered).
    pub(super) fn whole(&self) -> bool {
        self.document || self.filter.is_some() || self.md5_etag
    }
}
