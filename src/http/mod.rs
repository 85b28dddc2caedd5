//! The HTTP front end: routes, the artifact handler (hit or miss), and one log
//! line per request. Responses are built in [`respond`]; operations endpoints
//! live in `ops`, the admin API in `admin`; errors become statuses only in
//! `error::ProxyError::status`.

pub mod access;
mod admin;
mod affected;
mod answer;
mod browse;
mod charts;
mod checksum;
mod complete;
mod conn_threads;
mod dashboard;
mod feeds;
mod follow;
mod guard;
mod lfs;
mod login;
mod oci;
mod ops;
mod pass;
mod pins;
mod record;
mod respond;
mod send_timeout;
pub mod server;
pub mod snapshot;
mod stale;
pub mod tls;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, HeaderMap, Method};
use axum::response::Response;
use axum::routing::{any, delete, get, post};
use axum::Router;

use crate::clock::now_ms;
use crate::config::ServerConfig;
use crate::error::ProxyError;
use crate::kind::guard::{Checks, DocumentFilter};
use crate::kind::{Etag, Plan};
pub use crate::metrics::CacheStatus;
use crate::path::ArtifactPath;
use crate::proxy::Proxy;
use crate::upstream::Remote;
use answer::{answered_root, finish, keyed, refusal, resolve, Answer};

/// The application router. Tests call it directly with `oneshot`.
pub fn router(proxy: Arc<Proxy>) -> Router {
    Router::new()
        .route(own("/-/"), get(dashboard::dashboard))
        .route(own("/-/browse"), get(browse::browse))
        .route(own("/-/browse/"), get(browse::browse))
        .route(own("/-/browse/{remote}"), get(browse::browse))
        .route(own("/-/browse/{remote}/"), get(browse::browse))
        .route(own("/-/browse/{remote}/{*prefix}"), get(browse::browse))
        .route(own("/-/health"), get(ops::health))
        .route(own("/-/ready"), get(ops::ready))
        .route(own("/-/status"), get(ops::status))
        .route(
            own("/-/advisories/{remote}/affected"),
            get(affected::affected),
        )
        .route(own("/-/metrics"), get(ops::metrics))
        .route(own("/-/cache/{remote}/purge"), post(admin::purge))
        .route(own("/-/cache/{remote}/{*path}"), delete(admin::delete))
        .route(own("/-/pins/{remote}/{*path}"), delete(pins::clear))
        .route(own("/v2"), any(oci::base))
        .route(own("/v2/"), any(oci::base))
        .route(
            own("/v2/token"),
            get(oci::token::get).post(oci::token::post),
        )
        .route(own("/v2/{*rest}"), any(oci::pull))
        .fallback(artifact)
        .with_state(proxy)
        // A panicking handler answers 500; the connection and server go on.
        .layer(tower_http::catch_panic::CatchPanicLayer::new())
}

/// Whether `path` may be one of [`router`]'s own routes: the dashboard,
/// operations and admin routes under `/-/`, the registry API under `/v2`.
/// Every other path can only end in the router's fallback, so the listener
/// answers it with [`answer_artifact`] without asking the router.
pub(crate) fn is_routed(path: &str) -> bool {
    path.starts_with("/-/") || path == "/v2" || path.starts_with("/v2/")
}

