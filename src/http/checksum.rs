//! Checksum paths (Maven's `x.jar.sha1`, `.md5`, `.sha256`, `.sha512`):
//! answered from the bytes this proxy serves for the file itself, through
//! the cache like any request for it (filtered, for a document), so a file
//! and its checksum never disagree and a checksum the mirror lacks is still
//! answered. Each file is hashed once per process and function
//! (`Proxy::checksums`, keyed by the file's ETag).

use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;

use super::respond::X_CACHE_STATUS;
use super::Served;
use crate::error::ProxyError;
use crate::kind::declared::{Algo, Declared, Hashers};
use crate::path::ArtifactPath;
use crate::proxy::Proxy;
use crate::upstream::Remote;

/// The checksum in `algo` of the file `of` (a path below the remote).
pub(super) async fn serve(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    of: &str,
    algo: Algo,
) -> Result<Served, ProxyError> {
    let file = ArtifactPath::parse(&format!("/{}/{of}", remote.name))?;
    // Boxed: a checksum of a checksum asks this function again.
    let inner = Box::pin(super::serve(
        proxy,
        remote,
        &file,
        &Method::GET,
        &HeaderMap::new(),
    ))
    .await?;
    let status = inner.response.status();
    if status != StatusCode::OK {
        return Ok(inner);
    }
    let cache_status = inner.response.headers().get(X_CACHE_STATUS).cloned();
    let etag = inner
        .response
        .headers()
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let memo = etag.map(|etag| (etag, algo.name()));
    let hex = match memo.as_ref().and_then(|key| proxy.checksums.get(key)) {
        Some(hex) => hex,
        None => {
            let hex = hash_body(inner.response, algo).await?.hex();
            if let Some(key) = memo {
                proxy.checksums.insert(key, hex.clone());
            }
            hex
        }
    };
    let mut response = hex.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    if let Some(status) = cache_status {
        headers.insert(X_CACHE_STATUS, status);
    }
    Ok(Served {
        response,
        cache: inner.cache,
        mirror: inner.mirror,
    })
}

/// The digest in `algo` of a response's body, hashed a chunk at a time off
/// the async threads.
async fn hash_body(response: Response, algo: Algo) -> Result<Declared, ProxyError> {
    let mut hashers = Hashers::with(Some(algo));
    let mut body = response.into_body().into_data_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| ProxyError::Store(e.to_string()))?;
        hashers = tokio::task::spawn_blocking(move || {
            hashers.update(&chunk);
            hashers
        })
        .await
        .map_err(|e| ProxyError::Store(e.to_string()))?;
    }
    Ok(hashers.finish().1)
}
