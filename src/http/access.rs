//! The access check: the one place a request that has been resolved to its
//! remote (the path normalised and `%2F`-decoded, OCI's `?ns=` and root
//! remote applied, `~files/`, `sumdb/` and pass-through routes told apart) is
//! let through or refused, before anything is looked up or sent upstream.
//! Both resolvers (`super::resolve` for `/{remote}/…`, `oci::resolve` for
//! `/v2/…`) hand their remote to [`admit`] and nothing else. Also: who the
//! operations pages are shown to, and the peer a request comes from.
//!
//! Invariant: a refused request reads nothing of its remote — no cache
//! lookup, no upstream request — and its answer (401 with a challenge, or
//! 403) is the same whether the path exists or not.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Request, Uri};

use super::snapshot::Snapshot;
use crate::access::{Caller, Refusal, Scope};
use crate::config::{IpBlock, RemoteConfig};
use crate::error::ProxyError;
use crate::kind::Protocol;
use crate::proxy::Proxy;
use crate::upstream::Remote;

/// Where a request comes from, as the listener saw it: an argument of the
/// artifact handler, a request extension for the router's handlers.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The client: the connection's peer, or the address a trusted proxy
    /// forwarded for.
    pub client: IpAddr,
    /// The connection is TLS.
    pub tls: bool,
}

/// Constant names: removing by a `&str` name parses it on every request.
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const FORWARDED: [HeaderName; 4] = [
    HeaderName::from_static("x-forwarded-for"),
    X_FORWARDED_PROTO,
    HeaderName::from_static("x-forwarded-host"),
    header::FORWARDED,
];

/// Whether `name` is one of [`FORWARDED`] (header names are lower case).
fn is_forwarded(name: &HeaderName) -> bool {
    let name = name.as_str();
    name.starts_with("x-forwarded-") || name == "forwarded"
}

/// The listener's part, once per request: from a peer not in
/// `trusted_proxies` every `X-Forwarded-*` header is dropped, so no later
/// step can be misled by one; on TLS `X-Forwarded-Proto: https` is set
/// unless a trusted proxy said otherwise. An HTTP/2 request's authority
/// becomes its `Host` and its target the origin form, as HTTP/1.1 sends them.
pub fn prepare<B>(
    request: &mut Request<B>,
    addr: SocketAddr,
    tls: bool,
    trusted: &[IpBlock],
) -> Peer {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|b| b.contains(ip));
    let headers = request.headers_mut();
    let mut client = addr.ip();
    if is_trusted(client) {
        // The nearest address that is not one of ours.
        let forwarded_for = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|a| a.trim().parse::<IpAddr>().ok())
            .collect::<Vec<_>>();
        if let Some(ip) = forwarded_for.into_iter().rev().find(|ip| !is_trusted(*ip)) {
            client = ip;
        }
    } else if headers.keys().any(is_forwarded) {
        // One look at the names first: most requests carry none of them,
        // and a removal hashes its name.
        for name in &FORWARDED {
            headers.remove(name);
        }
    }
    if tls && !headers.contains_key(X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("https"));
    }
    // HTTP/2 only: an HTTP/1.1 absolute-form target is refused later (not a
    // forward proxy), and must still look like one.
    let authority = match request.version() {
        axum::http::Version::HTTP_2 => request.uri().authority().cloned(),
        _ => None,
    };
    if let Some(authority) = authority {
        if !request.headers().contains_key(header::HOST) {
            if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
                request.headers_mut().insert(header::HOST, host);
            }
        }
        let origin_form = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse::<Uri>();
        if let Ok(uri) = origin_form {
            *request.uri_mut() = uri;
        }
    }
    Peer { client, tls }
}

pub(super) fn client_of(peer: Option<&Peer>) -> IpAddr {
    peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |p| p.client)
}

pub(super) fn refused(refusal: Refusal) -> ProxyError {
    match refusal {
        Refusal::Malformed(why) => ProxyError::BadCredentials(why),
        Refusal::BadCredentials => ProxyError::Unauthenticated,
        Refusal::TooManyFailures => ProxyError::TooManyFailures,
        Refusal::Unavailable => ProxyError::AuthUnavailable,
        Refusal::Busy => ProxyError::LoginsBusy,
    }
}

