//! The OCI distribution API, pull side: `/v2/` and, per oci remote,
//! `/v2/<remote>/<name>/manifests/<tag|digest>`, `/v2/<remote>/<name>/blobs/<digest>`
//! `/v2/<remote>/<name>/tags/list` and `/v2/<remote>/<name>/referrers/<digest>`
//! (`listing.rs`), on GET and HEAD. Everything else
//! under `/v2/` (pushes, the catalog) is refused with the OCI error JSON.
//!
//! A request becomes an ordinary artifact request of its remote, with the
//! upstream path `v2/<name>/…`, and goes through the same hit / fill path
//! (`super::serve`): blobs stream as they arrive and are one entry and one
//! fill per digest per remote, whatever repository names them; manifests
//! and tag lists are small and answered whole, so that a manifest always
//! carries its `Docker-Content-Digest`, and a manifest fetched by tag is
//! kept under its digest as well. A tag's manifest is revalidated with a
//! HEAD (`upstream::registry`, one at a time per tag), and fetched again
//! only when the tag moved.
//!
//! Which remote a request is for is `resolve.rs`'s; the token service at
//! `/v2/token` is `token.rs`'s.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::record::Answered;
use super::respond::X_CACHE_STATUS;
use super::{serve, ArtifactRequest, CacheStatus, Served};
use crate::cache::{Digest, Entry};
use crate::clock::now_ms;
use crate::error::{ProxyError, Side};
use crate::kind::oci::{self, Endpoint, Invalid, Reference};
use crate::kind::Variant;
use crate::path::ArtifactPath;
use crate::proxy::Proxy;
use crate::upstream::registry::{self, TagHead};
use crate::upstream::Remote;
use resolve::{follows_hub_names, resolve, resolve_name};

const API_VERSION: &str = "docker-distribution-api-version";
const CONTENT_DIGEST: &str = "docker-content-digest";

/// How long a tag's manifest waits for its fill's commit before it is
/// kept under its digest too (the commit is one fsync and one row).
const LINK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

mod listing;
mod resolve;
pub(super) mod token;

/// `GET /v2/`: the API version check every client starts with. The proxy
/// authenticates upstream itself; clients are asked for credentials here
/// only when an oci remote is not anonymous (`access::registry_base`).
pub(super) async fn base(
    State(proxy): State<Arc<Proxy>>,
    peer: Option<axum::Extension<super::access::Peer>>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let peer = peer.map(|axum::Extension(p)| p);
    if let Err(error) = super::access::registry_base(&proxy, &headers, peer.as_ref()).await {
        let mut response = OciError::from_proxy(&error, "UNAUTHORIZED").into_response();
        token::challenge(&proxy, &headers, None, &mut response);
        return response;
    }
    if method != Method::GET && method != Method::HEAD {
        return OciError::unsupported(&method).into_response();
    }
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        "{}",
    )
        .into_response();
    response
        .headers_mut()
        .insert(API_VERSION, HeaderValue::from_static("registry/2.0"));
    response
}

/// An answer in the OCI error JSON.
#[derive(Debug)]
struct OciError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Where a 404 came from (a remembered one is a `HIT`).
    cache: Option<CacheStatus>,
}

