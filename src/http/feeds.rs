//! The advisory feeds' refresh: every `refresh`, each `[[advisories]]` feed
//! is asked of its own remote (`advisories.{name}`, whose mirrors are the
//! feed's URLs) as a client's GET is asked ([`serve`]): a hit while the
//! cached copy is fresh, else the fill with its selection, health, hedging,
//! failover and outbound settings, and a conditional request upstream for
//! a stale copy. The request carries the digest this loop last read as
//! `If-None-Match`, so an unchanged export is answered 304 and read again
//! by nobody. New bytes go to [`Advisories::take`]; bytes that are no
//! usable export are purged from the cache, so they are never served
//! again as the feed, and count against the URL that sent them, so the
//! next URL is asked.
//!
//! [`Advisories::take`]: crate::advisories::Advisories::take

use std::sync::{Arc, Weak};

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};

use super::record::Answered;
use super::serve;
use crate::cache::Digest;
use crate::cache::Scope;
use crate::config::AdvisoryFeed;
use crate::metrics::CacheStatus;
use crate::path::ArtifactPath;
use crate::proxy::Proxy;
use crate::upstream::fetch::record_failure;
use crate::upstream::Remote;

/// Refreshes `feed` at once, then every `feed.refresh`, while `proxy` lives.
pub async fn refresh_loop(proxy: Weak<Proxy>, feed: AdvisoryFeed) {
    // The export in force at start (the saved copy) is not read again
    // when the cache holds the same bytes.
    let mut seen = proxy
        .upgrade()
        .and_then(|p| p.advisories.digest_in_force(&feed.name));
    loop {
        let Some(proxy) = proxy.upgrade() else {
            return;
        };
        if let Err(error) = refresh(&proxy, &feed, &mut seen).await {
            proxy.advisories.failed(&feed.name, error);
        }
        drop(proxy);
        tokio::time::sleep(feed.refresh).await;
    }
}

/// One refresh of `feed`: what its remote answers, read when its digest
/// is not `seen` (then updated). A body that is no usable export is
/// purged from the cache and counts as a failure of the URL that sent it
/// (a feed's remote ejects a URL at its first failure), so the feed is
/// asked again and the next URL answers: each URL once at most. An error
/// says why nothing was put in force.
async fn refresh(
    proxy: &Arc<Proxy>,
    feed: &AdvisoryFeed,
    seen: &mut Option<Digest>,
) -> Result<(), String> {
    let name = feed.remote_name();
    let remote = proxy
        .remote(&name)
        .ok_or_else(|| format!("no remote {name:?}"))?;
    let path = ArtifactPath::parse(&format!("/{name}/{}", AdvisoryFeed::PATH))
        .map_err(|e| e.to_string())?;
    // Why each URL's bytes were unusable: kept in the error of a later
    // ask that fails, so the status still says what was wrong with them.
    let mut unusable: Vec<String> = Vec::new();
    for _ in 0..remote.index.mirrors.len() {
        let asked = match ask(proxy, &remote, &path, feed, seen).await {
            Ok(asked) => asked,
            Err(error) => {
                unusable.push(error);
                return Err(unusable.join("; then "));
            }
        };
        let Some(Unusable { mirror, error }) = asked else {
            return Ok(());
        };
        let _ = proxy.fills.purge(&Scope::Key(path.key().to_string())).await;
        let set = &remote.index;
        // Bytes from the cache (another instance's fill) blame no URL: the
        // purge alone makes the next ask go upstream.
        if let Some(mirror_idx) =
            mirror.and_then(|m| set.mirrors.iter().position(|x| x.base() == m))
        {
            record_failure(&remote, set, mirror_idx, &error);
        }
        unusable.push(error);
    }
    Ok(())
}

/// Bytes a feed's URL sent that are no usable export (already recorded in
/// the feed's status).
struct Unusable {
    /// The URL that sent them; `None` when they came from the cache.
    mirror: Option<String>,
    error: String,
}

/// Asks `feed`'s remote for it once, puts new bytes in force, and says
/// whether they were unusable.
async fn ask(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    path: &ArtifactPath,
    feed: &AdvisoryFeed,
    seen: &mut Option<Digest>,
) -> Result<Option<Unusable>, String> {
    let mut headers = HeaderMap::new();
    if let Some(digest) = seen {
        let tag = HeaderValue::from_str(&format!("\"{}\"", digest.to_hex()));
        headers.insert(header::IF_NONE_MATCH, tag.expect("hex is a valid header"));
    }
    let started = std::time::Instant::now();
    let served = serve(proxy, remote, path, &Method::GET, &headers)
        .await
        .map_err(|e| format!("{}: {e}", path.key()))?;
    let status = served.response.status();
    // Logged and counted against the feed's remote as a client's request is.
    let answered = Answered {
        remote: Some(remote),
        cache: Some(served.cache),
        mirror: served.mirror.as_deref(),
        error: None,
        user: None,
        peer: None,
    };
    let uri = Uri::try_from(format!("/{}", path.key())).map_err(|e| e.to_string())?;
    answered.record(proxy, &Method::GET, &uri, started, &served.response);
    if served.cache == CacheStatus::Stale {
        // Every URL failed: what the cache kept is not newer than the
        // index in force (and may be older than an import).
        return Err(format!(
            "{}: no URL answered; the index in force stays",
            path.key()
        ));
    }
    if status == StatusCode::NOT_MODIFIED {
        proxy.advisories.unchanged(&feed.name);
        return Ok(None);
    }
    if !status.is_success() {
        return Err(format!("{}: answered {status}", path.key()));
    }
    let body = served.response.into_body();
    let bytes = axum::body::to_bytes(body, remote.config.max_body_size as usize)
        .await
        .map_err(|e| format!("{}: {e}", path.key()))?;
    let digest = Digest::of(&bytes);
    if *seen == Some(digest) {
        proxy.advisories.unchanged(&feed.name);
        return Ok(None);
    }
    let source = served
        .mirror
        .clone()
        .unwrap_or_else(|| format!("the cache ({})", path.key()));
    match proxy
        .advisories
        .take(&feed.name, bytes, digest, &source)
        .await
    {
        Ok(_) => {
            *seen = Some(digest);
            Ok(None)
        }
        Err(error) => Ok(Some(Unusable {
            mirror: served.mirror,
            error,
        })),
    }
}
