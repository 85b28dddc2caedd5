//! Upstream fetches: one GET per attempt, in the order the selector gives,
//! failing over to the next mirror on connect errors, timeouts and error
//! statuses until the remote's attempt budget is spent.

use std::time::{Duration, Instant};

use axum::http::{header, StatusCode};
use futures_util::stream::{FuturesUnordered, StreamExt};
use reqwest::redirect;

use super::hedge;
use super::outbound::LeaveFor;
pub use super::outbound::Validators;
use super::select::{InflightGuard, Mirror};
use super::{MirrorSet, Remote};
use crate::clock::now_ms;
use crate::config::RemoteConfig;
use crate::error::{AttemptError, ProxyError};
use crate::kind::Protocol;

/// Hops a redirect chain may take (each to one of the remote's own hosts).
const MAX_REDIRECTS: usize = 5;

/// The HTTP client of one remote. Redirects are followed only to hosts (and
/// ports) of that remote's mirrors, so a mirror cannot point the proxy at an
/// arbitrary address — except a registry remote's (`Protocol::Registry`): registries send blob GETs to
/// storage hosts (a CDN, S3) by redirect. Those are followed to other hosts
/// as [`may_leave_for`] allows, without credentials (reqwest drops
/// `Authorization` when the host changes), and what comes back is still
/// checked against the digest.
pub fn client_for(
    config: &RemoteConfig,
    tls: rustls::ClientConfig,
) -> Result<reqwest::Client, reqwest::Error> {
    let protocol = config.kind.ecosystem().protocol();
    let anywhere = matches!(protocol, Protocol::Registry | Protocol::LfsActions);
    let leave_for = LeaveFor::of(config);
    let allowed: Vec<(String, Option<u16>)> = config
        .mirrors
        .iter()
        .chain(&config.files)
        .chain(&config.sumdb)
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
        } else if allowed.contains(&target) || (anywhere && leave_for.allows(url)) {
            attempt.follow()
        } else {
            // Returned as the 3xx it is: a failed attempt, and the next mirror is tried.
            attempt.stop()
        }
    });
    // Followed hop by hop in `send_following` instead.
    let policy = match protocol {
        Protocol::SignedRedirects => redirect::Policy::none(),
        Protocol::Plain | Protocol::Registry | Protocol::LfsActions => policy,
    };
    reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .redirect(policy)
        .use_preconfigured_tls(tls)
        .pool_idle_timeout(Duration::from_secs(60))
        .tcp_nodelay(true)
        .user_agent(concat!("mirrorcache/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// What a successful fetch brought back.
pub enum Fetched<'r> {
    /// A 200 whose body is still to be read.
    Body(Body<'r>),
    /// A 304: the cached copy is still current.
    NotModified { mirror: &'r Mirror },
}

/// A 200 from one mirror, its body still to be read. The guard keeps the
/// mirror's in-flight count up until this is dropped.
pub struct Body<'r> {
    pub response: reqwest::Response,
    pub mirror_idx: usize,
    pub set: &'r MirrorSet,
    pub mirror: &'r Mirror,
    pub guard: InflightGuard<'r>,
}

/// Fetches `path` from the remote's mirrors, failing over as needed.
///
/// Ejected mirrors are skipped (unless every mirror is ejected), a mirror on
/// probation takes one request at a time, and a mirror at its in-flight
/// limit is passed over. An attempt that fails makes way for the next mirror
/// at once; one that has not sent its response head within the hedge delay
/// ([`hedge::delay`]) gets the next mirror started beside it, and the first
/// head wins: the others are cancelled and count as (slow) failures. Every
/// attempt's outcome feeds the mirror's health.
pub async fn fetch<'r>(
    remote: &'r Remote,
    path: &str,
    validators: Validators<'_>,
    accept: Option<&str>,
) -> Result<Fetched<'r>, ProxyError> {
    fetch_avoiding(remote, path, validators, accept, &[]).await
}