/// Who sent the request (anonymous without `[auth]`).
pub(super) async fn caller(
    proxy: &Proxy,
    headers: &HeaderMap,
    peer: Option<&Peer>,
) -> Result<Caller, ProxyError> {
    caller_for(proxy, headers, peer, Scope::Other).await
}

/// Who sent the request, with registry tokens taken for `scope`.
pub(super) async fn caller_for(
    proxy: &Proxy,
    headers: &HeaderMap,
    peer: Option<&Peer>,
    scope: Scope<'_>,
) -> Result<Caller, ProxyError> {
    if !proxy.access.enabled() {
        return Ok(Caller::Anonymous);
    }
    proxy
        .access
        .identify_for(headers, client_of(peer), scope)
        .await
        .map_err(refused)
}

/// The check: the caller, if it may read `remote`; else 401 (no valid
/// credentials), 404 as for a name no remote has (a user the remote does not
/// list: see [`unknown_name`]), 400 (an unreadable `Authorization`) or 429
/// (too many failed logins from this peer).
pub(super) async fn admit(
    proxy: &Proxy,
    remote: &Remote,
    headers: &HeaderMap,
    peer: Option<&Peer>,
) -> Result<Caller, ProxyError> {
    admit_for(proxy, remote, headers, peer, Scope::Other).await
}

/// [`admit`], with registry tokens taken for `scope` (the registry API).
pub(super) async fn admit_for(
    proxy: &Proxy,
    remote: &Remote,
    headers: &HeaderMap,
    peer: Option<&Peer>,
    scope: Scope<'_>,
) -> Result<Caller, ProxyError> {
    let access = &remote.config.access;
    if access.is_anonymous() {
        // Credentials are not read for a remote anyone may read; only a
        // request that cannot be meant is refused.
        if proxy.access.enabled() {
            crate::access::credentials::header_of(headers)
                .map_err(|m| ProxyError::BadCredentials(m.0))?;
        }
        return Ok(Caller::Anonymous);
    }
    // Whatever `[auth]` says now, a private remote is checked (fail closed:
    // with no users, nobody gets in).
    let caller = proxy
        .access
        .identify_for(headers, client_of(peer), scope)
        .await
        .map_err(refused)?;
    match caller.user() {
        None => Err(ProxyError::Unauthenticated),
        Some(user) if access.admits(Some(user)) => Ok(caller),
        Some(_) => Err(ProxyError::UnknownRemote(remote.name.clone())),
    }
}

/// With `[auth]`, a request for a name no remote has is answered as one for
/// a private remote the caller may not read, so that private names cannot
/// be told from unknown ones: the caller's refusal (401 without valid
/// credentials, 400 or 429 as for any login), or `None` for a user, who is
/// then told "not found" as [`admit`] tells a user a remote does not list.
pub(super) async fn unknown_name(
    proxy: &Proxy,
    headers: &HeaderMap,
    peer: Option<&Peer>,
    scope: Scope<'_>,
) -> Option<ProxyError> {
    if !proxy.access.enabled() {
        return None;
    }
    match caller_for(proxy, headers, peer, scope).await {
        Err(refused) => Some(refused),
        Ok(Caller::Anonymous) => Some(ProxyError::Unauthenticated),
        Ok(Caller::User(_)) => None,
    }
}

/// `/v2/`: with a private oci remote, container clients are asked for
/// credentials here (they send them only after a 401); without credentials
/// they send empty Basic ones, which anonymous oci remotes take.
pub(super) async fn registry_base(
    proxy: &Proxy,
    headers: &HeaderMap,
    peer: Option<&Peer>,
) -> Result<(), ProxyError> {
    if !proxy.access.enabled() {
        return Ok(());
    }
    let private_oci = proxy.remotes().values().any(|r| {
        r.config.kind.ecosystem().protocol() == Protocol::Registry
            && !r.config.access.is_anonymous()
    });
    if !private_oci {
        return Ok(());
    }
    let bearer = crate::access::registry_token::offered(headers).is_some();
    match caller_for(proxy, headers, peer, Scope::RegistryBase).await? {
        // A registry token, even an anonymous caller's, is what the
        // challenge asked for.
        Caller::Anonymous if bearer => Ok(()),
        Caller::Anonymous => Err(ProxyError::Unauthenticated),
        Caller::User(_) => Ok(()),
    }
}