/// A route of [`router`]'s own, which must lie where [`is_routed`] looks.
fn own(path: &'static str) -> &'static str {
    assert!(
        is_routed(path),
        "{path}: a route outside /-/ and /v2 would never be asked"
    );
    path
}

/// [`artifact_from`] for a path no route of the router's matches (see
/// [`is_routed`]), with the router's guard: a panicking handler answers 500
/// as `CatchPanicLayer` does.
///
/// Not an `async fn`: its future is [`artifact_from`]'s wrapped, not held in
/// another state machine that each move of the request's future copies.
pub(crate) fn answer_artifact(
    proxy: Arc<Proxy>,
    request: axum::extract::Request,
    peer: Option<access::Peer>,
) -> impl std::future::Future<Output = Response> + Send {
    use futures_util::FutureExt as _;
    use tower_http::catch_panic::{DefaultResponseForPanic, ResponseForPanic as _};
    std::panic::AssertUnwindSafe(artifact_from(proxy, request, peer))
        .catch_unwind()
        .map(|result| match result {
            Ok(response) => response,
            Err(panic) => DefaultResponseForPanic::default()
                .response_for_panic(panic)
                .map(axum::body::Body::new),
        })
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

/// The fallback route: every path that is not the server's own. It takes
/// the request whole (the `HeaderMap` and `Uri` extractors would copy them).
async fn artifact(
    State(proxy): State<Arc<Proxy>>,
    mut request: axum::extract::Request,
) -> Response {
    let peer = request.extensions_mut().remove::<access::Peer>();
    artifact_from(proxy, request, peer).await
}

/// [`artifact`] with the request's [`access::Peer`] in hand.
async fn artifact_from(
    proxy: Arc<Proxy>,
    request: axum::extract::Request,
    peer: Option<access::Peer>,
) -> Response {
    let (parts, body) = request.into_parts();
    let axum::http::request::Parts {
        method,
        uri,
        headers,
        ..
    } = parts;
    let started = Instant::now();
    // Lets tests reach the panic path of a handler (debug builds only).
    #[cfg(debug_assertions)]
    if uri.path().contains("__mirrorcache_test_panic_in_handler__") {
        panic!("test panic in a handler");
    }
    // The access check, on the remote the request resolved to (also for the
    // root of a remote that answers it itself).
    let mut caller = crate::access::Caller::Anonymous;
    if let Some(remote) = answered_root(&proxy, &uri) {
        let result = match access::admit(&proxy, &remote, &headers, peer.as_ref()).await {
            Ok(admitted) => {
                caller = admitted;
                match method {
                    Method::GET | Method::HEAD => Ok(Served::hit(
                        respond::empty_ok(CacheStatus::Hit),
                        CacheStatus::Hit,
                    )),
                    _ => Err(refusal(&method)),
                }
            }
            Err(refused) => Err(refused),
        };
        let how = Answer {
            remote: Some(remote),
            varies: false,
            takes_post: false,
            caller: &caller,
            peer: peer.as_ref(),
        };
        return finish(&proxy, how, result, &method, &uri, started);
    }
    let unresolved = |error, caller: &crate::access::Caller| {
        let how = Answer {
            remote: None,
            varies: false,
            takes_post: false,
            caller,
            peer: peer.as_ref(),
        };
        finish(&proxy, how, Err(error), &method, &uri, started)
    };
    let (remote, requested) = match resolve(&proxy, &method, &uri) {
        Ok(resolved) => resolved,
        // With `[auth]`, a name no remote has is answered as a private one.
        Err(ProxyError::UnknownRemote(name)) => {
            let scope = crate::access::Scope::Other;
            let error = Box::pin(access::unknown_name(&proxy, &headers, peer.as_ref(), scope))
                .await
                .unwrap_or(ProxyError::UnknownRemote(name));
            return unresolved(error, &caller);
        }
        Err(error) => return unresolved(error, &caller),
    };
    // What the path is and what the remote's guard checks for it, asked of
    // its kind once for the request (the key it is cached under too),
    // before the access check.
    let plan = remote.config.kind.plan(requested.path(), &headers);
    let path = match keyed(&requested, &plan, &uri) {
        Ok(path) => path,
        Err(error) => return unresolved(error, &caller),
    };
    let checks = guard_checks(&proxy, &remote, &path, &plan);
    let admitted = access::admit(&proxy, &remote, &headers, peer.as_ref()).await;
    let (varies, takes_post, result) = match admitted {
        Ok(admitted) => {
            caller = admitted;
            let varies = !plan.variants.is_empty();
            let api = plan.pass_through;
            let protocol = remote.config.kind.ecosystem().protocol();
            let result = match api {
                // A registry is asked for its pull endpoints only (after the
                // access check: a refusal does not depend on the path).
                _ if protocol == crate::kind::Protocol::Registry
                    && !crate::kind::oci::is_pull_path(path.path()) =>
                {
                    Err(ProxyError::NotFound { status: 404 })
                }
                // A login, answered from the caller's credentials.
                None if plan.answered_here.is_some()
                    && (method == Method::GET || method == Method::HEAD) =>
                {
                    login::answer(plan.answered_here, &caller, &headers)
                }
                // The checksum database is served here (GOPROXY protocol).
                None if plan.is_sumdb_supported() && remote.sumdb.is_some() => match method {
                    Method::GET | Method::HEAD => Ok(Served::hit(
                        respond::empty_ok(CacheStatus::Hit),
                        CacheStatus::Hit,
                    )),
                    _ => Err(refusal(&method)),
                },
                // The batch API and its objects.
                _ if protocol == crate::kind::Protocol::LfsActions => {
                    let incoming = lfs::Incoming {
                        path: &path,
                        plan,
                        method: &method,
                        headers: &headers,
                        body,
                    };
                    Box::pin(lfs::answer(&proxy, &remote, incoming)).await
                }
                Some(api) => {
                    let incoming = pass::Incoming {
                        method: &method,
                        uri: &uri,
                        headers: &headers,
                        body,
                        read_timeout: proxy.server().body_read_timeout,
                    };
                    Box::pin(pass::forward(&remote, &path, api, incoming)).await
                }
                None if method == Method::GET || method == Method::HEAD => {
                    serve_planned(&proxy, &remote, &path, plan, checks, &method, &headers).await
                }
                None => Err(refusal(&method)),
            };
            (varies, api.is_some_and(|a| a.post), result)
        }
        Err(refused) => (false, false, Err(refused)),
    };
    let how = Answer {
        remote: Some(remote),
        varies,
        takes_post,
        caller: &caller,
        peer: peer.as_ref(),
    };
    finish(&proxy, how, result, &method, &uri, started)
}

/// One artifact request, resolved to its remote and cache key.
struct ArtifactRequest<'a> {
    proxy: &'a Arc<Proxy>,
    remote: &'a Arc<Remote>,
    /// With the negotiated variant, if the document has variants.
    path: ArtifactPath,
    /// The `Accept` header to send upstream for that variant.
    accept: Option<&'static str>,
    /// An index document: its URLs are rewritten on the way out.
    document: bool,
    /// A document the remote's guard filters (read whole, like a document).
    filter: Option<DocumentFilter>,
    /// Validated by the MD5 of the whole body served (read whole too).
    md5_etag: bool,
    /// Never changes once published, by its kind's rules: fresh at any age.
    immutable: bool,
    method: &'a Method,
    headers: &'a HeaderMap,
}

/// A request for `path` (a GET or HEAD through the cache) made by another
/// answer (a checksum's file, a registry's manifest): [`serve_planned`]
/// with the path's plan.
async fn serve(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    path: &ArtifactPath,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Served, ProxyError> {
    let plan = remote.config.kind.plan(path.path(), headers);
    let checks = guard_checks(proxy, remote, path, &plan);
    serve_planned(proxy, remote, path, plan, checks, method, headers).await
}

/// What the remote's guard checks for `path` (its `plan`), if it has one.
fn guard_checks(
    proxy: &Proxy,
    remote: &Remote,
    path: &ArtifactPath,
    plan: &Plan<'_>,
) -> Option<Checks> {
    let rules = &remote.config.guard;
    if !rules.is_active() {
        // A hit on a remote without rules takes no reference to the indexes.
        return None;
    }
    let advisories = proxy.advisories.current();
    remote
        .config
        .kind
        .guard_checks(rules, path.path(), plan, now_ms(), &advisories)
}

/// A GET or HEAD of `path` through the cache, as its kind's `plan` and the
/// guard's `checks` say: the version policy, a checksum answered from its
/// file, the guard's verdict, then the hit or the fill.
async fn serve_planned(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    path: &ArtifactPath,
    plan: Plan<'_>,
    checks: Option<Checks>,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Served, ProxyError> {
    if !remote.config.version_policy.allows(plan.snapshot) {
        // The other kind of version: this remote does not have it.
        return Err(ProxyError::NotFound { status: 404 });
    }
    let hostnames = &remote.config.hostnames;
    if plan
        .registry_host
        .is_some_and(|host| !hostnames.iter().any(|h| h.eq_ignore_ascii_case(host)))
    {
        // A registry this remote does not serve.
        return Err(ProxyError::NotFound { status: 404 });
    }
    if let Some((of, algo)) = plan.checksum_of {
        return Box::pin(checksum::serve(proxy, remote, of, algo)).await;
    }
    let variant = plan.variant;
    let mut filter = None;
    if let Some(checks) = checks {
        if let Some(artifact) = &checks.artifact {
            let in_status_line = checks.reason_in_status_line;
            Box::pin(guard::check_artifact(
                proxy,
                remote,
                path,
                artifact,
                in_status_line,
            ))
            .await?;
        }
        filter = checks.document;
    }
    let request = ArtifactRequest {
        proxy,
        remote,
        path: variant.map_or_else(|| path.clone(), |v| path.with_variant(v.suffix)),
        accept: variant.map(|v| v.accept),
        document: plan.is_document(!remote.config.files.is_empty()),
        filter,
        md5_etag: plan.etag == Etag::WholeMd5,
        immutable: plan.immutable,
        method,
        headers,
    };
    request.serve().await
}

impl ArtifactRequest<'_> {
    async fn serve(&self) -> Result<Served, ProxyError> {
        let (proxy, remote, path) = (self.proxy, self.remote, &self.path);
        let now = now_ms();

        // Hit path: the metadata cache, the policy, the store. No selection, no upstream.
        // A key not in memory may be filling now: join that fill before asking
        // the database, so a herd of cold requests costs O(1) queries.
        let found = match proxy.cache.meta.memory.lookup_in_memory(path) {
            Some(entry) => Ok(Some(entry)),
            None => match proxy.fills.join(path.key()) {
                Some(rx) => return Box::pin(self.follow(rx, false, None)).await,
                None => proxy.cache.meta.lookup(path).await,
            },
        };
        let mut stale = None;
        match found {
            Ok(Some(entry)) => {
                let fresh = remote
                    .policy
                    .is_fresh_as(self.immutable, path.path(), entry.age(now));
                match proxy.cache.open_blob(&entry.digest, entry.size).await {
                    Ok(file) if fresh => {
                        proxy.cache.meta.memory.touch(path, &entry, now);
                        let response = self.complete(&entry, file, CacheStatus::Hit).await?;
                        return Ok(Served::hit(response, CacheStatus::Hit));
                    }
                    // Deleted upstream lately, and kept: not asked again
                    // before `negative_ttl`.
                    Ok(file) if self.kept_deleted(now) => {
                        let response = self.complete(&entry, file, CacheStatus::Stale).await?;
                        return Ok(Served::hit(response, CacheStatus::Stale));
                    }
                    Ok(_) => stale = Some(entry),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        tracing::warn!(key = path.key(), "cached blob is missing; fetching again");
                        Box::pin(proxy.cache.meta.forget(path)).await?;
                    }
                    Err(e) => return Err(ProxyError::Store(e.to_string())),
                }
            }
            Ok(None) => {
                if let Some((status, at)) = proxy.cache.meta.memory.absent(path) {
                    if now - at < remote.config.negative_ttl.as_millis() as i64 {
                        let response = respond::absent(status, CacheStatus::Hit);
                        return Ok(Served::hit(response, CacheStatus::Hit));
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
        let (rx, started) = proxy
            .fills
            .join_or_start(remote, path, self.accept, stale.clone())?;
        Box::pin(self.follow(rx, started, stale)).await
    }
}

/// The base URL clients reach the proxy at: `server.public_url`, else
/// `{scheme}://{Host}` from the request (checked to be a plain host[:port], so a
/// forged Host cannot inject markup into rewritten documents). The scheme is
/// `https` on TLS; `X-Forwarded-Proto` and `-Host` count only from
/// `trusted_proxies` (the listener drops them from anyone else:
/// `access::prepare`).
pub(super) fn public_base(server: &ServerConfig, headers: &HeaderMap) -> String {
    if let Some(url) = &server.public_url {
        return url.as_str().trim_end_matches('/').to_string();
    }
    let scheme = match headers.get("x-forwarded-proto").map(|v| v.as_bytes()) {
        Some(b"https") => "https",
        _ => "http",
    };
    let host = headers
        .get("x-forwarded-host")
        .or_else(|| headers.get(header::HOST))
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
        });
    match host {
        Some(host) => format!("{scheme}://{host}"),
        None => format!("{scheme}://{}", server.listen),
    }
}