/// [`fetch`], never asking the mirrors (indices into the path's mirror set)
/// in `avoid`: those whose body this fill already refused.
pub async fn fetch_avoiding<'r>(
    remote: &'r Remote,
    path: &str,
    validators: Validators<'_>,
    accept: Option<&str>,
    avoid: &[usize],
) -> Result<Fetched<'r>, ProxyError> {
    // A 204 is an empty body with the headers the ecosystem keeps (a
    // module's `X-Terraform-Get`) for a path it keeps headers of.
    let headers_answer = !remote.config.kind.ecosystem().kept_headers(path).is_empty();
    let (set, path) = remote.route(path);
    let path: &str = &path;
    remote.counters.fetches.inc();
    let now = now_ms();
    let any_selectable = set.health.iter().any(|h| h.selectable(now));
    let order = set
        .selector
        .order_accepting(&set.mirrors, |i| set.health[i].selectable(now));
    // A mirror that answered 429 is not asked before its `Retry-After`;
    // with every one of them waiting, nothing is asked.
    let soonest = set.health.iter().try_fold(i64::MAX, |soonest, h| {
        h.rate_limited_until_ms(now).map(|until| soonest.min(until))
    });
    if let Some(until) = soonest.filter(|&until| until < i64::MAX) {
        // What they said when they asked.
        let said = set.health.iter().find_map(|h| h.rate_limit_message());
        return Err(ProxyError::RateLimited {
            retry_after: u64::try_from((until - now + 999) / 1000)
                .unwrap_or(1)
                .max(1),
            message: match said {
                Some(said) => format!("{said} (every mirror asked not to be asked again yet)"),
                None => "every mirror asked not to be asked again yet (429)".to_string(),
            },
        });
    }
    let mut candidates = order.cycle().take(remote.config.max_attempts);
    let mut running = FuturesUnordered::new();
    // (mirror index, start) of each attempt in `running`.
    let mut started: Vec<(usize, Instant)> = Vec::with_capacity(2);
    let mut tally = Tally::default();
    let mut hedge_at: Option<tokio::time::Instant> = None;
    loop {
        if running.is_empty() || hedge_at.is_some_and(|at| at <= tokio::time::Instant::now()) {
            let next = candidates.by_ref().find(|&mirror_idx| {
                let mirror: &Mirror = &set.mirrors[mirror_idx];
                !started.iter().any(|&(i, _)| i == mirror_idx)
                    && !avoid.contains(&mirror_idx)
                    && !set.health[mirror_idx].rate_limited(now)
                    && remote
                        .config
                        .mirror_max_in_flight
                        .is_none_or(|limit| mirror.in_flight() < limit)
                    && (!any_selectable || set.health[mirror_idx].try_begin(now))
            });
            match next {
                Some(mirror_idx) => {
                    if !running.is_empty() {
                        remote.counters.hedges.inc();
                        tracing::debug!(remote = %remote.name, mirror = set.mirrors[mirror_idx].base(), path, "hedging");
                    }
                    let request = request_for(remote, set, mirror_idx, path, validators, accept);
                    running.push(attempt(remote, set, mirror_idx, path, request, validators));
                    started.push((mirror_idx, Instant::now()));
                    // No timer when no other mirror could be started beside
                    // this one (a set of one mirror): nothing to hedge with.
                    let another = (0..set.mirrors.len())
                        .any(|i| !avoid.contains(&i) && !started.iter().any(|&(s, _)| s == i));
                    hedge_at = another
                        .then(|| hedge::delay(remote, set, mirror_idx))
                        .flatten()
                        .map(|delay| tokio::time::Instant::now() + delay);
                }
                None if running.is_empty() => break,
                None => hedge_at = None,
            }
        }
        let finished = match hedge_at {
            Some(at) => tokio::select! {
                finished = running.next() => finished,
                () = tokio::time::sleep_until(at) => continue,
            },
            None => running.next().await,
        };
        let Some(finished) = finished else { continue };
        started.retain(|&(i, _)| i != finished.mirror_idx);
        match judge(
            remote,
            set,
            finished,
            validators,
            headers_answer,
            &mut tally,
        ) {
            Some(fetched) => {
                // The first head wins; the attempts still waiting are cancelled
                // (dropping them releases their in-flight guards) and count as
                // slow failures, so a hung mirror is still ejected.
                for (mirror_idx, at) in started {
                    set.mirrors[mirror_idx]
                        .observe_first_byte(at.elapsed(), set.selector.first_byte_decay());
                    record_failure(remote, set, mirror_idx, &"slower than a hedged attempt");
                }
                return Ok(fetched);
            }
            // A failure makes way for the next mirror at once.
            None => hedge_at = Some(tokio::time::Instant::now()),
        }
    }
    tally.into_error()
}

/// The outcomes of the attempts that ended without a usable answer.
#[derive(Default)]
struct Tally {
    attempts: usize,
    not_found: Option<u16>,
    n_not_found: usize,
    /// Attempts answered 429, the longest `Retry-After` and the message.
    rate_limited: usize,
    retry_after: Duration,
    limit_message: Option<String>,
    last_error: Option<AttemptError>,
}

impl Tally {
    fn into_error<T>(self) -> Result<T, ProxyError> {
        let Some(last) = self.last_error else {
            return Err(ProxyError::MirrorsBusy);
        };
        // Every mirror limits this proxy: the client is told so, and when.
        if self.rate_limited == self.attempts {
            return Err(ProxyError::RateLimited {
                retry_after: self.retry_after.as_secs().max(1),
                message: self
                    .limit_message
                    .unwrap_or_else(|| "Too Many Requests".to_string()),
            });
        }
        // Only when every attempt ended in "not found" is the answer a 404 (or
        // 410): a mirror that was down might have had the file.
        match self.not_found {
            Some(status) if self.n_not_found == self.attempts => {
                Err(ProxyError::NotFound { status })
            }
            _ => Err(ProxyError::MirrorsFailed {
                attempts: self.attempts,
                last,
            }),
        }
    }
}

