//! The HTTP front end: routes, the artifact handler (hit or miss), and one log
//! line per request. Responses are built in [`respond`]; errors become
//! statuses only in `error::ProxyError::status`.

mod respond;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::error::ProxyError;
use crate::fill::FillState;
use crate::meta::now_ms;
use crate::path::ArtifactPath;
use crate::proxy::Proxy;
pub use respond::CacheStatus;

/// The application router. Tests call it directly with `oneshot`.
pub fn router(proxy: Arc<Proxy>) -> Router {
    Router::new()
        .route("/-/health", get(health))
        .fallback(artifact)
        .with_state(proxy)
}

async fn health() -> &'static str {
    "ok\n"
}

/// What the request log says about a served artifact.
struct Served {
    response: Response,
    cache: CacheStatus,
    mirror: Option<String>,
}

async fn artifact(
    State(proxy): State<Arc<Proxy>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let started = Instant::now();
    let result = serve_artifact(&proxy, &method, &uri, &headers).await;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok(served) => {
            let bytes = served
                .response
                .headers()
                .get(axum::http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_string();
            tracing::info!(
                method = %method,
                path = uri.path(),
                status = served.response.status().as_u16(),
                cache = served.cache.as_str(),
                mirror = served.mirror.as_deref().unwrap_or("-"),
                bytes,
                ms = format_args!("{elapsed_ms:.1}"),
                "request"
            );
            served.response
        }
        Err(error) => {
            tracing::info!(
                method = %method,
                path = uri.path(),
                status = error.status().as_u16(),
                cache = "-",
                mirror = "-",
                bytes = "-",
                ms = format_args!("{elapsed_ms:.1}"),
                "request"
            );
            error.into_response()
        }
    }
}

async fn serve_artifact(
    proxy: &Arc<Proxy>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Served, ProxyError> {
    let path = ArtifactPath::parse(uri.path())?;
    let remote = proxy
        .remote(path.remote())
        .ok_or_else(|| ProxyError::UnknownRemote(path.remote().to_string()))?;
    if method != Method::GET && method != Method::HEAD {
        return Err(ProxyError::MethodNotAllowed);
    }

    // Hit path: the metadata cache, the policy, the store. No selection, no upstream.
    let mut stale = None;
    match proxy.meta.lookup(&path).await {
        Ok(Some(entry)) => {
            let fresh = remote.policy.is_fresh(path.path(), &entry, now_ms());
            match proxy.open_blob(&entry.digest).await {
                Ok(file) if fresh => {
                    let response =
                        respond::from_entry(&entry, file, CacheStatus::Hit, method, headers);
                    return Ok(Served {
                        response,
                        cache: CacheStatus::Hit,
                        mirror: None,
                    });
                }
                Ok(_) => stale = Some(entry),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    tracing::warn!(key = path.key(), "cached blob is missing; fetching again");
                    proxy.meta.forget(&path).await?;
                }
                Err(e) => return Err(ProxyError::Store(e.to_string())),
            }
        }
        Ok(None) => {}
        // The database is down: serve the request as an uncached miss.
        Err(error) => tracing::warn!(%error, "metadata lookup failed; treating as a miss"),
    }

    // Miss (or stale): join or start the fill, and answer as soon as its head is known.
    let (mut rx, started) = proxy.fills.join_or_start(proxy, remote, &path, stale);
    let state = rx
        .wait_for(|s| !matches!(s, FillState::Connecting))
        .await
        .map(|s| s.clone())
        .unwrap_or_else(|_| {
            FillState::Failed(ProxyError::Store("fill task ended unexpectedly".into()))
        });
    match state {
        FillState::Failed(error) => Err(error),
        FillState::Revalidated(entry) => {
            let file = proxy
                .open_blob(&entry.digest)
                .await
                .map_err(|e| ProxyError::Store(e.to_string()))?;
            let response =
                respond::from_entry(&entry, file, CacheStatus::Revalidated, method, headers);
            Ok(Served {
                response,
                cache: CacheStatus::Revalidated,
                mirror: None,
            })
        }
        FillState::Streaming { head, file, .. } => {
            let mirror = Some(head.mirror.clone());
            let response = respond::from_fill(&head, rx, file, method);
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
        FillState::Connecting => unreachable!("waited until the fill left Connecting"),
    }
}
