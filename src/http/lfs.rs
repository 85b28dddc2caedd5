//! An lfs remote's routes (`kind::lfs`). A download batch is answered from
//! the cache when the upstream said yes to this repository and credential
//! within `lfs_grant_ttl` and every object is cached; otherwise it is
//! forwarded (the client's `Authorization`, else the remote's credentials),
//! each download action kept server-side (`upstream::lfs::Actions`) and
//! answered with the proxy's URL and a grant (`access::lfs`). When no
//! mirror answers, an identity the upstream said yes to within `max_stale`
//! gets its cached objects; a client without credentials is asked for them
//! (401); any other is refused (503). An object's GET
//! needs its grant, then is served through the cache: its fill fetches the
//! action's `href` (`upstream::lfs::send`) and checks the body against the
//! oid. Uploads are 405, or
//! forwarded as sent with `lfs_uploads = "pass"`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;

use super::Served;
use crate::access::lfs::LfsGrants;
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::kind::lfs::batch::{self, Reply, Request};
use crate::kind::lfs::{self, GRANT_HEADER, MEDIA_TYPE};
use crate::kind::Plan;
use crate::metrics::CacheStatus;
use crate::path::ArtifactPath;
use crate::proxy::Proxy;
use crate::upstream::lfs::Action;
use crate::upstream::pass::{self, Forward};
use crate::upstream::Remote;

/// How long a grant the proxy gives stays good.
const GRANT_LIFETIME_S: i64 = 3600;

/// The largest upstream batch answer read.
const MAX_ANSWER: usize = 16 * 1024 * 1024;

/// An lfs remote's request, after the access check.
pub(super) struct Incoming<'r> {
    pub path: &'r ArtifactPath,
    pub plan: Plan<'r>,
    pub method: &'r Method,
    pub headers: &'r HeaderMap,
    pub body: Body,
}

pub(super) async fn answer(
    proxy: &Arc<Proxy>,
    remote: &Arc<Remote>,
    incoming: Incoming<'_>,
) -> Result<Served, ProxyError> {
    let (path, method, headers) = (incoming.path, incoming.method, incoming.headers);
    if let Some(endpoint) = lfs::batch_endpoint(path.path()) {
        if *method != Method::POST {
            return Err(ProxyError::MethodNotAllowed);
        }
        let read_timeout = proxy.server().body_read_timeout;
        let body = super::pass::read_body(headers, incoming.body, read_timeout).await?;
        let batch = Batch {
            proxy,
            remote,
            endpoint,
            path,
            headers,
        };
        return batch.answer(body).await;
    }
    let Some((endpoint, oid)) = lfs::object(path.path()) else {
        return Err(ProxyError::NotFound { status: 404 });
    };
    if *method != Method::GET && *method != Method::HEAD {
        return Err(super::answer::refusal(method));
    }
    let grant = headers.get(GRANT_HEADER).and_then(|v| v.to_str().ok());
    let admitted = grant.is_some_and(|grant| {
        (proxy.lfs_grants).admits(&remote.name, endpoint, oid, grant, now_ms())
    });
    if !admitted {
        // Nothing said about whether the object exists, here or upstream.
        return Err(ProxyError::NotFound { status: 404 });
    }
    super::serve_planned(proxy, remote, path, incoming.plan, None, method, headers).await
}

/// One batch request of a client.
struct Batch<'r> {
    proxy: &'r Arc<Proxy>,
    remote: &'r Arc<Remote>,
    endpoint: &'r str,
    path: &'r ArtifactPath,
    headers: &'r HeaderMap,
}

