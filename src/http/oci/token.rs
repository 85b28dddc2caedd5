//! The registry token service at `/v2/token` (the distribution token
//! specification, both forms): `GET` with Basic credentials (a user's
//! password or a `mirrorcache token`) or none, as `docker login`, podman and
//! containerd ask; `POST` with an OAuth2 form (`grant_type=password` or
//! `refresh_token`), as containerd and a logged-in Docker Engine ask. Every
//! `repository:<name>:pull` scope is granted when the caller may read the
//! remote the name resolves to, every other scope and action is left out;
//! `offline_token=true` / `access_type=offline` adds a refresh token, which
//! `docker login` keeps as its identity token.
//!
//! The 401s of `/v2/…` name this realm and no other scheme: the Docker
//! Engine, offered Bearer and Basic at once, applies both and fails for want
//! of a password once `docker login` has left it an identity token. Basic
//! credentials sent unasked (`curl -u`, skopeo's `--creds`) are still taken.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use super::super::access::{client_of, Peer};
use super::resolve_name;
use crate::access::registry_token::{Grant, SERVICE};
use crate::access::{Caller, Refusal};
use crate::error::CHALLENGE;
use crate::kind::Protocol;
use crate::proxy::Proxy;

/// A 401 of the registry API challenges with this realm (and `scope` for a
/// pull of `repository`).
pub(in crate::http) fn challenge(
    proxy: &Proxy,
    headers: &HeaderMap,
    repository: Option<&str>,
    response: &mut Response,
) {
    if response.status() != StatusCode::UNAUTHORIZED {
        return;
    }
    let realm = format!(
        "{}/v2/token",
        super::super::public_base(&proxy.server(), headers)
    );
    let scope = repository
        .filter(|r| !r.is_empty())
        .map_or(String::new(), |r| format!(",scope=\"repository:{r}:pull\""));
    let bearer = format!("Bearer realm=\"{realm}\",service=\"{SERVICE}\"{scope}");
    if let Ok(bearer) = HeaderValue::from_str(&bearer) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, bearer);
    }
}

/// `GET /v2/token?service=…&scope=…[&scope=…]&offline_token=true`.
pub(in crate::http) async fn get(
    State(proxy): State<Arc<Proxy>>,
    peer: Option<axum::Extension<Peer>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let peer = peer.map(|axum::Extension(p)| p);
    let query = uri.query().unwrap_or_default();
    let params: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let caller = proxy
        .access
        .identify(&headers, client_of(peer.as_ref()))
        .await;
    let caller = match caller {
        Ok(caller) => caller,
        Err(refusal) => return refused(refusal),
    };
    let offline = param(&params, "offline_token") == Some("true");
    let refresh = offline.then(|| token_id(&headers));
    issue(&proxy, &caller, &params, refresh).await
}

/// `POST /v2/token` with `grant_type`, `service`, `scope`, `client_id` and
/// `username`/`password` or `refresh_token` (and `access_type=offline`).
pub(in crate::http) async fn post(
    State(proxy): State<Arc<Proxy>>,
    peer: Option<axum::Extension<Peer>>,
    body: axum::body::Bytes,
) -> Response {
    let peer = peer.map(|axum::Extension(p)| p);
    let params: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let offline = param(&params, "access_type") == Some("offline");
    let (caller, tid) = match param(&params, "grant_type") {
        Some("password") => {
            let (Some(user), Some(password)) =
                (param(&params, "username"), param(&params, "password"))
            else {
                return oauth_error(StatusCode::BAD_REQUEST, "invalid_request");
            };
            // The same check, limits and memory as a Basic header.
            let mut basic = HeaderMap::new();
            let pair = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("{user}:{password}"),
            );
            let Ok(value) = HeaderValue::from_str(&format!("Basic {pair}")) else {
                return oauth_error(StatusCode::BAD_REQUEST, "invalid_request");
            };
            basic.insert(header::AUTHORIZATION, value);
            let tid = mirrorcache_token_id(password);
            match proxy
                .access
                .identify(&basic, client_of(peer.as_ref()))
                .await
            {
                Ok(caller @ Caller::User(_)) => (caller, tid),
                Ok(Caller::Anonymous) | Err(Refusal::BadCredentials) => {
                    return oauth_error(StatusCode::UNAUTHORIZED, "invalid_grant")
                }
                Err(refusal) => return refused(refusal),
            }
        }
        Some("refresh_token") => {
            let Some(token) = param(&params, "refresh_token") else {
                return oauth_error(StatusCode::BAD_REQUEST, "invalid_request");
            };
            match proxy.access.refresh_login(token).await {
                Ok((user, tid)) => (Caller::User(user), tid),
                Err(Refusal::BadCredentials) => {
                    return oauth_error(StatusCode::UNAUTHORIZED, "invalid_grant")
                }
                Err(refusal) => return refused(refusal),
            }
        }
        _ => return oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type"),
    };
    let refresh = offline.then_some(tid);
    issue(&proxy, &caller, &params, refresh).await
}

