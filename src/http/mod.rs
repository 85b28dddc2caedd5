//! The HTTP front end: routes, the artifact handler (hit or miss), and one log
//! line per request. Responses are built in [`respond`]; operations endpoints
//! live in `ops`, the admin API in `admin`; errors become statuses only in
//! `error::ProxyError::status`.

mod admin;
mod ops;
mod respond;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;

use crate::error::ProxyError;
use crate::fill::{self, FillState};
use crate::meta::now_ms;
use crate::path::ArtifactPath;
use crate::proxy::Proxy;
use crate::remote::Remote;
use crate::upstream::{self, Fetched, Validators};
pub use respond::CacheStatus;

/// The application router. Tests call it directly with `oneshot`.
pub fn router(proxy: Arc<Proxy>) -> Router {
    Router::new()
        .route("/-/health", get(ops::health))
        .route("/-/ready", get(ops::ready))
        .route("/-/status", get(ops::status))
        .route("/-/metrics", get(ops::metrics))
        .route("/-/cache/{remote}/purge", post(admin::purge))
        .route("/-/cache/{remote}/{*path}", delete(admin::delete))
        .fallback(artifact)
        .with_state(proxy)
}

/// What the request log says about a served artifact.
struct Served {
    response: Response,
    cache: CacheStatus,
    mirror: Option<String>,
}

impl Served {
    fn hit(response: Response, cache: CacheStatus) -> Served {
        Served {
            response,
            cache,
            mirror: None,
        }
    }
}

async fn artifact(
    State(proxy): State<Arc<Proxy>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let started = Instant::now();
    let (remote, result) = match resolve(&proxy, &method, &uri) {
        Ok((remote, path)) => {
            let result = serve(&proxy, &remote, &path, &method, &headers).await;
            (Some(remote), result)
        }
        Err(error) => (None, Err(error)),
    };
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    let (response, cache, mirror) = match result {
        Ok(served) => (served.response, Some(served.cache), served.mirror),
        Err(error) => (error.into_response(), None, None),
    };
    let bytes: u64 = response
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    if let Some(remote) = &remote {
        remote.counters.count(cache, bytes);
    }
    tracing::info!(
        method = %method,
        path = uri.path(),
        status = response.status().as_u16(),
        cache = cache.map_or("-", CacheStatus::as_str),
        mirror = mirror.as_deref().unwrap_or("-"),
        bytes,
        ms = format_args!("{elapsed_ms:.1}"),
        "request"
    );
    response
}

/// Refuses what is not a request for an artifact of a configured remote.
fn resolve(
    proxy: &Proxy,
    method: &Method,
    uri: &Uri,
) -> Result<(Arc<Remote>, ArtifactPath), ProxyError> {
    // Not an open proxy: no CONNECT tunnels, no absolute-form targets.
    if method == Method::CONNECT {
        return Err(ProxyError::MethodNotAllowed);
    }
    if uri.scheme().is_some() || uri.authority().is_some() {
        return Err(ProxyError::BadPath(
            "absolute-form request targets are refused",
        ));
    }
    let path = ArtifactPath::parse(uri.path())?;
    let remote = proxy
        .remote(path.remote())
        .ok_or_else(|| ProxyError::UnknownRemote(path.remote().to_string()))?;
    if method != Method::GET && method != Method::HEAD {
        return Err(ProxyError::MethodNotAllowed);
    }
    Ok((remote, path))
}