impl Batch<'_> {
    async fn answer(&self, body: bytes::Bytes) -> Result<Served, ProxyError> {
        let Some(request) = Request::parse(&body) else {
            return reply(StatusCode::UNPROCESSABLE_ENTITY, "not a batch request");
        };
        if !request.is_sha256() {
            return reply(StatusCode::CONFLICT, "only sha256 objects are served here");
        }
        // The client's credentials go upstream unless the proxy itself
        // took them (a remote with `access` rules: then the remote's own).
        let credential = self
            .remote
            .config
            .access
            .is_anonymous()
            .then(|| self.headers.get(header::AUTHORIZATION).cloned())
            .flatten();
        let identity = LfsGrants::identity(
            &self.remote.name,
            self.endpoint,
            credential.as_ref().map_or(&b""[..], |v| v.as_bytes()),
        );
        match request.operation.as_str() {
            "download" => {}
            "upload" if self.remote.config.lfs.pass_uploads => {
                let answer = self.forward(credential, body).await?;
                return relay(answer).await;
            }
            "upload" => {
                return reply(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "uploads are refused by this proxy: push to the Git host itself",
                )
            }
            _ => return reply(StatusCode::UNPROCESSABLE_ENTITY, "unknown operation"),
        }
        let now = now_ms();
        let mut cached = Vec::with_capacity(request.objects.len());
        for wanted in &request.objects {
            cached.push(self.is_cached(&wanted.oid).await);
        }
        let yes_at = self.proxy.lfs_grants.yes_at(&identity);
        let within =
            |age: std::time::Duration| yes_at.is_some_and(|at| now - at < age.as_millis() as i64);
        if within(self.remote.config.lfs.grant_ttl) && cached.iter().all(|&c| c) {
            return self.local(&request, &cached, CacheStatus::Hit);
        }
        // A client that could have sent credentials of its own and did not.
        let unauthenticated = credential.is_none() && self.remote.config.access.is_anonymous();
        let answer = match self.forward(credential, body).await {
            Ok(answer) => answer,
            Err(error) if within(self.remote.config.max_stale) => {
                tracing::debug!(remote = %self.remote.name, %error, "batch answered from the cache");
                return self.local(&request, &cached, CacheStatus::Stale);
            }
            Err(error) if unauthenticated => {
                tracing::debug!(remote = %self.remote.name, %error, "batch challenged: upstream unreachable");
                // Asked for its credentials, which the host may have admitted.
                let mut served = reply(
                    StatusCode::UNAUTHORIZED,
                    "the Git host cannot be reached: send credentials it admitted lately",
                )?;
                let challenge = HeaderValue::from_static("Basic realm=\"mirrorcache\"");
                served
                    .response
                    .headers_mut()
                    .insert("lfs-authenticate", challenge);
                return Ok(served);
            }
            Err(error) => {
                tracing::debug!(remote = %self.remote.name, %error, "batch refused: upstream unreachable");
                return reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the Git host cannot be reached, and it has not lately admitted \
                     these credentials to this repository",
                );
            }
        };
        if answer.response.status() != StatusCode::OK {
            if matches!(answer.response.status().as_u16(), 401 | 403 | 404) {
                self.proxy.lfs_grants.said_no(&identity);
            }
            return relay(answer).await;
        }
        let mirror = answer.mirror.clone();
        let body = read_answer(answer.response).await?;
        let Some(objects) = batch::parse_answer(&body) else {
            return Err(ProxyError::UpstreamBody(
                "the Git host's batch answer is not JSON".into(),
            ));
        };
        self.proxy.lfs_grants.said_yes(identity, now);
        let replies: Vec<Reply> = objects
            .into_iter()
            .map(|object| self.reply_for(object, &mirror, &request, &cached, now))
            .collect();
        let mut served = respond(StatusCode::OK, batch::answer(&replies), CacheStatus::Pass)?;
        served.mirror = Some(mirror);
        Ok(served)
    }

    /// The batch forwarded to the mirrors as the client sent it.
    async fn forward(
        &self,
        credential: Option<HeaderValue>,
        body: bytes::Bytes,
    ) -> Result<pass::Answer, ProxyError> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static(MEDIA_TYPE));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(MEDIA_TYPE));
        if let Some(agent) = self.headers.get(header::USER_AGENT) {
            headers.insert(header::USER_AGENT, agent.clone());
        }
        if let Some(credential) = credential {
            headers.insert(header::AUTHORIZATION, credential);
        }
        let forward = Forward {
            method: Method::POST,
            path: self.path.path(),
            query: None,
            headers,
            body,
        };
        pass::forward(self.remote, forward).await
    }

    /// Whether object `oid` of this endpoint is cached.
    async fn is_cached(&self, oid: &str) -> bool {
        if !lfs::is_oid(oid) {
            return false;
        }
        let Ok(path) = self.object(oid) else {
            return false;
        };
        let meta = &self.proxy.cache.meta;
        meta.memory.lookup_in_memory(&path).is_some()
            || matches!(meta.lookup(&path).await, Ok(Some(_)))
    }

    fn object(&self, oid: &str) -> Result<ArtifactPath, ProxyError> {
        let path = lfs::object_path(self.endpoint, oid);
        ArtifactPath::parse(&format!("/{}/{path}", self.remote.name))
    }

    /// The batch answered from the cache: its cached objects, each with a
    /// grant; the others an error.
    fn local(
        &self,
        request: &Request,
        cached: &[bool],
        status: CacheStatus,
    ) -> Result<Served, ProxyError> {
        let replies: Vec<Reply> = request
            .objects
            .iter()
            .zip(cached)
            .map(|(wanted, &cached)| match cached {
                true => self.download(&wanted.oid, wanted.size),
                false => Reply::Error {
                    oid: wanted.oid.clone(),
                    size: wanted.size,
                    code: 404,
                    message: "not cached, and the Git host cannot be reached".into(),
                },
            })
            .collect();
        respond(StatusCode::OK, batch::answer(&replies), status)
    }

    /// The proxy's download action for `oid`.
    fn download(&self, oid: &str, size: u64) -> Reply {
        let until_ms = now_ms() + GRANT_LIFETIME_S * 1000;
        let base = super::public_base(&self.proxy.server(), self.headers);
        Reply::Download {
            oid: oid.to_string(),
            size,
            href: format!(
                "{base}/{}/{}",
                self.remote.name,
                lfs::object_path(self.endpoint, oid)
            ),
            grant: (self.proxy.lfs_grants).grant(&self.remote.name, self.endpoint, oid, until_ms),
            expires_in: GRANT_LIFETIME_S,
        }
    }

    /// What the client is told of one object of the upstream's answer; its
    /// download action is kept here.
    fn reply_for(
        &self,
        object: batch::Answered,
        mirror: &str,
        request: &Request,
        cached: &[bool],
        now: i64,
    ) -> Reply {
        let (oid, size) = (object.oid.clone(), object.size);
        let error = |code, message: &str| Reply::Error {
            oid: oid.clone(),
            size,
            code,
            message: message.to_string(),
        };
        if let Some(error) = object.error {
            return Reply::Upstream { oid, size, error };
        }
        if !lfs::is_oid(&oid) {
            return error(422, "not a sha256 oid");
        }
        let was_cached = || {
            request
                .objects
                .iter()
                .zip(cached)
                .any(|(w, &c)| c && w.oid == oid)
        };
        let Some(action) = object.download() else {
            return match was_cached() {
                true => self.download(&oid, size),
                false => error(502, "the Git host named no download action"),
            };
        };
        let Some(kept) = Action::from_batch(self.remote, action, size, now) else {
            return error(
                502,
                "the Git host's download action is not one the proxy follows",
            );
        };
        let path = lfs::object_path(self.endpoint, &oid);
        self.remote.lfs_actions.keep(&path, mirror, kept, now);
        self.download(&oid, size)
    }
}

