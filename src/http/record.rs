//! One line in the request log per answered request, and its counts: the
//! remote's requests and bytes by source, and server errors kept for the
//! dashboard. Shared by the artifact handler and the OCI handlers.

use std::time::Instant;

use axum::http::{header, Method, Uri};
use axum::response::Response;

use crate::clock::now_ms;
use crate::metrics::CacheStatus;
use crate::proxy::Proxy;
use crate::upstream::Remote;

/// How a request was answered, for its log line and counters.
pub(super) struct Answered<'a> {
    pub(super) remote: Option<&'a Remote>,
    pub(super) cache: Option<CacheStatus>,
    pub(super) mirror: Option<&'a str>,
    /// The error that ended it, as the log says it.
    pub(super) error: Option<&'a str>,
    /// The user whose credentials were taken, for the audit line.
    pub(super) user: Option<&'a str>,
    pub(super) peer: Option<&'a super::access::Peer>,
}

impl Answered<'_> {
    /// Counts the request against its remote (the request and its bytes by
    /// source), keeps a server error for the dashboard, and logs one line.
    pub(super) fn record(
        &self,
        proxy: &Proxy,
        method: &Method,
        uri: &Uri,
        started: Instant,
        response: &Response,
    ) {
        let elapsed = started.elapsed();
        let status = response.status();
        if let (Some(error), true) = (self.error, status.is_server_error()) {
            proxy.metrics.recent_errors.push(
                now_ms(),
                self.remote
                    .map_or_else(|| "-".to_string(), |r| r.name.clone()),
                format!("{} {}: {error}", status.as_u16(), uri.path()),
            );
        }
        let bytes: u64 = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        if let Some(remote) = self.remote {
            remote.counters.count(self.cache, bytes);
        }
        // One line per request; the audit line (a remote that is not
        // anonymous) also says who asked and from where.
        crate::logline::RequestLine {
            method: method.as_str(),
            path: uri.path(),
            status: status.as_u16(),
            cache: self.cache.map_or("-", CacheStatus::as_str),
            mirror: self.mirror.unwrap_or("-"),
            bytes,
            elapsed,
            audit: self
                .remote
                .filter(|r| !r.config.access.is_anonymous())
                .map(|remote| crate::logline::Audit {
                    user: self.user.unwrap_or("-"),
                    remote: remote.name.as_str(),
                    peer: self.peer.map(|peer| peer.client),
                }),
        }
        .log();
    }
}
