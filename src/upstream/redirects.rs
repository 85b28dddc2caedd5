//! The redirects of a `Protocol::SignedRedirects` remote (the Hugging Face
//! hub), followed here hop by hop rather than by reqwest: a hop to one of the
//! remote's mirrors carries its credentials, a hop to one of its `files`
//! hosts (a CDN with a signed URL, whose query is the authority) carries
//! none, and any other target ends the chain as the 3xx it is (a failed
//! attempt). The headers the ecosystem keeps (`Ecosystem::kept_headers`) are
//! read from the mirror's own answers and put on the final one, so that what
//! the fill stores describes the file, not the CDN's copy of it.

use axum::http::{header, HeaderMap, HeaderName, StatusCode};
use url::Url;

use super::outbound::{authorize, Validators};
use super::Remote;
use crate::config::origin;

/// Hops a chain may take.
const MAX_HOPS: usize = 5;

/// Where a redirect points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// One of the remote's mirrors: credentials go along.
    Mirror,
    /// One of its `files` hosts: no credentials.
    Files,
    Elsewhere,
}

fn target_of(remote: &Remote, url: &Url) -> Target {
    let wanted = origin(url);
    if remote.config.mirrors.iter().any(|m| origin(m) == wanted) {
        Target::Mirror
    } else if remote.config.files.iter().any(|m| origin(m) == wanted) {
        Target::Files
    } else {
        Target::Elsewhere
    }
}

/// Sends `request` (to a mirror of `remote`, for `path`) and follows its
/// redirects. When revalidating, a redirect whose `ETag` is the cached
/// copy's ends the chain as a 304: the file it points to is the one cached.
pub(super) async fn send_following(
    remote: &Remote,
    path: &str,
    request: reqwest::RequestBuilder,
    validators: Validators<'_>,
) -> reqwest::Result<reqwest::Response> {
    let names = remote.config.kind.ecosystem().kept_headers(path);
    let mut kept = HeaderMap::new();
    let mut response = request.send().await?;
    let mut last = Target::Mirror;
    for _ in 0..MAX_HOPS {
        if !response.status().is_redirection() || last == Target::Files {
            break;
        }
        let Some(location) = response
            .headers()
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| response.url().join(l).ok())
        else {
            break;
        };
        let target = target_of(remote, &location);
        if target == Target::Elsewhere {
            tracing::debug!(remote = %remote.name, "redirect to a host that is not the remote's; not followed");
            break;
        }
        keep(names, response.headers(), &mut kept);
        if let (Some(ours), Some(theirs)) = (validators.etag, response.headers().get(header::ETAG))
        {
            if theirs.as_bytes() == ours.as_bytes() {
                let not_modified = axum::http::Response::builder()
                    .status(StatusCode::NOT_MODIFIED)
                    .body(Vec::<u8>::new())
                    .expect("a status and no header is a valid response");
                return Ok(reqwest::Response::from(not_modified));
            }
        }
        let next = remote
            .client()
            .get(location)
            .header(header::ACCEPT_ENCODING, "identity");
        response = match target {
            Target::Mirror => authorize(next, &remote.config.auth),
            _ => next,
        }
        .send()
        .await?;
        last = target;
    }
    if response.status().is_success() {
        // A files host's own validators describe its copy: the mirror's win.
        let files_answer = last == Target::Files;
        for (name, value) in &kept {
            if files_answer || !response.headers().contains_key(name) {
                response.headers_mut().insert(name.clone(), value.clone());
            }
        }
    }
    Ok(response)
}

/// Copies the headers `names` of one answer into `kept`, replacing an
/// earlier hop's.
fn keep(names: &[&str], from: &HeaderMap, kept: &mut HeaderMap) {
    for name in names {
        let Some(value) = from.get(*name) else {
            continue;
        };
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        kept.insert(name, value.clone());
    }
}
