//! Operations endpoints: `/-/health`, `/-/ready`, `/-/status`, `/-/metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::clock::now_ms;
use crate::metrics::MirrorLabels;
use crate::proxy::Proxy;

/// 200 once the process serves HTTP.
pub async fn health() -> &'static str {
    "ok\n"
}

/// 200 when the metadata database answers, 503 otherwise.
pub async fn ready(State(proxy): State<Arc<Proxy>>) -> Response {
    if proxy.cache.meta.ping().await {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "metadata database unreachable\n",
        )
            .into_response()
    }
}

/// Remotes, mirrors with their in-flight gauge and health, and hit ratios.
/// Never shows credentials: only names, URLs and counts.
pub async fn status(State(proxy): State<Arc<Proxy>>) -> Json<serde_json::Value> {
    let now = now_ms();
    let remotes = proxy.remotes();
    let mut names: Vec<&String> = remotes.keys().collect();
    names.sort();
    let (mut all_hits, mut all_total) = (0, 0);
    let remotes_json: Vec<_> = names
        .into_iter()
        .map(|name| {
            let remote = &remotes[name];
            let (hits, total) = remote.counters.hits_and_total();
            all_hits += hits;
            all_total += total;
            let mirrors: Vec<_> = remote
                .mirror_sets()
                .flat_map(|set| set.mirrors.iter().zip(&set.health))
                .map(|(mirror, health)| {
                    json!({
                        "url": mirror.base(),
                        "in_flight": mirror.in_flight(),
                        "health": health.state(now).as_str(),
                        "consecutive_failures": health.consecutive_failures(),
                    })
                })
                .collect();
            json!({
                "name": name,
                "kind": remote.config.kind.as_str(),
                "strategy": format!("{:?}", remote.config.strategy),
                "mirrors": mirrors,
                "requests": total,
                "hit_ratio": ratio(hits, total),
            })
        })
        .collect();
    Json(json!({
        "remotes": remotes_json,
        "hit_ratio": ratio(all_hits, all_total),
        "store_bytes": proxy.cache.size(),
        "store_max_bytes": proxy.cache.max_size(),
        "fills_in_progress": proxy.fills.len(),
    }))
}

fn ratio(hits: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        hits as f64 / total as f64
    }
}

/// Prometheus (OpenMetrics) text. Gauges of state held elsewhere are read now.
pub async fn metrics(State(proxy): State<Arc<Proxy>>) -> Response {
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
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
        .into_response()
}
