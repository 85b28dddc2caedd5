//! Which oci remote a `/v2/…` request is for: containerd's `?ns=<host>`
//! picks the oci remote whose `registry` is that host (Docker Hub's
//! spellings are one host); else the first name component, when it is the
//! name of an oci remote; else `server.oci_root_remote`, unless `?ns=` names
//! another registry than the root remote's.

use std::sync::Arc;

use axum::http::Uri;

use crate::kind::oci;
use crate::kind::Protocol;
use crate::proxy::Proxy;
use crate::upstream::Remote;

/// The oci remote a request is for, and the rest of its path (`<name>/…`).
pub(super) fn resolve<'u>(
    proxy: &Proxy,
    uri: &Uri,
    rest: &'u str,
) -> Option<(Arc<Remote>, &'u str)> {
    let ns = uri.query().and_then(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "ns")
            .map(|(_, v)| v.into_owned())
    });
    resolve_name(proxy, ns.as_deref(), rest)
}

/// [`resolve`] of a path below `/v2/` (or a repository name), with
/// containerd's `?ns=` if the request had one.
///
/// `?ns=<host>` picks the oci remote whose `registry` is that host (Docker
/// Hub's spellings are one host). A name whose first component is an oci
/// remote's name is that remote's. The root remote takes the rest, unless
/// `?ns=` names another registry than the root remote's (a root remote
/// without `registry` stands for Docker Hub): an image of one registry is
/// never answered from another's.
pub(in crate::http) fn resolve_name<'u>(
    proxy: &Proxy,
    ns: Option<&str>,
    rest: &'u str,
) -> Option<(Arc<Remote>, &'u str)> {
    let is_oci = |r: &Arc<Remote>| r.config.kind.ecosystem().protocol() == Protocol::Registry;
    let serves = |r: &Remote, ns: &str| {
        r.config
            .registry
            .as_deref()
            .is_some_and(|host| oci::same_registry(host, ns))
    };
    if let Some(ns) = ns {
        let remotes = proxy.remotes();
        let found = remotes.values().find(|r| is_oci(r) && serves(r, ns));
        if let Some(remote) = found {
            return Some((remote.clone(), rest));
        }
    }
    if let Some((first, after)) = rest.split_once('/') {
        if let Some(remote) = proxy.remote(first).filter(is_oci) {
            return Some((remote, after));
        }
    }
    let root = proxy.server().oci_root_remote.clone()?;
    let root = proxy.remote(&root).filter(is_oci)?;
    if let Some(ns) = ns {
        let registry = root.config.registry.as_deref().unwrap_or(oci::DOCKER_HUB);
        if !oci::same_registry(registry, ns) {
            return None;
        }
    }
    Some((root, rest))
}

/// Whether a remote follows Docker Hub's naming (`alpine` is
/// `library/alpine`): its mirrors are Docker Hub, or its `registry` is.
pub(super) fn follows_hub_names(remote: &Remote) -> bool {
    remote.config.mirrors.iter().any(oci::is_docker_hub)
        || remote
            .config
            .registry
            .as_deref()
            .is_some_and(|h| oci::same_registry(h, oci::DOCKER_HUB))
}