/// The token answer: an access token for the scopes `caller` may have, and
/// a refresh token when asked for.
async fn issue(
    proxy: &Proxy,
    caller: &Caller,
    params: &[(String, String)],
    refresh: Option<Option<String>>,
) -> Response {
    if param(params, "service").is_some_and(|s| s != SERVICE) {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request");
    }
    let access: Vec<Grant> = params
        .iter()
        .filter(|(k, _)| k == "scope")
        .flat_map(|(_, v)| v.split(' '))
        .filter_map(Grant::parse_scope)
        .filter(|g| g.actions.iter().any(|a| a == "pull"))
        .filter(|g| may_pull(proxy, caller, &g.name))
        .map(|g| Grant::pull(&g.name))
        .collect();
    let (token, expires_in, refresh_token) =
        match proxy.access.registry_tokens(caller, access, refresh).await {
            Ok(issued) => issued,
            Err(error) => return error.into_response(),
        };
    let issued_at = now_rfc3339();
    let mut body = serde_json::json!({
        "token": token,
        "access_token": token,
        "expires_in": expires_in,
        "issued_at": issued_at,
    });
    if let Some(refresh) = refresh_token {
        body["refresh_token"] = serde_json::Value::String(refresh);
    }
    let mut response = axum::Json(body).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Whether `caller` may pull the repository `name` names: the remote it
/// resolves to is anonymous or admits the caller; a name no remote takes
/// without `?ns=` (containerd's names of other registries) is granted to a
/// user some oci remote with a `registry` admits. The pull itself is checked
/// again against its remote.
fn may_pull(proxy: &Proxy, caller: &Caller, name: &str) -> bool {
    let admits = |remote: &crate::upstream::Remote| {
        let access = &remote.config.access;
        access.is_anonymous() || access.admits(caller.user())
    };
    match resolve_name(proxy, None, name) {
        Some((remote, _)) => admits(&remote),
        None => {
            caller.user().is_some()
                && proxy.remotes().values().any(|r| {
                    r.config.kind.ecosystem().protocol() == Protocol::Registry
                        && r.config.registry.is_some()
                        && admits(r)
                })
        }
    }
}

fn param<'p>(params: &'p [(String, String)], name: &str) -> Option<&'p str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The id of the `mirrorcache token` a login's headers offered as the
/// password or the token, if they did: a refresh token stands only while
/// that token does.
fn token_id(headers: &HeaderMap) -> Option<String> {
    use crate::access::credentials::{header_of, parse, Offered};
    let value = header_of(headers).ok()??;
    match parse(value).ok()? {
        Offered::Basic { password, .. } | Offered::Token(password) => {
            mirrorcache_token_id(&password)
        }
        _ => None,
    }
}

/// The id of `secret`, if it is a `mirrorcache token`.
fn mirrorcache_token_id(secret: &str) -> Option<String> {
    crate::access::token::split(secret).map(|(id, _)| id.to_string())
}

fn refused(refusal: Refusal) -> Response {
    let mut response = super::super::access::refused(refusal).into_response();
    if response.status() == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(CHALLENGE),
        );
    }
    response
}

/// An OAuth2 error answer (RFC 6749 §5.2).
fn oauth_error(status: StatusCode, error: &'static str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": error }))).into_response()
}

/// Now as RFC 3339 (`issued_at`), to the second.
fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
