//! The pass-through API routes of a kind (`kind::Plan::pass_through`): the
//! request is checked (method, body size), forwarded with its query string by
//! `upstream::pass::forward` (failover, the remote's credentials), and the
//! answer streamed back as it comes, marked `X-Cache-Status: PASS`. Nothing is
//! cached, and nothing of the client's own credentials goes upstream.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, Uri};
use axum::response::Response;
use futures_util::StreamExt as _;

use super::Served;
use crate::error::ProxyError;
use crate::fill;
use crate::kind::PassThrough;
use crate::metrics::CacheStatus;
use crate::path::ArtifactPath;
use crate::upstream::pass::{self, Forward};
use crate::upstream::Remote;

/// The largest request body forwarded (npm's audit of a big lockfile is a few
/// MiB); larger ones get 413 without going upstream.
pub const MAX_REQUEST_BODY: usize = 16 * 1024 * 1024;

/// Request headers that travel upstream. Not `Authorization` or cookies (the
/// remote's own credentials are added upstream), not hop-by-hop headers.
/// `Content-Encoding` goes with the body it describes, which is passed as
/// sent (npm gzips its audit bodies).
const REQUEST_HEADERS: [HeaderName; 4] = [
    header::ACCEPT,
    header::CONTENT_TYPE,
    header::CONTENT_ENCODING,
    header::USER_AGENT,
];

/// Response headers that travel back.
const RESPONSE_HEADERS: [HeaderName; 5] = [
    header::CONTENT_TYPE,
    header::CONTENT_ENCODING,
    header::CONTENT_LENGTH,
    header::CACHE_CONTROL,
    header::ETAG,
];

/// A request's whole body: at most [`MAX_REQUEST_BODY`] (else 413), within
/// `read_timeout` (else 408). A body refused as too large is read to its
/// end and dropped first, up to [`DRAIN_LIMIT`] bytes within the same
/// timeout: a connection closed with the client's bytes unread is reset,
/// and the client, still sending, would lose the 413 with it (nginx's
/// lingering close does the same). A client that waits to be told to send
/// (`Expect: 100-continue`) gets the 413 before it sends anything.
pub(super) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    read_timeout: std::time::Duration,
) -> Result<bytes::Bytes, ProxyError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let refused = || ProxyError::RequestTooLarge {
        limit: MAX_REQUEST_BODY,
    };
    let keep = announced.is_none_or(|len| len <= MAX_REQUEST_BODY as u64);
    // Longer than even the drain, or not sent yet: refused at once.
    let waits = headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !keep && (waits || announced.is_some_and(|len| len > DRAIN_LIMIT as u64)) {
        return Err(refused());
    }
    let mut seen = 0usize;
    let read = async {
        let mut body = body.into_data_stream();
        let mut kept = bytes::BytesMut::new();
        while let Some(chunk) = body.next().await {
            // A client gone mid-body: nothing to answer it with.
            let Ok(chunk) = chunk else {
                return Err(refused());
            };
            seen += chunk.len();
            if seen > DRAIN_LIMIT {
                return Err(refused());
            }
            if keep && seen <= MAX_REQUEST_BODY {
                kept.extend_from_slice(&chunk);
            }
        }
        if !keep || seen > MAX_REQUEST_BODY {
            return Err(refused());
        }
        Ok(kept.freeze())
    };
    match tokio::time::timeout(read_timeout, read).await {
        Ok(read) => read,
        // Known to be too large (announced so, or past the limit already):
        // that is the answer, drained or not.
        Err(_) if !keep || seen > MAX_REQUEST_BODY => Err(refused()),
        Err(_) => Err(ProxyError::RequestTimeout),
    }
}

/// The most a request body refused as too large is read before its 413.
const DRAIN_LIMIT: usize = 2 * MAX_REQUEST_BODY;

/// The client's request as it is forwarded.
pub(super) struct Incoming<'r> {
    pub method: &'r Method,
    pub uri: &'r Uri,
    pub headers: &'r HeaderMap,
    pub body: Body,
    /// `server.body_read_timeout`: the whole body within this, or 408.
    pub read_timeout: std::time::Duration,
}

pub(super) async fn forward(
    remote: &Remote,
    path: &ArtifactPath,
    api: PassThrough,
    incoming: Incoming<'_>,
) -> Result<Served, ProxyError> {
    let Incoming {
        method,
        uri,
        headers,
        body,
        read_timeout,
    } = incoming;
    if !api.allows(method) {
        return Err(super::refusal(method));
    }
    let body = read_body(headers, body, read_timeout).await?;
    let mut forwarded = HeaderMap::new();
    for name in REQUEST_HEADERS {
        if let Some(value) = headers.get(&name) {
            forwarded.insert(name, value.clone());
        }
    }
    // npm's own headers (`npm-command`, `npm-session`, …) say what the call is for.
    for (name, value) in headers {
        if name.as_str().starts_with("npm-") {
            forwarded.insert(name.clone(), value.clone());
        }
    }
    let answer = pass::forward(
        remote,
        Forward {
            method: method.clone(),
            path: path.path(),
            query: uri.query(),
            headers: forwarded,
            body,
        },
    )
    .await?;
    let mut response = Response::builder().status(answer.response.status());
    // An answer to a caller the remote had to admit: no shared cache on the
    // way back may keep it for others, whatever the upstream's own
    // `Cache-Control` allowed (`public` would let one: RFC 9111, 3.5).
    let private = !remote.config.access.is_anonymous();
    for name in RESPONSE_HEADERS {
        if private && name == header::CACHE_CONTROL {
            continue;
        }
        if let Some(value) = answer.response.headers().get(&name) {
            response = response.header(name, value.clone());
        }
    }
    if private {
        response = response.header(header::CACHE_CONTROL, HeaderValue::from_static("private"));
    }
    let response = response
        .header("x-cache-status", HeaderValue::from_static("PASS"))
        .body(Body::from_stream(fill::passthrough(
            answer.response.into(),
            remote.config.idle_timeout,
        )))
        .map_err(|e| ProxyError::Store(e.to_string()))?;
    Ok(Served {
        response,
        cache: CacheStatus::Pass,
        mirror: Some(answer.mirror),
    })
}
