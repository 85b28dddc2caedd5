//! Revalidating an oci remote's tag with a `HEAD`: the registry's
//! `Docker-Content-Digest` says which manifest the tag points at now, and a
//! `GET` is needed only when that changed. Docker Hub does not count a HEAD
//! as a pull. The attempts follow the selector's order and feed the mirrors'
//! health as fetches do, one after the other (a HEAD is cheap; no hedging).

use std::time::Instant;

use axum::http::{header, StatusCode};

use super::fetch::record_failure;
use super::pass::one_at_a_time;
use super::select::Mirror;
use super::{token, Remote};
use crate::error::{AttemptError, ProxyError};

/// What the mirrors said of a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagHead {
    /// The tag's manifest digest now (`sha256:…`).
    Digest(String),
    /// An answer that names no digest (a 404, a 401, a registry that does
    /// not send the header): only a GET can tell.
    Unknown,
}

/// `HEAD {mirror}/{path}` with `accept`, in the selector's order, until a
/// mirror answers below 500. Every mirror failing is `MirrorsFailed` (the
/// caller then serves its copy as `STALE`).
pub async fn head_digest(
    remote: &Remote,
    path: &str,
    accept: Option<&str>,
) -> Result<TagHead, ProxyError> {
    let (set, path) = remote.route(path);
    let (mut attempts, mut last) = (0, None);
    for mirror_idx in one_at_a_time(remote, set) {
        let mirror: &Mirror = &set.mirrors[mirror_idx];
        let mut request = remote.client.head(mirror.url_for(path));
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        attempts += 1;
        let started = Instant::now();
        let outcome = {
            let _guard = mirror.begin_attempt();
            let send = token::send(remote, mirror.base(), path, request);
            tokio::time::timeout(remote.config.first_byte_timeout, send).await
        };
        let error = match outcome {
            Ok(Ok(response)) if !response.status().is_server_error() => {
                set.health[mirror_idx].record_success();
                mirror.observe_first_byte(started.elapsed(), set.selector.first_byte_decay());
                let digest = response
                    .headers()
                    .get("docker-content-digest")
                    .and_then(|v| v.to_str().ok())
                    .filter(|_| response.status() == StatusCode::OK)
                    .map(str::to_string);
                return Ok(digest.map_or(TagHead::Unknown, TagHead::Digest));
            }
            Ok(Ok(response)) => AttemptError::Status(response.status().as_u16()),
            Ok(Err(e)) if e.is_connect() => AttemptError::Connect(e.without_url().to_string()),
            Ok(Err(e)) => AttemptError::Request(e.without_url().to_string()),
            Err(_) => AttemptError::FirstByteTimeout(remote.config.first_byte_timeout),
        };
        record_failure(remote, set, mirror_idx, &error);
        tracing::debug!(remote = %remote.name, mirror = mirror.base(), %error, "tag HEAD failed");
        last = Some(error);
    }
    match last {
        Some(last) => Err(ProxyError::MirrorsFailed { attempts, last }),
        None => Err(ProxyError::MirrorsBusy),
    }
}
