//! A small real HTTP server playing an upstream mirror, with fault switches:
//! down, an error status, a slow first byte, a slow body, a truncated body, a
//! lying Content-Length, a chunked body and a body held back until the test
//! releases it. It counts every request it gets, per path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    None,
    /// Answer every request with this status.
    Status(u16),
    /// Answer every request 429 as Docker Hub does past its pull limit:
    /// `Retry-After` of this many seconds, `RateLimit-Remaining: 0;w=21600`
    /// and the registry's error JSON.
    RateLimited(u64),
    /// Wait this long before sending the response head.
    SlowFirstByte(Duration),
    /// Send the body in 64 KiB pieces with this pause between them.
    SlowBody(Duration),
    /// Announce the full Content-Length, send this many bytes, drop the connection.
    Truncate(usize),
    /// Announce this many extra bytes in Content-Length, then send the real body.
    LongerContentLength(u64),
    /// Answer with this Content-Encoding whatever the request accepts: the
    /// body gzipped for "gzip", the bytes as they are (mislabelled) otherwise.
    Encoded(&'static str),
    /// Send the body chunked (no Content-Length), in 16 KiB pieces.
    Chunked,
    /// Announce the full Content-Length, send this many bytes, then hold the
    /// rest until [`MirrorServer::release`] (counted by [`MirrorServer::stalled`]).
    StallAfter(usize),
}

/// One request as the mirror received it (for pass-through checks).
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    /// Path and query string.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

struct File {
    bytes: Bytes,
    etag: String,
    content_type: &'static str,
    /// `Last-Modified`; `None`: a fixed date in 2015.
    last_modified: Option<String>,
}

pub struct MirrorState {
    files: Mutex<HashMap<String, File>>,
    /// Content-negotiated files: (path, a media type the `Accept` header must
    /// name) → file, served before `files` when the request asks for it.
    negotiated: Mutex<HashMap<(String, &'static str), File>>,
    /// `Authorization` header value every request must carry, if set.
    required_auth: Mutex<Option<String>>,
    fault: Mutex<Fault>,
    hits: Mutex<HashMap<String, usize>>,
    total: AtomicUsize,
    /// Requests answered 304 (their `If-None-Match` matched).
    not_modified: AtomicUsize,
    last: Mutex<Option<Received>>,
    /// Bodies that sent their first part under `StallAfter` and wait.
    stalled: AtomicUsize,
    /// `true` once the test lets the held bodies go on.
    released: tokio::sync::watch::Sender<bool>,
}

pub struct MirrorServer {
    pub addr: SocketAddr,
    state: Arc<MirrorState>,
    tasks: Mutex<Option<JoinSet<()>>>,
}

/// `["{mirror}{prefix}", …]`: the mirrors as a config's URL list.
pub fn toml_urls(mirrors: &[&MirrorServer], prefix: &str) -> String {
    let urls: Vec<String> = mirrors
        .iter()
        .map(|m| format!("\"{}\"", m.url(prefix)))
        .collect();
    format!("[{}]", urls.join(", "))
}

impl MirrorServer {
    pub async fn start() -> MirrorServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(MirrorState {
            files: Mutex::default(),
            negotiated: Mutex::default(),
            required_auth: Mutex::default(),
            fault: Mutex::new(Fault::None),
            hits: Mutex::default(),
            total: AtomicUsize::new(0),
            not_modified: AtomicUsize::new(0),
            last: Mutex::default(),
            stalled: AtomicUsize::new(0),
            released: tokio::sync::watch::Sender::new(false),
        });
        let router = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone())
            // Bodies of any size (the proxy's own limit is under test).
            .layer(axum::extract::DefaultBodyLimit::disable());
        MirrorServer {
            addr,
            state,
            tasks: Mutex::new(Some(serve_stoppably(listener, router))),
        }
    }

    /// `http://127.0.0.1:PORT{prefix}`.
    pub fn url(&self, prefix: &str) -> String {
        format!("http://{}{}", self.addr, prefix)
    }

    /// Serves `bytes` at `path` (which starts with `/`; with a query string,
    /// to that query only).
    pub fn put(&self, path: &str, bytes: impl Into<Bytes>) {
        self.put_typed(path, bytes, "application/x-test");
    }

    /// Stops serving `path` (404 from now on), as a mirror that deleted it.
    pub fn remove(&self, path: &str) {
        self.state.files.lock().unwrap().remove(path);
    }

    /// Serves `bytes` at `path` with this `Content-Type`.
    pub fn put_typed(&self, path: &str, bytes: impl Into<Bytes>, content_type: &'static str) {
        let bytes = bytes.into();
        let etag = format!("\"{}\"", &super::sha256_hex(&bytes)[..16]);
        let file = File {
            bytes,
            etag,
            content_type,
            last_modified: None,
        };
        self.state
            .files
            .lock()
            .unwrap()
            .insert(path.to_string(), file);
    }

    /// Serves `bytes` at `path` with this `Last-Modified` (a release's date,
    /// as Maven repositories give it).
    pub fn put_dated(&self, path: &str, bytes: impl Into<Bytes>, modified: std::time::SystemTime) {
        self.put(path, bytes);
        if let Some(file) = self.state.files.lock().unwrap().get_mut(path) {
            file.last_modified = Some(httpdate::fmt_http_date(modified));
        }
    }

    /// Serves `bytes` at `path` to requests whose `Accept` names `media_type`
    /// (as a PEP 691 index serves JSON), typed as that media type.
    pub fn put_negotiated(&self, path: &str, media_type: &'static str, bytes: impl Into<Bytes>) {
        let bytes = bytes.into();
        let etag = format!("\"{}\"", &super::sha256_hex(&bytes)[..16]);
        let file = File {
            bytes,
            etag,
            content_type: media_type,
            last_modified: None,
        };
        self.state
            .negotiated
            .lock()
            .unwrap()
            .insert((path.to_string(), media_type), file);
    }

    /// Every path requested so far, with counts, sorted.
    pub fn requests(&self) -> Vec<(String, usize)> {
        let hits = self.state.hits.lock().unwrap();
        let mut all: Vec<(String, usize)> = hits.iter().map(|(p, n)| (p.clone(), *n)).collect();
        all.sort();
        all
    }

    /// From now on, answers 401 unless the request has these basic credentials.
    pub fn require_basic_auth(&self, user: &str, password: &str) {
        use base64_encode as b64;
        *self.state.required_auth.lock().unwrap() =
            Some(format!("Basic {}", b64(&format!("{user}:{password}"))));
    }

    pub fn set_fault(&self, fault: Fault) {
        *self.state.fault.lock().unwrap() = fault;
    }

    /// Requests received for `path`.
    pub fn hits(&self, path: &str) -> usize {
        self.state
            .hits
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// The last request received, with its method, query string, headers and body.
    pub fn last_request(&self) -> Option<Received> {
        self.state.last.lock().unwrap().clone()
    }

    /// Requests answered 304 in all.
    pub fn not_modified(&self) -> usize {
        self.state.not_modified.load(Ordering::SeqCst)
    }

    /// Requests received in all.
    pub fn total(&self) -> usize {
        self.state.total.load(Ordering::SeqCst)
    }

    /// Bodies that have sent their first part under `Fault::StallAfter` and
    /// are being held.
    pub fn stalled(&self) -> usize {
        self.state.stalled.load(Ordering::SeqCst)
    }

    /// Lets every body held by `Fault::StallAfter` (now or later) go on.
    pub fn release(&self) {
        self.state.released.send_replace(true);
    }

    /// Closes the listener and every connection: connects are refused from now on.
    pub fn stop(&self) {
        if let Some(mut tasks) = self.tasks.lock().unwrap().take() {
            tasks.abort_all();
        }
    }
}

