//! What every answer of the artifact routes shares: resolving a request to
//! its remote (or to a remote's root that its kind answers itself) and its
//! key (as the kind's plan spells it), the refusal of methods a path does
//! not take, and the tail every answer goes through (`Allow`, `Vary:
//! Accept`, then counted and logged).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use axum::http::{header, Method, Uri};
use axum::response::{IntoResponse, Response};

use super::record::Answered;
use super::{access, respond, Served};
use crate::error::ProxyError;
use crate::kind::Plan;
use crate::path::ArtifactPath;
use crate::proxy::Proxy;
use crate::upstream::Remote;

/// What an answer's tail needs to know besides the result.
pub(super) struct Answer<'a> {
    pub(super) remote: Option<Arc<Remote>>,
    /// The path has `Accept` variants.
    pub(super) varies: bool,
    /// The route takes POST (its 405 says so).
    pub(super) takes_post: bool,
    pub(super) caller: &'a crate::access::Caller,
    pub(super) peer: Option<&'a access::Peer>,
}

/// The remote whose root (`/{remote}/`) `uri` is, when its ecosystem
/// answers the root itself ([`Ecosystem::answers_root`]).
///
/// [`Ecosystem::answers_root`]: crate::kind::Ecosystem::answers_root
pub(super) fn answered_root(proxy: &Proxy, uri: &Uri) -> Option<Arc<Remote>> {
    let name = uri.path().strip_prefix('/')?;
    let name = name.strip_suffix('/').unwrap_or(name);
    if name.is_empty() || name.contains('/') || uri.authority().is_some() {
        return None;
    }
    let remote = proxy.remote(name)?;
    remote
        .config
        .kind
        .ecosystem()
        .answers_root()
        .then_some(remote)
}

/// Adds what every answer carries, then counts and logs it.
pub(super) fn finish(
    proxy: &Arc<Proxy>,
    how: Answer<'_>,
    result: Result<Served, ProxyError>,
    method: &Method,
    uri: &Uri,
    started: Instant,
) -> Response {
    let Answer {
        remote,
        varies,
        takes_post,
        caller,
        peer,
    } = how;
    let (mut response, cache, mirror, error) = match result {
        Ok(served) => (served.response, Some(served.cache), served.mirror, None),
        Err(error) => {
            let message = format!("{error}");
            (error.into_response(), None, None, Some(message))
        }
    };
    if takes_post && response.status() == axum::http::StatusCode::METHOD_NOT_ALLOWED {
        response.headers_mut().insert(
            header::ALLOW,
            header::HeaderValue::from_static("GET, HEAD, POST"),
        );
    }
    // Every answer for a content-negotiated path (hit, miss, 304, 404,
    // error) depends on `Accept`.
    if varies {
        respond::vary_on_accept(&mut response);
    }
    let answered = Answered {
        remote: remote.as_deref(),
        cache,
        mirror: mirror.as_deref(),
        error: error.as_deref(),
        user: caller.user(),
        peer,
    };
    answered.record(proxy, method, uri, started, &response);
    response
}

/// Refuses what is not a request for an artifact of a configured remote.
pub(super) fn resolve(
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
    // An advisory feed's remote is asked only by the feed's own refresh.
    let remote = proxy
        .remote(path.remote())
        .filter(|remote| !remote.config.feed)
        .ok_or_else(|| ProxyError::UnknownRemote(path.remote().to_string()))?;
    Ok((remote, path))
}

/// The key `path` (as the request spelt it) is cached and fetched under,
/// as its kind's `plan` says: one key for the ecosystem's two spellings of
/// one thing (npm's scoped packuments), and the query of an API document
/// whose query selects what it lists. Borrowed when it is the path itself.
pub(super) fn keyed<'a>(
    path: &'a ArtifactPath,
    plan: &Plan<'_>,
    uri: &Uri,
) -> Result<Cow<'a, ArtifactPath>, ProxyError> {
    let path = match plan.respelled {
        Some(respelling) => {
            let respelled = format!("/{}/{}", path.remote(), respelling.apply(path.path()));
            Cow::Owned(ArtifactPath::parse(&respelled)?)
        }
        None => Cow::Borrowed(path),
    };
    match uri.query() {
        Some(query) if plan.query_in_key => Ok(Cow::Owned(path.with_query(query)?)),
        _ => Ok(path),
    }
}

/// The answer to a method a path does not take: writes (`npm publish` is a
/// PUT, `cargo publish` a PUT, `twine upload` a POST, unpublishing and
/// yanking DELETEs) are told this is a read-only cache; anything else is a
/// plain 405.
pub(super) fn refusal(method: &Method) -> ProxyError {
    if [Method::PUT, Method::POST, Method::DELETE, Method::PATCH].contains(method) {
        ProxyError::ReadOnly
    } else {
        ProxyError::MethodNotAllowed
    }
}