/// The GET for one attempt, with credentials, the variant's `Accept` and the
/// validators of a stale copy.
fn request_for(
    remote: &Remote,
    set: &MirrorSet,
    mirror_idx: usize,
    path: &str,
    validators: Validators<'_>,
    accept: Option<&str>,
) -> reqwest::RequestBuilder {
    let mirror = &set.mirrors[mirror_idx];
    // The cache stores and hashes the bytes of the artifact itself. A mirror
    // that encodes anyway is decoded by the client (gzip, deflate); any
    // other encoding is refused by the fill.
    // An oci remote's credentials go to its token service (`token::send`).
    let get = match mirror.parsed_url_for(path) {
        Ok(url) => remote.client().get(url),
        // The text, so that reqwest reports its parse error as before.
        Err(_) => remote.client().get(mirror.url_for(path)),
    };
    // An LFS object's request is made by `lfs::send`, at its action's `href`.
    let mut request = match remote.config.kind.ecosystem().protocol() {
        Protocol::Registry | Protocol::LfsActions => get,
        Protocol::Plain | Protocol::SignedRedirects => remote.authorize(get, set, mirror_idx),
    }
    .header(header::ACCEPT_ENCODING, "identity");
    if let Some(accept) = accept {
        request = request.header(header::ACCEPT, accept);
    }
    if let Some(etag) = validators.etag {
        request = request.header(header::IF_NONE_MATCH, etag);
    }
    if let Some(date) = validators.last_modified {
        request = request.header(header::IF_MODIFIED_SINCE, date);
    }
    request
}

/// One attempt in flight: its in-flight guard is held from the start.
struct Attempt<'r> {
    mirror_idx: usize,
    guard: InflightGuard<'r>,
    started: Instant,
    outcome: Result<reqwest::Result<reqwest::Response>, tokio::time::error::Elapsed>,
    /// A 429's message, read from the start of its body.
    limit_message: Option<String>,
}

async fn attempt<'r>(
    remote: &'r Remote,
    set: &'r MirrorSet,
    mirror_idx: usize,
    path: &str,
    request: reqwest::RequestBuilder,
    validators: Validators<'_>,
) -> Attempt<'r> {
    let guard = set.mirrors[mirror_idx].begin_attempt();
    let started = Instant::now();
    // The plain GET inline; the others (2 KB for a registry's token
    // exchange) each a box of its own, so the attempt moved into
    // `running` for every miss is the size of the plain one.
    let send = async {
        match remote.config.kind.ecosystem().protocol() {
            Protocol::Plain => request.send().await,
            Protocol::Registry => {
                let base = set.mirrors[mirror_idx].base();
                Box::pin(super::token::send(remote, base, path, request)).await
            }
            Protocol::LfsActions => Box::pin(super::lfs::send(remote, set, mirror_idx, path)).await,
            Protocol::SignedRedirects => {
                Box::pin(super::redirects::send_following(
                    remote, path, request, validators,
                ))
                .await
            }
        }
    };
    let mut outcome = tokio::time::timeout(remote.config.first_byte_timeout, send).await;
    let mut limit_message = None;
    if let Ok(Ok(response)) = &mut outcome {
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            // A limit on the operator's account may name the account (Docker
            // Hub's "… as 'user': dckr_jti_…"): not for clients' eyes.
            let credentialed = !matches!(remote.config.auth, crate::config::UpstreamAuth::None)
                && set.credentials[mirror_idx];
            limit_message = Some(if credentialed {
                "the mirror's rate limit on the proxy's upstream account".to_string()
            } else {
                rate_limit_message(response).await
            });
        }
    }
    Attempt {
        mirror_idx,
        guard,
        started,
        outcome,
        limit_message,
    }
}

/// What a 429 says, for the client the proxy cannot serve: the message of a
/// registry's error JSON (`errors[0].message`, Docker Hub's "You have
/// reached your pull rate limit…"), or the first line of a text body; at
/// most 200 visible characters, read from the first 4 KiB within 2 s.
async fn rate_limit_message(response: &mut reqwest::Response) -> String {
    const MAX_READ: usize = 4096;
    let mut body = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while body.len() < MAX_READ {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
    })
    .await;
    body.truncate(MAX_READ);
    let text = String::from_utf8_lossy(&body);
    let from_json = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            v.pointer("/errors/0/message")
                .or_else(|| v.get("message"))
                .or_else(|| v.get("error"))
                .and_then(|m| m.as_str().map(str::to_string))
        });
    let message = from_json.unwrap_or_else(|| {
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("Too Many Requests")
            .to_string()
    });
    message
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(200)
        .collect()
}

