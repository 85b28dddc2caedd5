//! Upstream fetches: one GET per attempt, in the order the selector gives,
//! failing over to the next mirror on connect errors, timeouts and error
//! statuses until the remote's attempt budget is spent.

use std::time::{Duration, Instant};

use axum::http::{header, StatusCode};
use reqwest::redirect;

use crate::config::RemoteConfig;
use crate::error::{AttemptError, ProxyError};
use crate::remote::Remote;
use crate::select::{InflightGuard, Mirror};

/// Hops a redirect chain may take (each to one of the remote's own hosts).
const MAX_REDIRECTS: usize = 5;

/// The HTTP client of one remote. Redirects are followed only to hosts (and
/// ports) of that remote's mirrors, so a mirror cannot point the proxy at an
/// arbitrary address.
pub fn client_for(config: &RemoteConfig) -> Result<reqwest::Client, reqwest::Error> {
    let allowed: Vec<(String, Option<u16>)> = config
        .mirrors
        .iter()
        .map(|u| {
            (
                u.host_str().unwrap_or_default().to_ascii_lowercase(),
                u.port_or_known_default(),
            )
        })
        .collect();
    let policy = redirect::Policy::custom(move |attempt| {
        let url = attempt.url();
        let target = (
            url.host_str().unwrap_or_default().to_ascii_lowercase(),
            url.port_or_known_default(),
        );
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error("too many redirects")
        } else if allowed.contains(&target) {
            attempt.follow()
        } else {
            // Returned as the 3xx it is: a failed attempt, and the next mirror is tried.
            attempt.stop()
        }
    });
    reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .redirect(policy)
        .pool_idle_timeout(Duration::from_secs(60))
        .tcp_nodelay(true)
        .user_agent(concat!("mirrorcache/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Validators of a cached copy, sent when revalidating it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Validators<'a> {
    pub etag: Option<&'a str>,
    pub last_modified: Option<&'a str>,
}

impl Validators<'_> {
    fn any(&self) -> bool {
        self.etag.is_some() || self.last_modified.is_some()
    }
}

/// What a successful fetch brought back.
pub enum Fetched<'r> {
    /// A 200 whose body is still to be read; the guard keeps the mirror's
    /// in-flight count up until the body is done.
    Body {
        response: reqwest::Response,
        mirror: &'r Mirror,
        guard: InflightGuard<'r>,
    },
    /// A 304: the cached copy is still current.
    NotModified { mirror: &'r Mirror },
}

/// Fetches `path` from the remote's mirrors, failing over as needed.
pub async fn fetch<'r>(
    remote: &'r Remote,
    path: &str,
    validators: Validators<'_>,
) -> Result<Fetched<'r>, ProxyError> {
    let order = remote.selector.order_accepting(&remote.mirrors, |_| true);
    let mut attempts = 0;
    let mut not_found: Option<u16> = None;
    let mut n_not_found = 0;
    let mut last_error: Option<AttemptError> = None;
    for mirror_idx in order.cycle().take(remote.max_attempts) {
        let mirror: &Mirror = &remote.mirrors[mirror_idx];
        attempts += 1;
        let guard = mirror.begin_attempt();
        let mut request = remote.client.get(mirror.url_for(path));
        if let Some(etag) = validators.etag {
            request = request.header(header::IF_NONE_MATCH, etag);
        }
        if let Some(date) = validators.last_modified {
            request = request.header(header::IF_MODIFIED_SINCE, date);
        }
        let sent_at = Instant::now();
        let outcome = tokio::time::timeout(remote.first_byte_timeout, request.send()).await;
        // Feeds `fastest`; a failure weighs as the whole timeout, so that a
        // mirror failing fast never looks fast.
        let answered = matches!(&outcome, Ok(Ok(r)) if !r.status().is_server_error());
        let first_byte = if answered {
            sent_at.elapsed()
        } else {
            remote.first_byte_timeout
        };
        mirror.observe_first_byte(first_byte, remote.selector.first_byte_decay());
        let error = match outcome {
            Err(_) => AttemptError::FirstByteTimeout(remote.first_byte_timeout),
            Ok(Err(e)) if e.is_connect() => AttemptError::Connect(e.without_url().to_string()),
            Ok(Err(e)) => AttemptError::Request(e.without_url().to_string()),
            Ok(Ok(response)) => match response.status() {
                StatusCode::OK => {
                    return Ok(Fetched::Body {
                        response,
                        mirror,
                        guard,
                    })
                }
                StatusCode::NOT_MODIFIED if validators.any() => {
                    return Ok(Fetched::NotModified { mirror })
                }
                status @ (StatusCode::NOT_FOUND | StatusCode::GONE) => {
                    not_found.get_or_insert(status.as_u16());
                    n_not_found += 1;
                    AttemptError::Status(status.as_u16())
                }
                status => AttemptError::Status(status.as_u16()),
            },
        };
        tracing::debug!(remote = %remote.name, mirror = mirror.base(), path, %error, "attempt failed");
        last_error = Some(error);
    }
    let last = last_error.expect("max_attempts >= 1, so at least one attempt ran");
    // Only when every attempt ended in "not found" is the answer a 404 (or 410):
    // a mirror that was down might have had the file.
    match not_found {
        Some(status) if n_not_found == attempts => Err(ProxyError::NotFound { status }),
        _ => Err(ProxyError::MirrorsFailed { attempts, last }),
    }
}