/// The upstream's answer relayed as it came (a refusal, an upload batch):
/// its status, media type, challenge and body.
async fn relay(answer: pass::Answer) -> Result<Served, ProxyError> {
    let status = answer.response.status();
    let upstream = answer.response.headers().clone();
    let body = read_answer(answer.response).await?;
    let mut response = Response::builder()
        .status(status)
        .header(header::CACHE_CONTROL, "no-store")
        .header("x-cache-status", "PASS");
    for name in [
        header::CONTENT_TYPE,
        header::WWW_AUTHENTICATE,
        header::HeaderName::from_static("lfs-authenticate"),
    ] {
        for value in upstream.get_all(&name) {
            response = response.header(&name, value.clone());
        }
    }
    let response = response
        .body(Body::from(body))
        .map_err(|e| ProxyError::Store(e.to_string()))?;
    Ok(Served {
        response,
        cache: CacheStatus::Pass,
        mirror: Some(answer.mirror),
    })
}

/// An upstream answer's body, at most [`MAX_ANSWER`] bytes.
async fn read_answer(mut response: reqwest::Response) -> Result<Vec<u8>, ProxyError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| ProxyError::UpstreamBody(e.without_url().to_string()))?
    {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(ProxyError::UpstreamBody("batch answer too large".into()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The proxy's own error, as the batch API writes one.
fn reply(status: StatusCode, message: &str) -> Result<Served, ProxyError> {
    respond(status, batch::error(message), CacheStatus::Pass)
}

fn respond(status: StatusCode, body: Vec<u8>, cache: CacheStatus) -> Result<Served, ProxyError> {
    let response = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, MEDIA_TYPE)
        // It carries grants: for this client only.
        .header(header::CACHE_CONTROL, "no-store")
        .header("x-cache-status", cache.as_str())
        .body(Body::from(body))
        .map_err(|e| ProxyError::Store(e.to_string()))?;
    Ok(Served {
        response,
        cache,
        mirror: None,
    })
}
