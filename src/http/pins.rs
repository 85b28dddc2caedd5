//! The admin API's pins: `DELETE /-/pins/{remote}/{path}` forgets the digest
//! an artifact was pinned to on first use (or that an index declared for
//! it), so that the next fill takes whatever its mirror sends and pins
//! that. Guarded by `server.admin_token` like the rest of the admin API.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::admin::refuse;
use crate::error::ProxyError;
use crate::path::ArtifactPath;
use crate::proxy::Proxy;

/// `DELETE /-/pins/{remote}/{path}`: 200 with `{"cleared": true|false}`; a
/// path that is never pinned (mutable, a document, declared by its
/// address) is 400.
pub async fn clear(State(proxy): State<Arc<Proxy>>, uri: Uri, headers: HeaderMap) -> Response {
    if let Some(refusal) = refuse(&proxy, &headers) {
        return refusal;
    }
    let raw = uri.path().strip_prefix("/-/pins").unwrap_or_default();
    let path = match ArtifactPath::parse(raw) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let Some(remote) = proxy.remote(path.remote()) else {
        return ProxyError::UnknownRemote(path.remote().to_string()).into_response();
    };
    let Some(key) = crate::fill::pin_key(&remote, &path) else {
        return (
            StatusCode::BAD_REQUEST,
            "this path is not pinned on first use (mutable, a document, addressed by its digest, or pin_on_first_use = false)\n",
        )
            .into_response();
    };
    match proxy
        .cache
        .meta
        .declarations()
        .forget_declared(&remote.name, &key)
        .await
    {
        Ok(cleared) => {
            tracing::info!(key = path.key(), cleared, "admin: pin cleared");
            Json(json!({ "cleared": cleared })).into_response()
        }
        Err(e) => e.into_response(),
    }
}