impl OciError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> OciError {
        OciError {
            status,
            code,
            message: message.into(),
            cache: None,
        }
    }

    fn unsupported(method: &Method) -> OciError {
        OciError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "UNSUPPORTED",
            format!("{method} is not supported: mirrorcache is a read-only pull-through cache"),
        )
    }

    fn invalid(invalid: Invalid) -> OciError {
        let (status, message) = match invalid {
            Invalid::Unsupported => (StatusCode::NOT_FOUND, "not a pull endpoint"),
            Invalid::Name => (StatusCode::BAD_REQUEST, "invalid repository name"),
            Invalid::Tag => (StatusCode::BAD_REQUEST, "invalid tag"),
            Invalid::Digest => (StatusCode::BAD_REQUEST, "invalid digest (sha256:<64 hex>)"),
        };
        OciError::new(status, invalid.code(), message)
    }

    /// A name no oci remote serves, or one of a private remote the caller
    /// may not read: the same answer for both.
    fn name_unknown() -> OciError {
        OciError::new(
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
            "no oci remote serves this name",
        )
    }

    /// A proxy error as the OCI error JSON: "not found" in the endpoint's
    /// own code, the rest with the status `ProxyError::status` gives.
    fn from_proxy(error: &ProxyError, unknown: &'static str) -> OciError {
        if let ProxyError::UnknownRemote(_) = error {
            return OciError::name_unknown();
        }
        let status = error.status();
        let code = match error {
            ProxyError::NotFound { .. } => unknown,
            // No mirror sent the bytes the digest names.
            ProxyError::IntegrityMismatch { .. } => "DIGEST_INVALID",
            ProxyError::BadPath(_) => "NAME_INVALID",
            ProxyError::MethodNotAllowed | ProxyError::ReadOnly => "UNSUPPORTED",
            ProxyError::Unauthenticated | ProxyError::BadCredentials(_) => "UNAUTHORIZED",
            ProxyError::TooManyFailures | ProxyError::RateLimited { .. } => "TOOMANYREQUESTS",
            _ if status == StatusCode::SERVICE_UNAVAILABLE => "UNAVAILABLE",
            _ => "UNKNOWN",
        };
        let message = match error.side() {
            Side::Internal => "internal error".to_string(),
            _ => error.to_string(),
        };
        OciError::new(status, code, message)
    }
}

impl IntoResponse for OciError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "errors": [{"code": self.code, "message": self.message, "detail": null}]
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(API_VERSION, HeaderValue::from_static("registry/2.0"));
        if let Some(cache) = self.cache {
            headers.insert(X_CACHE_STATUS, HeaderValue::from_static(cache.as_str()));
        }
        if self.status == StatusCode::METHOD_NOT_ALLOWED {
            headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(crate::error::CHALLENGE),
            );
        }
        response
    }
}

/// Any request under `/v2/` but the base.
pub(super) async fn pull(
    State(proxy): State<Arc<Proxy>>,
    peer: Option<axum::Extension<super::access::Peer>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let started = Instant::now();
    let peer = peer.map(|axum::Extension(p)| p);
    let rest = uri.path().strip_prefix("/v2/").unwrap_or_default();
    let resolved = resolve(&proxy, &uri, rest);
    // The repository as the request names it: what a registry token grants.
    let repository = oci::split(rest).map_or("", |(name, _)| name);
    let scope = crate::access::Scope::Pull(repository);
    // The access check, on the remote `?ns=`, the name or the root remote
    // resolved to.
    let mut caller = crate::access::Caller::Anonymous;
    let mut refusal = None;
    if let Some((remote, _)) = &resolved {
        match super::access::admit_for(&proxy, remote, &headers, peer.as_ref(), scope).await {
            Ok(admitted) => caller = admitted,
            Err(error) => refusal = Some(OciError::from_proxy(&error, "UNAUTHORIZED")),
        }
    }
    let (remote, result) = match resolved {
        Some((remote, _)) if refusal.is_some() => (
            Some(remote),
            Err(refusal.take().expect("checked just above")),
        ),
        Some((remote, rest)) => {
            let request = Pull {
                proxy: &proxy,
                remote: &remote,
                method: &method,
                uri: &uri,
                headers: &headers,
            };
            let result = request.answer(rest).await;
            (Some(remote), result)
        }
        None => {
            let unknown = super::access::unknown_name(&proxy, &headers, peer.as_ref(), scope);
            let error = match unknown.await {
                Some(refusal) => OciError::from_proxy(&refusal, "UNAUTHORIZED"),
                None => OciError::name_unknown(),
            };
            (None, Err(error))
        }
    };
    let (mut response, cache, mirror, error) = match result {
        Ok(served) => (served.response, Some(served.cache), served.mirror, None),
        Err(error) => {
            let (cache, message) = (error.cache, format!("{}: {}", error.code, error.message));
            (error.into_response(), cache, None, Some(message))
        }
    };
    response
        .headers_mut()
        .insert(API_VERSION, HeaderValue::from_static("registry/2.0"));
    token::challenge(&proxy, &headers, Some(repository), &mut response);
    let answered = Answered {
        remote: remote.as_deref(),
        cache,
        mirror: mirror.as_deref(),
        error: error.as_deref(),
        user: caller.user(),
        peer: peer.as_ref(),
    };
    answered.record(&proxy, &method, &uri, started, &response);
    response
}

