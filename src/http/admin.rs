//! The admin API: remove one cached path, or purge a remote. Needs
//! `Authorization: Bearer <server.admin_token>`; off when no token is set.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ProxyError;
use crate::path::ArtifactPath;
use crate::proxy::Proxy;

/// `None` when the request may go on; else the refusal.
fn refuse(proxy: &Proxy, headers: &HeaderMap) -> Option<Response> {
    let Some(token) = &proxy.server.admin_token else {
        return Some(
            (
                StatusCode::NOT_FOUND,
                "admin API disabled: no server.admin_token\n",
            )
                .into_response(),
        );
    };
    let offered = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    // Compare digests, in constant time: neither the token's bytes nor its
    // length leak through timing.
    let equal: bool = Sha256::digest(offered.as_bytes())
        .ct_eq(&Sha256::digest(token.as_bytes()))
        .into();
    if equal {
        None
    } else {
        Some(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "unauthorized\n",
            )
                .into_response(),
        )
    }
}

/// `DELETE /-/cache/{remote}/{path}`: forgets one path (and its blob, if no
/// other path shares it).
pub async fn delete(State(proxy): State<Arc<Proxy>>, uri: Uri, headers: HeaderMap) -> Response {
    if let Some(refusal) = refuse(&proxy, &headers) {
        return refusal;
    }
    // The raw path, so the key matches the one requests use (encoding kept).
    let raw = uri.path().strip_prefix("/-/cache").unwrap_or_default();
    let path = match ArtifactPath::parse(raw) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if proxy.remote(path.remote()).is_none() {
        return ProxyError::UnknownRemote(path.remote().to_string()).into_response();
    }
    proxy.cache.meta.forget_absent(&path);
    let entry = match proxy.cache.meta.lookup(&path).await {
        Ok(entry) => entry,
        Err(e) => return e.into_response(),
    };
    if entry.is_none() {
        return Json(json!({ "removed": false })).into_response();
    }
    let freed = match proxy.cache.forget_entry(&path).await {
        Ok(freed) => freed,
        Err(e) => return e.into_response(),
    };
    tracing::info!(key = path.key(), freed, "admin: removed");
    Json(json!({ "removed": true, "freed_bytes": freed })).into_response()
}

/// `POST /-/cache/{remote}/purge`: forgets every path of a remote.
pub async fn purge(
    State(proxy): State<Arc<Proxy>>,
    axum::extract::Path(remote): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = refuse(&proxy, &headers) {
        return refusal;
    }
    if proxy.remote(&remote).is_none() {
        return ProxyError::UnknownRemote(remote).into_response();
    }
    let (blobs, freed) = match proxy.cache.forget_remote(&remote).await {
        Ok(done) => done,
        Err(e) => return e.into_response(),
    };
    tracing::info!(remote, blobs, freed, "admin: purged");
    Json(json!({ "remote": remote, "blobs": blobs, "freed_bytes": freed })).into_response()
}
