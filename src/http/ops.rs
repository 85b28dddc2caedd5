//! Operations endpoints: `/-/health`, `/-/ready`, `/-/status`, `/-/metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;

use super::snapshot::Snapshot;
use crate::clock::now_ms;
use crate::metrics::MirrorLabels;
use crate::proxy::Proxy;

/// 200 once the process serves HTTP.
pub async fn health() -> &'static str {
    "ok\n"
}

/// 200 when the metadata database answers, 503 otherwise.
pub async fn ready(State(proxy): State<Arc<Proxy>>) -> Response {
    if proxy.cache.meta.db.ping().await {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "metadata database unreachable\n",
        )
            .into_response()
    }
}

/// Remotes with their counts, mirrors with their in-flight gauge, health
/// and latency, the store, fills in progress and recent errors (the
/// dashboard's [`Snapshot`]). Never shows credentials: only names, URLs and
/// counts. With `[auth]`, only the remotes the caller may read.
pub async fn status(
    State(proxy): State<Arc<Proxy>>,
    peer: Option<Extension<super::access::Peer>>,
    headers: HeaderMap,
) -> Result<Json<Snapshot>, crate::error::ProxyError> {
    let peer = peer.map(|Extension(p)| p);
    super::access::snapshot_for(&proxy, &headers, peer.as_ref())
        .await
        .map(Json)
}

/// Prometheus (OpenMetrics) text. Gauges of state held elsewhere are read
/// now. With `[auth]`, without the series of remotes the caller may not read.
pub async fn metrics(
    State(proxy): State<Arc<Proxy>>,
    peer: Option<Extension<super::access::Peer>>,
    headers: HeaderMap,
) -> Response {
    let now = now_ms();
    let metrics = &proxy.metrics;
    for remote in proxy.remotes().values() {
        for (mirror, health) in remote
            .mirror_sets()
            .flat_map(|set| set.mirrors.iter().zip(&set.health))
        {
            let labels = MirrorLabels {
                remote: remote.name.clone(),
                mirror: mirror.base().to_string(),
            };
            metrics
                .mirror_in_flight
                .get_or_create(&labels)
                .set(mirror.in_flight() as i64);
            metrics
                .mirror_healthy
                .get_or_create(&labels)
                .set(i64::from(health.selectable(now)));
        }
    }
    metrics.store_bytes.set(proxy.cache.size() as i64);
    metrics.fills_in_progress.set(proxy.fills.len() as i64);
    let peer = peer.map(|Extension(p)| p);
    let text =
        match super::access::metrics_for(&proxy, &headers, peer.as_ref(), metrics.encode()).await {
            Ok(text) => text,
            Err(error) => return error.into_response(),
        };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
