//! `GET /-/advisories/{remote}/affected`: the cached artifacts of a remote
//! that an advisory of the feeds in force names, whatever the remote's
//! `quarantine` says (what a team must rebuild), as JSON. Read through the
//! access check every remote page passes.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;

use super::access::{self, Peer};
use crate::error::ProxyError;
use crate::proxy::Proxy;

/// Rows read from the metadata database at once.
const PAGE: usize = 1000;

/// One cached artifact an advisory names.
#[derive(Debug, Serialize)]
pub struct Affected {
    pub path: String,
    pub package: String,
    pub version: String,
    pub advisory: String,
    pub class: Option<&'static str>,
    pub summary: String,
}

pub async fn affected(
    State(proxy): State<Arc<Proxy>>,
    peer: Option<Extension<Peer>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let peer = peer.map(|Extension(p)| p);
    let Some(remote) = proxy.remote(&name) else {
        return ProxyError::UnknownRemote(name).into_response();
    };
    if let Err(refused) = access::admit(&proxy, &remote, &headers, peer.as_ref()).await {
        return refused.into_response();
    }
    let Some(packages) = remote.config.kind.packages() else {
        return Json(Vec::<Affected>::new()).into_response();
    };
    let advisories = proxy.advisories.current();
    let mut found = Vec::new();
    let mut after = String::new();
    loop {
        let page = match proxy.cache.meta.browse(&name, "", &after, PAGE).await {
            Ok(page) => page,
            Err(e) => return e.into_response(),
        };
        for row in &page.rows {
            let Some(artifact) = packages.artifact(&row.path) else {
                continue;
            };
            let normalised = packages.normalise(&artifact.name);
            for advisory in advisories
                .iter()
                .flat_map(|index| index.affecting(packages, &normalised, &artifact.version))
            {
                found.push(Affected {
                    path: row.path.clone(),
                    package: artifact.name.clone(),
                    version: artifact.version.clone(),
                    advisory: advisory.id.clone(),
                    class: advisory.class.map(|c| c.name()),
                    summary: advisory.summary.clone(),
                });
            }
        }
        match page.rows.last() {
            Some(last) if page.more => after = last.path.clone(),
            _ => break,
        }
    }
    Json(found).into_response()
}