/// Whether `caller` may see the remote named `name` on the operations
/// pages: a remote configured now that admits it, or `-` (a request no
/// remote took). Any other name is hidden: a remote a reload removed or
/// renamed may have been private, and its errors and fills are not
/// anyone's to see.
fn may_see(proxy: &Proxy, caller: &Caller, name: &str) -> bool {
    name == "-"
        || proxy
            .remote(name)
            .is_some_and(|r| r.config.access.admits(caller.user()))
}

/// The snapshot `/-/status` and `/-/` show this caller: the remotes it may
/// not read are taken out, with their mirrors, fills and recent errors, and
/// the totals recounted without them.
pub(super) async fn snapshot_for(
    proxy: &Proxy,
    headers: &HeaderMap,
    peer: Option<&Peer>,
) -> Result<Snapshot, ProxyError> {
    let mut snapshot = Snapshot::take(proxy);
    if !proxy.access.enabled() {
        return Ok(snapshot);
    }
    let caller = caller(proxy, headers, peer).await?;
    let visible = |name: &str| may_see(proxy, &caller, name);
    snapshot.remotes.retain(|r| visible(&r.name));
    // Server-wide totals count every remote; a mirror's gauges and health
    // are shared by every remote that lists it.
    let remotes = proxy.remotes();
    let hidden: Vec<&Remote> = remotes
        .values()
        .filter(|r| !r.config.access.admits(caller.user()))
        .map(|r| r.as_ref())
        .collect();
    if !hidden.is_empty() {
        snapshot.store_bytes = None;
    }
    for mirror in snapshot
        .remotes
        .iter_mut()
        .flat_map(|r| r.mirrors.iter_mut())
    {
        let shared = hidden.iter().any(|r| {
            r.mirror_sets()
                .flat_map(|set| set.mirrors.iter())
                .any(|m| m.base() == mirror.url)
        });
        if shared {
            mirror.hide_shared_state();
        }
    }
    let (hits, total) = snapshot
        .remotes
        .iter()
        .fold((0, 0), |(h, t), r| (h + r.counts.hits, t + r.requests));
    snapshot.hit_ratio = if total == 0 {
        0.0
    } else {
        hits as f64 / total as f64
    };
    snapshot
        .fills
        .retain(|f| visible(f.key.split('/').next().unwrap_or_default()));
    snapshot.fills_in_progress = snapshot.fills.len();
    snapshot.quarantine_refusals.retain(|r| visible(&r.remote));
    snapshot
        .recent_errors
        .retain(|e| visible(e.source.split(' ').next().unwrap_or_default()));
    Ok(snapshot)
}

/// `/-/metrics` for this caller: a series labelled with a remote is kept
/// only when that remote is configured now and admits the caller (the
/// series of a remote a reload removed or renamed stay in the registry,
/// and are anyone's no more than its errors). A caller some remote does
/// not admit gets none of the server-wide series either (fills in
/// progress, commits, evictions, the store's bytes): they count that
/// remote's traffic too, and cannot be recounted without it. Comment
/// lines stay.
pub(super) async fn metrics_for(
    proxy: &Proxy,
    headers: &HeaderMap,
    peer: Option<&Peer>,
    text: String,
) -> Result<String, ProxyError> {
    if !proxy.access.enabled() {
        return Ok(text);
    }
    let caller = caller(proxy, headers, peer).await?;
    let sees_all = proxy
        .remotes()
        .values()
        .all(|r| r.config.access.admits(caller.user()));
    let mut kept = String::with_capacity(text.len());
    for line in text.lines() {
        let remote = line
            .split_once("remote=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(name, _)| name);
        let shown = match remote {
            Some(name) => may_see(proxy, &caller, name),
            None => sees_all || line.starts_with('#'),
        };
        if shown {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    Ok(kept)
}

/// A document of a remote that is not anonymous, as the ecosystem marks it
/// for its client to send credentials with every request
/// (`Ecosystem::mark_private`: cargo's `"auth-required": true`).
pub(super) fn mark_auth_required(config: &RemoteConfig, path: &str, body: Vec<u8>) -> Vec<u8> {
    if config.access.is_anonymous() {
        return body;
    }
    config.kind.ecosystem().mark_private(path, body)
}