/// One pull request, resolved to its remote.
struct Pull<'a> {
    proxy: &'a Arc<Proxy>,
    remote: &'a Arc<Remote>,
    method: &'a Method,
    uri: &'a Uri,
    headers: &'a HeaderMap,
}

impl Pull<'_> {
    async fn answer(&self, rest: &str) -> Result<Served, OciError> {
        if self.method != Method::GET && self.method != Method::HEAD {
            return Err(OciError::unsupported(self.method));
        }
        let (name, endpoint) = oci::split(rest).map_err(OciError::invalid)?;
        let name = oci::hub_name(name, follows_hub_names(self.remote));
        let tail = match endpoint {
            Endpoint::Manifest(Reference::Tag(r) | Reference::Digest(r)) => {
                format!("manifests/{r}")
            }
            Endpoint::Blob(digest) => format!("blobs/{digest}"),
            Endpoint::TagsList => "tags/list".to_string(),
            Endpoint::Referrers(digest) => format!("referrers/{digest}"),
        };
        let path = ArtifactPath::parse(&format!("/{}/v2/{name}/{tail}", self.remote.name))
            .map_err(|e| OciError::from_proxy(&e, "NAME_UNKNOWN"))?;
        match endpoint {
            Endpoint::Blob(digest) => self.blob(&path, digest).await,
            Endpoint::Manifest(reference) => self.manifest(&path, reference).await,
            Endpoint::TagsList => self.tags(&path).await,
            Endpoint::Referrers(_) => self.referrers(&path).await,
        }
    }

    /// A blob: streamed from the cache or from the fill, as any artifact,
    /// under one key per digest whatever repository asks (the mirror is
    /// asked under the requester's name).
    async fn blob(&self, path: &ArtifactPath, digest: &str) -> Result<Served, OciError> {
        let key = ArtifactPath::parse(&format!("/{}/{}", self.remote.name, oci::blob_key(digest)))
            .map_err(|e| OciError::from_proxy(&e, "BLOB_UNKNOWN"))?
            .fetched_as(path.path());
        let served = serve(self.proxy, self.remote, &key, self.method, self.headers).await;
        let unknown = match &served {
            Ok(served) => matches!(
                served.response.status(),
                StatusCode::NOT_FOUND | StatusCode::GONE
            ),
            Err(error) => matches!(error, ProxyError::NotFound { .. }),
        };
        if unknown {
            // Unknown under this name says nothing of the same digest under
            // another: not remembered.
            self.proxy.cache.meta.memory.forget_absent(&key);
        }
        let mut served = served.map_err(|e| OciError::from_proxy(&e, "BLOB_UNKNOWN"))?;
        known(&served, "BLOB_UNKNOWN", "blob unknown to every mirror")?;
        let status = served.response.status();
        if status.is_success() {
            let value = HeaderValue::from_str(digest).expect("a checked digest is a header value");
            served.response.headers_mut().insert(CONTENT_DIGEST, value);
        }
        Ok(served)
    }

    /// A manifest, read whole (they are small) so that its digest is known:
    /// by digest it must match the path; by tag, a stale copy is first
    /// revalidated with a HEAD.
    async fn manifest(
        &self,
        path: &ArtifactPath,
        reference: Reference<'_>,
    ) -> Result<Served, OciError> {
        // Only `Accept` matters to a manifest; conditional and range headers
        // would leave nothing to hash.
        let mut accept = HeaderMap::new();
        for value in self.headers.get_all(header::ACCEPT) {
            accept.append(header::ACCEPT, value.clone());
        }
        let variant = oci::variant(path.path(), &accept).expect("a manifest has variants");
        let revalidated = match reference {
            Reference::Tag(_) => self.revalidate_tag(path, variant, &accept).await,
            Reference::Digest(_) => None,
        };
        let served = match revalidated {
            Some(served) => served,
            None => serve(self.proxy, self.remote, path, &Method::GET, &accept)
                .await
                .map_err(|e| OciError::from_proxy(&e, "MANIFEST_UNKNOWN"))?,
        };
        known(
            &served,
            "MANIFEST_UNKNOWN",
            "manifest unknown to every mirror",
        )?;
        let (body, content_type) = self.read_whole(served.response).await?;
        let content_digest = Digest::of(&body);
        let digest = format!("sha256:{}", content_digest.to_hex());
        if let Reference::Tag(_) = reference {
            let keyed = path.with_variant(variant.suffix);
            self.link_digest(&keyed, content_digest, &body, content_type.as_ref())
                .await;
        }
        if let Reference::Digest(expected) = reference {
            if digest != expected {
                // The fill checks this before its commit; a stored copy
                // that fails here is forgotten, so the next request fetches.
                let _ = self
                    .proxy
                    .cache
                    .meta
                    .forget(&path.with_variant(variant.suffix))
                    .await;
                return Err(OciError::new(
                    StatusCode::BAD_GATEWAY,
                    "MANIFEST_INVALID",
                    format!("the mirror's manifest is {digest}, not {expected}"),
                ));
            }
        }
        let mut response = self.whole(body, content_type, served.cache);
        let headers = response.headers_mut();
        let etag = format!("\"{digest}\"");
        headers.insert(
            header::ETAG,
            HeaderValue::try_from(etag).expect("hex is a header value"),
        );
        headers.insert(
            CONTENT_DIGEST,
            HeaderValue::try_from(digest).expect("hex is a header value"),
        );
        headers.insert(header::VARY, HeaderValue::from_static("Accept"));
        Ok(Served { response, ..served })
    }

    /// A tag's manifest is also its digest's entry (one row more for the
    /// same blob), so a pull by digest after a pull by tag is a hit, also
    /// offline. The tag's fill commits after its readers have the body:
    /// this waits for it (at most `LINK_WAIT`), then records the row if the
    /// digest's entry is not that blob already.
    async fn link_digest(
        &self,
        tag: &ArtifactPath,
        digest: Digest,
        body: &[u8],
        content_type: Option<&HeaderValue>,
    ) {
        let Some((name, _)) = tag
            .path()
            .strip_prefix("v2/")
            .and_then(|r| r.rsplit_once("/manifests/"))
        else {
            return;
        };
        let raw = format!(
            "/{}/v2/{name}/manifests/sha256:{}",
            self.remote.name,
            digest.to_hex()
        );
        let Ok(by_digest) = ArtifactPath::parse(&raw) else {
            return;
        };
        let Some(variant) = oci::variants(by_digest.path()).first() else {
            return;
        };
        let by_digest = by_digest.with_variant(variant.suffix);
        let cache = &self.proxy.cache;
        if let Ok(Some(entry)) = cache.meta.lookup(&by_digest).await {
            if entry.digest == digest {
                return;
            }
        }
        if let Some(mut fill) = self.proxy.fills.join(tag.key()) {
            let _ =
                tokio::time::timeout(LINK_WAIT, async { while fill.changed().await.is_ok() {} })
                    .await;
        }
        let content_type = content_type
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let entry = Entry::new(
            digest,
            body.len() as u64,
            content_type,
            None,
            None,
            now_ms(),
        );
        match crate::cache::alias::link_entry(cache, &by_digest, entry).await {
            Ok(true) => tracing::debug!(key = by_digest.key(), "manifest kept under its digest"),
            Ok(false) => tracing::debug!(
                key = by_digest.key(),
                "tag's manifest not committed; digest not linked"
            ),
            Err(error) => {
                tracing::warn!(key = by_digest.key(), %error, "could not keep a manifest under its digest")
            }
        }
    }

    /// A tag's cached manifest past `revalidate_after`: a HEAD asks the
    /// mirrors for the tag's digest now. Unchanged: the copy is fresh again
    /// (`REVALIDATED`), no GET. Every mirror failing: the copy is served
    /// `STALE` (within `max_stale`). Changed, unknown, or nothing cached:
    /// `None`, and the ordinary path fetches it.
    async fn revalidate_tag(
        &self,
        path: &ArtifactPath,
        variant: Variant,
        accept: &HeaderMap,
    ) -> Option<Served> {
        let (proxy, remote) = (self.proxy, self.remote);
        let keyed = path.with_variant(variant.suffix);
        // A purge of the tag while it is revalidated is not undone.
        let ticket = proxy.cache.meta.memory.purges.ticket();
        let entry = proxy.cache.meta.lookup(&keyed).await.ok().flatten()?;
        let now = now_ms();
        if remote.policy.is_fresh(keyed.path(), entry.age(now)) {
            return None;
        }
        let request = ArtifactRequest {
            proxy,
            remote,
            path: keyed.clone(),
            accept: Some(variant.accept),
            document: false,
            // The guard's rules name packages; an oci remote has none.
            filter: None,
            md5_etag: false,
            // A manifest by tag changes.
            immutable: false,
            method: &Method::GET,
            headers: accept,
        };
        match registry::head_digest(remote, path.path(), Some(variant.accept)).await {
            Ok(TagHead::Digest(digest))
                if digest == format!("sha256:{}", entry.digest.to_hex()) =>
            {
                let fresh = proxy
                    .cache
                    .meta
                    .mark_revalidated(&keyed, &entry, now, ticket)
                    .await
                    .ok()?;
                tracing::debug!(key = keyed.key(), "tag unchanged upstream (HEAD)");
                request.cached(&fresh, CacheStatus::Revalidated).await.ok()
            }
            Ok(_) => None,
            Err(error) => request.when_mirrors_fail(Some(entry), error).await.ok(),
        }
    }

    /// A whole body of at most `max_document_size`, and its `Content-Type`.
    async fn read_whole(
        &self,
        response: Response,
    ) -> Result<(Bytes, Option<HeaderValue>), OciError> {
        let (parts, body) = response.into_parts();
        let limit = usize::try_from(self.remote.config.max_document_size).unwrap_or(usize::MAX);
        let body = axum::body::to_bytes(body, limit).await.map_err(|e| {
            OciError::new(
                StatusCode::BAD_GATEWAY,
                "UNKNOWN",
                format!("reading the body: {e}"),
            )
        })?;
        Ok((body, parts.headers.get(header::CONTENT_TYPE).cloned()))
    }

    /// A 200 of these bytes (none on a HEAD, with the same length).
    fn whole(
        &self,
        body: Bytes,
        content_type: Option<HeaderValue>,
        cache: CacheStatus,
    ) -> Response {
        let mut response = Response::new(Body::empty());
        let headers = response.headers_mut();
        headers.insert(X_CACHE_STATUS, HeaderValue::from_static(cache.as_str()));
        if let Some(content_type) = content_type {
            headers.insert(header::CONTENT_TYPE, content_type);
        }
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len() as u64));
        if self.method != Method::HEAD {
            *response.body_mut() = Body::from(body);
        }
        response
    }
}

/// The 404 (or 410) the ordinary path answered, if it did, in the OCI
/// error JSON.
fn known(served: &Served, code: &'static str, message: &str) -> Result<(), OciError> {
    if !matches!(
        served.response.status(),
        StatusCode::NOT_FOUND | StatusCode::GONE
    ) {
        return Ok(());
    }
    let mut error = OciError::new(StatusCode::NOT_FOUND, code, message);
    error.cache = Some(served.cache);
    Err(error)
}
