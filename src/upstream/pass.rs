//! Pass-through requests: an API call (npm's audits and search, cargo's web
//! API) sent to the remote's mirrors as the client made it — method, query
//! string, body — and answered with whatever the first mirror that answers
//! says. Nothing is cached. The attempts follow the selector's order and the
//! mirrors' health as fetches do, one after the other: no hedging, since a
//! POST is not ours to send twice at once.

use std::time::Instant;

use axum::http::{HeaderMap, Method};
use bytes::Bytes;

use super::fetch::record_failure;
use super::select::Mirror;
use super::{MirrorSet, Remote};
use crate::clock::now_ms;
use crate::error::{AttemptError, ProxyError};

/// The request to forward, as the client made it (already checked and limited).
pub struct Forward<'a> {
    pub method: Method,
    /// The path within the remote (normalised), without the query.
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// The client's headers that travel on (the caller picks them).
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The first mirror's answer below 500, its body still to be read.
pub struct Answer {
    pub response: reqwest::Response,
    pub mirror: String,
}

/// The mirrors of `set` to try one after the other: the selector's order
/// (ejected mirrors last), at most `max_attempts`, each passed over when at
/// its in-flight limit or on probation — checked lazily, just before it is
/// tried, since `try_begin` takes the one probation request.
pub(super) fn one_at_a_time<'s>(
    remote: &'s Remote,
    set: &'s MirrorSet,
) -> impl Iterator<Item = usize> + 's {
    let now = now_ms();
    let any_selectable = set.health.iter().any(|h| h.selectable(now));
    let order = set
        .selector
        .order_accepting(&set.mirrors, |i| set.health[i].selectable(now));
    order
        .cycle()
        .take(remote.config.max_attempts)
        .filter(move |&mirror_idx| {
            remote
                .config
                .mirror_max_in_flight
                .is_none_or(|limit| set.mirrors[mirror_idx].in_flight() < limit)
                && (!any_selectable || set.health[mirror_idx].try_begin(now))
        })
}

/// Sends `request` to the remote's mirrors in the selector's order until one
/// answers with a status below 500 (a 404 or a 400 is the API's answer, not a
/// mirror failure); connect errors, timeouts and 5xx count against the
/// mirror's health and move on to the next mirror.
pub async fn forward(remote: &Remote, request: Forward<'_>) -> Result<Answer, ProxyError> {
    let (set, path) = remote.route(request.path);
    let path: &str = &path;
    let (mut attempts, mut last) = (0, None);
    for mirror_idx in one_at_a_time(remote, set) {
        let mirror: &Mirror = &set.mirrors[mirror_idx];
        let mut url = mirror.url_for(path);
        if let Some(query) = request.query {
            url.push('?');
            url.push_str(query);
        }
        let upstream = remote
            .authorize(
                remote.client().request(request.method.clone(), url),
                set,
                mirror_idx,
            )
            .headers(request.headers.clone())
            .body(request.body.clone());
        attempts += 1;
        let started = Instant::now();
        // Counted in flight until the head arrives; the body then streams
        // through, as on the fill's bypass path.
        let outcome = {
            let _guard = mirror.begin_attempt();
            tokio::time::timeout(remote.config.first_byte_timeout, upstream.send()).await
        };
        let error = match outcome {
            Ok(Ok(response)) if !response.status().is_server_error() => {
                set.health[mirror_idx].record_success();
                mirror.observe_first_byte(started.elapsed(), set.selector.first_byte_decay());
                set.metrics[mirror_idx]
                    .first_byte
                    .observe(started.elapsed().as_secs_f64());
                return Ok(Answer {
                    response,
                    mirror: mirror.base().to_string(),
                });
            }
            Ok(Ok(response)) => AttemptError::Status(response.status().as_u16()),
            Ok(Err(e)) if e.is_connect() => AttemptError::Connect(e.without_url().to_string()),
            Ok(Err(e)) => AttemptError::Request(e.without_url().to_string()),
            Err(_) => AttemptError::FirstByteTimeout(remote.config.first_byte_timeout),
        };
        mirror.observe_first_byte(
            remote.config.first_byte_timeout,
            set.selector.first_byte_decay(),
        );
        record_failure(remote, set, mirror_idx, &error);
        tracing::debug!(remote = %remote.name, mirror = mirror.base(), %error, "pass-through attempt failed");
        last = Some(error);
    }
    match last {
        Some(last) => Err(ProxyError::MirrorsFailed { attempts, last }),
        None => Err(ProxyError::MirrorsBusy),
    }
}
