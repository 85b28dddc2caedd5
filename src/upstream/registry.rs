//! Revalidating an oci remote's tag with a `HEAD`: the registry's
//! `Docker-Content-Digest` says which manifest the tag points at now, and a
//! `GET` is needed only when that changed. Docker Hub does not count a HEAD
//! as a pull. The attempts follow the selector's order and feed the mirrors'
//! health as fetches do, one after the other (a HEAD is cheap; no hedging).
//! Concurrent revalidations of one tag (and `Accept`) share one HEAD
//! ([`TagHeads`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::watch;

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

/// A remote's tag HEADs in flight, by path and `Accept`: the first request
/// sends it, the others wait for its answer.
#[derive(Debug, Default)]
pub struct TagHeads {
    // A std mutex: held only to look up, insert or remove, never across an
    // await.
    in_flight: Mutex<HashMap<String, HeadAnswer>>,
}

/// What the request sending a tag HEAD tells those waiting on it: nothing
/// yet, then its answer.
type HeadAnswer = watch::Receiver<Option<Result<TagHead, ProxyError>>>;

/// Takes the sender's entry out of the map however its HEAD ends (also
/// when its request is dropped: the waiting ones then send their own).
struct Leave<'a> {
    heads: &'a TagHeads,
    key: String,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.heads
            .in_flight
            .lock()
            .expect("tag HEAD map poisoned")
            .remove(&self.key);
    }
}

/// The tag's digest now, asked with one HEAD however many requests ask at
/// once (see [`head_uncoalesced`]).
pub async fn head_digest(
    remote: &Remote,
    path: &str,
    accept: Option<&str>,
) -> Result<TagHead, ProxyError> {
    let key = format!("{path}\n{}", accept.unwrap_or(""));
    let (sender, mut answer) = {
        let mut in_flight = remote
            .tag_heads
            .in_flight
            .lock()
            .expect("tag HEAD map poisoned");
        match in_flight.get(&key) {
            Some(answer) => (None, answer.clone()),
            None => {
                let (sender, answer) = watch::channel(None);
                in_flight.insert(key.clone(), answer.clone());
                (Some(sender), answer)
            }
        }
    };
    if let Some(sender) = sender {
        let _leave = Leave {
            heads: &remote.tag_heads,
            key,
        };
        let result = head_uncoalesced(remote, path, accept).await;
        sender.send_replace(Some(result.clone()));
        return result;
    }
    loop {
        if let Some(result) = answer.borrow_and_update().clone() {
            return result;
        }
        if answer.changed().await.is_err() {
            break;
        }
    }
    // The sender's request went away without an answer.
    let last = answer.borrow().clone();
    match last {
        Some(result) => result,
        None => head_uncoalesced(remote, path, accept).await,
    }
}

/// `HEAD {mirror}/{path}` with `accept`, in the selector's order, until a
/// mirror answers below 500. Every mirror failing is `MirrorsFailed` (the
/// caller then serves its copy as `STALE`).
async fn head_uncoalesced(
    remote: &Remote,
    path: &str,
    accept: Option<&str>,
) -> Result<TagHead, ProxyError> {
    let (set, path) = remote.route(path);
    let path: &str = &path;
    let (mut attempts, mut last) = (0, None);
    for mirror_idx in one_at_a_time(remote, set) {
        let mirror: &Mirror = &set.mirrors[mirror_idx];
        let mut request = remote.client().head(mirror.url_for(path));
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