impl Drop for MirrorServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves `router` on `listener`, accepting inside the returned JoinSet
/// too, so aborting it ends the listener and every open connection at
/// once: the server is really down.
pub fn serve_stoppably(listener: TcpListener, router: axum::Router) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    let conns: Arc<Mutex<JoinSet<()>>> = Arc::new(Mutex::new(JoinSet::new()));
    tasks.spawn(async move {
        let _conns_guard = ConnsGuard(conns.clone());
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let service = TowerToHyperService::new(router.clone());
            conns.lock().unwrap().spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    tasks
}

struct ConnsGuard(Arc<Mutex<JoinSet<()>>>);

impl Drop for ConnsGuard {
    fn drop(&mut self) {
        self.0.lock().unwrap().abort_all();
    }
}

async fn handle(
    State(state): State<Arc<MirrorState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    *state.last.lock().unwrap() = Some(Received {
        method: method.to_string(),
        target: uri.path_and_query().map_or(path.clone(), |p| p.to_string()),
        headers: headers.clone(),
        body,
    });
    state.total.fetch_add(1, Ordering::SeqCst);
    *state.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
    let required = state.required_auth.lock().unwrap().clone();
    if let Some(required) = required {
        if headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            != Some(required.as_str())
        {
            return StatusCode::UNAUTHORIZED.into_response();
        }
    }
    let fault = *state.fault.lock().unwrap();
    if let Fault::Status(code) = fault {
        return StatusCode::from_u16(code).unwrap().into_response();
    }
    if let Fault::RateLimited(secs) = fault {
        let body = r#"{"errors":[{"code":"TOOMANYREQUESTS","message":"You have reached your pull rate limit. You may increase the limit by authenticating and upgrading"}]}"#;
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [
                (header::RETRY_AFTER, secs.to_string()),
                (
                    header::HeaderName::from_static("ratelimit-remaining"),
                    "0;w=21600".to_string(),
                ),
                (header::CONTENT_TYPE, "application/json".to_string()),
            ],
            body,
        )
            .into_response();
    }
    if let Fault::SlowFirstByte(delay) = fault {
        tokio::time::sleep(delay).await;
    }
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (bytes, etag, content_type, last_modified) = {
        let negotiated = state.negotiated.lock().unwrap();
        let files = state.files.lock().unwrap();
        let asked = negotiated
            .iter()
            .find(|((p, media_type), _)| *p == path && accept.contains(media_type))
            .map(|(_, f)| f);
        // A file put under a path with its query string answers that query only.
        let target = uri.path_and_query().map_or(path.as_str(), |p| p.as_str());
        match asked
            .or_else(|| files.get(target))
            .or_else(|| files.get(&path))
        {
            Some(f) => (
                f.bytes.clone(),
                f.etag.clone(),
                f.content_type,
                f.last_modified.clone(),
            ),
            None => return StatusCode::NOT_FOUND.into_response(),
        }
    };
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        == Some(etag.as_str())
    {
        state.not_modified.fetch_add(1, Ordering::SeqCst);
        return Response::builder()
            .status(304)
            .header(header::ETAG, etag)
            .body(Body::empty())
            .unwrap();
    }
    // As a module registry answers `…/{version}/download`: 204, the file
    // being the module's location (`X-Terraform-Get`).
    if path.starts_with("/v1/modules/") && path.ends_with("/download") {
        return Response::builder()
            .status(204)
            .header("x-terraform-get", String::from_utf8_lossy(&bytes).as_ref())
            .body(Body::empty())
            .unwrap();
    }
    let len = bytes.len() as u64;
    let mut builder = Response::builder();
    // As a registry answers a manifest (a tag's HEAD reads it).
    if path.contains("/manifests/") {
        builder = builder.header(
            "docker-content-digest",
            format!("sha256:{}", super::sha256_hex(&bytes)),
        );
    }
    let builder = builder
        .header(header::ETAG, &etag)
        .header(header::CONTENT_TYPE, content_type)
        .header(
            header::LAST_MODIFIED,
            last_modified
                .as_deref()
                .unwrap_or("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
    match fault {
        Fault::Truncate(n) => {
            let part = bytes.slice(..n.min(bytes.len()));
            // The pause makes sure the head and the first part are on the wire
            // before the cut, so the cut is mid-body, not a failed connect.
            let stream = futures_util::stream::iter(vec![Ok::<Bytes, std::io::Error>(part)]).chain(
                futures_util::stream::once(async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Err(std::io::Error::other("mirror cut the body"))
                }),
            );
            builder
                .header(header::CONTENT_LENGTH, len)
                .body(Body::from_stream(stream))
                .unwrap()
        }
        Fault::LongerContentLength(extra) => builder
            .header(header::CONTENT_LENGTH, len + extra)
            .body(Body::from_stream(
                futures_util::stream::iter(vec![Ok::<Bytes, std::io::Error>(bytes)]).chain(
                    futures_util::stream::once(async {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(Bytes::new())
                    }),
                ),
            ))
            .unwrap(),
        Fault::SlowBody(pause) => {
            let pieces: Vec<Bytes> = bytes
                .chunks(64 * 1024)
                .map(|c| bytes.slice_ref(c))
                .collect();
            let stream =
                futures_util::stream::unfold(pieces.into_iter(), move |mut it| async move {
                    let next = it.next()?;
                    tokio::time::sleep(pause).await;
                    Some((Ok::<Bytes, std::io::Error>(next), it))
                });
            builder
                .header(header::CONTENT_LENGTH, len)
                .body(Body::from_stream(stream))
                .unwrap()
        }
        Fault::Chunked => {
            let pieces: Vec<Result<Bytes, std::io::Error>> = bytes
                .chunks(16 * 1024)
                .map(|c| Ok(bytes.slice_ref(c)))
                .collect();
            // A stream of unknown length: hyper sends it chunked.
            builder
                .body(Body::from_stream(futures_util::stream::iter(pieces)))
                .unwrap()
        }
        Fault::StallAfter(n) => {
            let n = n.min(bytes.len());
            let (first, rest) = (bytes.slice(..n), bytes.slice(n..));
            let mut released = state.released.subscribe();
            let waiting = state.clone();
            let stream = futures_util::stream::iter(vec![Ok::<Bytes, std::io::Error>(first)])
                .chain(futures_util::stream::once(async move {
                    waiting.stalled.fetch_add(1, Ordering::SeqCst);
                    let _ = released.wait_for(|r| *r).await;
                    Ok(rest)
                }));
            builder
                .header(header::CONTENT_LENGTH, len)
                .body(Body::from_stream(stream))
                .unwrap()
        }
        Fault::Encoded(encoding) => {
            let body = if encoding == "gzip" {
                use std::io::Write;
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(&bytes).unwrap();
                Bytes::from(gz.finish().unwrap())
            } else {
                bytes
            };
            builder
                .header(header::CONTENT_ENCODING, encoding)
                .header(header::CONTENT_LENGTH, body.len())
                .body(Body::from(body))
                .unwrap()
        }
        _ => builder
            .header(header::CONTENT_LENGTH, len)
            .body(Body::from(bytes))
            .unwrap(),
    }
}

/// Standard base64 (the test's own, to check what the proxy sends).
fn base64_encode(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
