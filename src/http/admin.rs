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

use crate::cache::Scope;
use crate::error::ProxyError;
use crate::path::ArtifactPath;
use crate::proxy::Proxy;

/// `None` when the request may go on; else the refusal.
pub(super) fn refuse(proxy: &Proxy, headers: &HeaderMap) -> Option<Response> {
    let server = proxy.server();
    let Some(token) = &server.admin_token else {
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

/// `DELETE /-/cache/{remote}/{path}`: purges one path — and every variant
/// it is cached as, for a content-negotiated document — with each blob no
/// other path shares, and cancels its fills in progress (their readers get
/// their bytes; nothing of them is kept): the next request goes upstream.
pub async fn delete(State(proxy): State<Arc<Proxy>>, uri: Uri, headers: HeaderMap) -> Response {
    if let Some(refusal) = refuse(&proxy, &headers) {
        return refusal;
    }
    // The raw path, normalised as requests are, so the key is theirs.
    let raw = uri.path().strip_prefix("/-/cache").unwrap_or_default();
    let path = match ArtifactPath::parse(raw) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let Some(remote) = proxy.remote(path.remote()) else {
        return ProxyError::UnknownRemote(path.remote().to_string()).into_response();
    };
    let variants = remote.config.kind.variants(path.path());
    let keys =
        std::iter::once(path.clone()).chain(variants.iter().map(|v| path.with_variant(v.suffix)));
    let (mut entries, mut freed, mut cancelled) = (0, 0, 0);
    for key in keys {
        match proxy.fills.purge(&Scope::Key(key.key().to_string())).await {
            Ok(report) => {
                entries += report.purged.entries;
                freed += report.purged.freed;
                cancelled += report.fills_cancelled;
            }
            Err(e) => return e.into_response(),
        }
    }
    tracing::info!(
        key = path.key(),
        entries,
        freed,
        fills_cancelled = cancelled,
        "admin: removed"
    );
    Json(json!({
        "removed": entries > 0 || cancelled > 0,
        "entries": entries,
        "freed_bytes": freed,
        "fills_cancelled": cancelled,
    }))
    .into_response()
}

/// `POST /-/cache/{remote}/purge`: purges every path of a remote, fills in
/// progress included.
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
    let report = match proxy.fills.purge(&Scope::Remote(remote.clone())).await {
        Ok(report) => report,
        Err(e) => return e.into_response(),
    };
    let (purged, cancelled) = (report.purged, report.fills_cancelled);
    tracing::info!(
        remote,
        entries = purged.entries,
        blobs = purged.blobs,
        freed = purged.freed,
        fills_cancelled = cancelled,
        "admin: purged"
    );
    Json(json!({
        "remote": remote,
        "entries": purged.entries,
        "blobs": purged.blobs,
        "freed_bytes": purged.freed,
        "fills_cancelled": cancelled,
    }))
    .into_response()
}