/// `Retry-After` as a delay: seconds, or an HTTP date from now.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The pulls left that a mirror's `RateLimit-Remaining` states (`"76;w=21600"`).
fn ratelimit_remaining(headers: &reqwest::header::HeaderMap) -> Option<i64> {
    let value = headers.get("ratelimit-remaining")?.to_str().ok()?;
    value.split(';').next()?.trim().parse().ok()
}

/// Turns a finished attempt into the fetch's answer (a 200, a 204 when
/// `headers_answer`, or a 304 when revalidating), or records why it failed
/// and returns `None`.
fn judge<'r>(
    remote: &'r Remote,
    set: &'r MirrorSet,
    finished: Attempt<'r>,
    validators: Validators<'_>,
    headers_answer: bool,
    tally: &mut Tally,
) -> Option<Fetched<'r>> {
    let Attempt {
        mirror_idx,
        guard,
        started,
        outcome,
        limit_message,
    } = finished;
    let mirror: &Mirror = &set.mirrors[mirror_idx];
    let health = &set.health[mirror_idx];
    tally.attempts += 1;
    // Feeds `fastest` and the hedge delay; a failure weighs as the whole
    // timeout, so that a mirror failing fast never looks fast.
    let answered = matches!(&outcome, Ok(Ok(r)) if !r.status().is_server_error());
    let first_byte = if answered {
        started.elapsed()
    } else {
        remote.config.first_byte_timeout
    };
    mirror.observe_first_byte(first_byte, set.selector.first_byte_decay());
    let error = match outcome {
        Err(_) => AttemptError::FirstByteTimeout(remote.config.first_byte_timeout),
        Ok(Err(e)) if e.is_connect() => AttemptError::Connect(e.without_url().to_string()),
        Ok(Err(e)) => AttemptError::Request(e.without_url().to_string()),
        Ok(Ok(response)) => {
            set.metrics[mirror_idx].observe_first_byte(started.elapsed().as_secs_f64());
            let status = response.status();
            if !status.is_server_error() {
                // The mirror answered: it is up, whatever it said.
                health.record_success();
            }
            if let Some(left) = ratelimit_remaining(response.headers()) {
                set.metrics[mirror_idx].ratelimit_remaining.set(left);
            }
            let body =
                status == StatusCode::OK || (headers_answer && status == StatusCode::NO_CONTENT);
            match status {
                _ if body => {
                    return Some(Fetched::Body(Body {
                        response,
                        mirror_idx,
                        set,
                        mirror,
                        guard,
                    }))
                }
                StatusCode::NOT_MODIFIED if validators.any() => {
                    return Some(Fetched::NotModified { mirror })
                }
                StatusCode::TOO_MANY_REQUESTS => {
                    // Asked not to ask: the mirror is passed over until its
                    // `Retry-After` (else the ejection cooldown) is over.
                    let wait =
                        retry_after(response.headers()).unwrap_or(remote.config.health.cooldown);
                    health.rate_limit(now_ms() + wait.as_millis() as i64, limit_message.as_deref());
                    tally.rate_limited += 1;
                    tally.retry_after = tally.retry_after.max(wait);
                    tally.limit_message = limit_message;
                    AttemptError::Status(429)
                }
                StatusCode::NOT_FOUND | StatusCode::GONE => {
                    tally.not_found.get_or_insert(status.as_u16());
                    tally.n_not_found += 1;
                    AttemptError::Status(status.as_u16())
                }
                status => AttemptError::Status(status.as_u16()),
            }
        }
    };
    if !matches!(error, AttemptError::Status(s) if s < 500) {
        record_failure(remote, set, mirror_idx, &error);
    }
    tracing::debug!(remote = %remote.name, mirror = mirror.base(), %error, "attempt failed");
    tally.last_error = Some(error);
    None
}

/// Counts a failed attempt (or broken body) against a mirror's health.
pub fn record_failure(
    remote: &Remote,
    set: &MirrorSet,
    mirror_idx: usize,
    error: &dyn std::fmt::Display,
) {
    set.metrics[mirror_idx].failures.inc();
    set.metrics[mirror_idx].recent_errors.push(
        now_ms(),
        format!("{} {}", remote.name, set.mirrors[mirror_idx].base()),
        error.to_string(),
    );
    if let Some(cooldown) = set.health[mirror_idx].record_failure(&remote.config.health, now_ms()) {
        tracing::warn!(remote = %remote.name, mirror = set.mirrors[mirror_idx].base(), ?cooldown, %error, "mirror ejected");
    }
}