async fn serve(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    path: &ArtifactPath,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Served, ProxyError> {
    let now = now_ms();

    // Hit path: the metadata cache, the policy, the store. No selection, no upstream.
    let mut stale = None;
    match proxy.meta.lookup(path).await {
        Ok(Some(entry)) => {
            let fresh = remote.policy.is_fresh(path.path(), &entry, now);
            match proxy.open_blob(&entry.digest).await {
                Ok(file) if fresh => {
                    entry.touch(now);
                    let response =
                        respond::from_entry(&entry, file, CacheStatus::Hit, method, headers);
                    return Ok(Served::hit(response, CacheStatus::Hit));
                }
                Ok(_) => stale = Some(entry),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    tracing::warn!(key = path.key(), "cached blob is missing; fetching again");
                    proxy.meta.forget(path).await?;
                }
                Err(e) => return Err(ProxyError::Store(e.to_string())),
            }
        }
        Ok(None) => {
            if let Some((status, at)) = proxy.meta.absent(path) {
                if now - at < remote.config.negative_ttl.as_millis() as i64 {
                    return Ok(Served::hit(
                        respond::absent(status, CacheStatus::Hit),
                        CacheStatus::Hit,
                    ));
                }
            }
        }
        // The database is down: serve the request as an uncached miss.
        Err(error) => {
            proxy.metrics.metadata_errors.inc();
            tracing::warn!(%error, "metadata lookup failed; treating as a miss");
        }
    }

    // Miss (or stale): join or start the fill, and answer as soon as its head is known.
    let (mut rx, started) = proxy
        .fills
        .join_or_start(proxy, remote, path, stale.clone());
    let state = rx
        .wait_for(|s| !matches!(s, FillState::Connecting))
        .await
        .map(|s| s.clone())
        .unwrap_or_else(|_| {
            FillState::Failed(ProxyError::Store("fill task ended unexpectedly".into()))
        });
    match state {
        FillState::Failed(error) => {
            serve_when_mirrors_fail(proxy, remote, path, stale, error, method, headers).await
        }
        FillState::Revalidated(entry) => {
            let file = proxy
                .open_blob(&entry.digest)
                .await
                .map_err(|e| ProxyError::Store(e.to_string()))?;
            let response =
                respond::from_entry(&entry, file, CacheStatus::Revalidated, method, headers);
            Ok(Served::hit(response, CacheStatus::Revalidated))
        }
        FillState::Streaming { head, file, .. } => {
            let mirror = Some(head.mirror.clone());
            let response = respond::from_fill(&head, fill::body(rx, file), method);
            Ok(Served {
                response,
                cache: CacheStatus::Miss,
                mirror,
            })
        }
        // The body is complete and hashed, perhaps not yet committed, and is
        // served from the fill's own file: a miss for the request that started
        // the fill (a small body can finish before its starter looks), a hit
        // for one that joined after the upstream fetch was over.
        FillState::Complete { head, entry, file } => {
            let (cache, mirror) = if started {
                (CacheStatus::Miss, Some(head.mirror.clone()))
            } else {
                (CacheStatus::Hit, None)
            };
            let response = respond::from_entry(&entry, file, cache, method, headers);
            Ok(Served {
                response,
                cache,
                mirror,
            })
        }
        FillState::Bypass { head, response } => {
            let taken = response.lock().expect("bypass slot poisoned").take();
            let upstream_response = match taken {
                Some(r) => r,
                // Someone else has the fill's response: fetch our own copy.
                None => match upstream::fetch(remote, path.path(), Validators::default()).await? {
                    Fetched::Body { response, .. } => response,
                    Fetched::NotModified { .. } => unreachable!("no validators were sent"),
                },
            };
            let body = fill::passthrough(upstream_response, remote.config.idle_timeout);
            let response = respond::from_fill(&head, body, method);
            Ok(Served {
                response,
                cache: CacheStatus::Miss,
                mirror: Some(head.mirror.clone()),
            })
        }
        FillState::Connecting => unreachable!("waited until the fill left Connecting"),
    }
}

/// Stale-if-error: when the mirrors fail (not when they say "not found"), a
/// cached copy up to `max_stale` old is served as `STALE`, and a path whose
/// last known answer was a 404 gets that 404 again rather than a 502.
async fn serve_when_mirrors_fail(
    proxy: &Proxy,
    remote: &Remote,
    path: &ArtifactPath,
    stale: Option<Arc<crate::meta::Entry>>,
    error: ProxyError,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Served, ProxyError> {
    if !matches!(
        error,
        ProxyError::MirrorsFailed { .. } | ProxyError::MirrorsBusy
    ) {
        return Err(error);
    }
    let now = now_ms();
    let max_stale = remote.config.max_stale;
    if let Some(entry) = stale.filter(|e| e.age(now) <= max_stale) {
        if let Ok(file) = proxy.open_blob(&entry.digest).await {
            tracing::warn!(key = path.key(), %error, "every mirror failed; serving a stale copy");
            let response = respond::from_entry(&entry, file, CacheStatus::Stale, method, headers);
            return Ok(Served::hit(response, CacheStatus::Stale));
        }
    }
    if let Some((status, at)) = proxy.meta.absent(path) {
        if now - at <= max_stale.as_millis() as i64 {
            return Ok(Served::hit(
                respond::absent(status, CacheStatus::Stale),
                CacheStatus::Stale,
            ));
        }
    }
    Err(error)
}
