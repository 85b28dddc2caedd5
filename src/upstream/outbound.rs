//! What a request to a mirror carries and where it may be sent: the
//! remote's credentials ([`authorize`], only for origins they may go to),
//! the validators of a stale copy ([`Validators`]), and the hosts a registry
//! may send the proxy to off its mirrors ([`LeaveFor`]). A leaf of the
//! room: `fetch`, `redirects`, `token`, `pass` and `probe` build on it.

use crate::config::{RemoteConfig, UpstreamAuth};

/// Adds the remote's credentials. Only ever called for requests to an origin
/// they may go to ([`super::Remote::authorize`], and redirect hops to the
/// remote's mirrors); redirects elsewhere are refused, and reqwest drops
/// `Authorization` on any cross-host redirect.
pub fn authorize(request: reqwest::RequestBuilder, auth: &UpstreamAuth) -> reqwest::RequestBuilder {
    match auth {
        UpstreamAuth::None => request,
        UpstreamAuth::Basic { username, password } => {
            request.basic_auth(username, Some(password.expose()))
        }
        UpstreamAuth::Bearer(token) => request.bearer_auth(token.expose()),
    }
}

/// Where a registry remote may be sent off its mirrors (a redirect to blob
/// storage, a token realm a challenge names): over https, or over the
/// scheme of one of its mirrors; never to a loopback, link-local, private
/// or unspecified address (an IP literal, or `localhost`) unless one of its
/// mirrors is such an address itself. A host name is not resolved here: a
/// name that resolves inward is the DNS operator's to prevent.
#[derive(Debug, Clone)]
pub struct LeaveFor {
    /// The mirrors' schemes (`http` too when a mirror is plain HTTP).
    schemes: Vec<String>,
    /// A mirror is on an inward address: so may its storage be.
    inward_ok: bool,
}

impl LeaveFor {
    pub fn of(config: &RemoteConfig) -> LeaveFor {
        LeaveFor {
            schemes: config
                .mirrors
                .iter()
                .map(|m| m.scheme().to_string())
                .collect(),
            inward_ok: config.mirrors.iter().any(is_inward),
        }
    }

    pub fn allows(&self, url: &url::Url) -> bool {
        let scheme_ok = url.scheme() == "https" || self.schemes.iter().any(|s| s == url.scheme());
        scheme_ok && (self.inward_ok || !is_inward(url))
    }
}

/// Whether `url`'s host is this machine or its network: a loopback,
/// link-local, private (RFC 1918, ULA), shared (RFC 6598) or unspecified IP
/// literal, or `localhost`.
pub fn is_inward(url: &url::Url) -> bool {
    use std::net::IpAddr;
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            return name == "localhost" || name.ends_with(".localhost");
        }
        None => return true,
    };
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_private()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xffc0) == 0xfe80
                || (first & 0xfe00) == 0xfc00
        }
    }
}

/// Validators of a cached copy, sent when revalidating it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Validators<'a> {
    pub etag: Option<&'a str>,
    pub last_modified: Option<&'a str>,
}

impl Validators<'_> {
    pub(super) fn any(&self) -> bool {
        self.etag.is_some() || self.last_modified.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leave_for(mirrors: &[&str]) -> LeaveFor {
        LeaveFor {
            schemes: mirrors
                .iter()
                .map(|m| url::Url::parse(m).unwrap().scheme().to_string())
                .collect(),
            inward_ok: mirrors
                .iter()
                .any(|m| is_inward(&url::Url::parse(m).unwrap())),
        }
    }

    #[test]
    fn registry_redirects_go_out_over_https_and_never_inward() {
        let hub = leave_for(&["https://registry-1.docker.io"]);
        let allows = |rule: &LeaveFor, to: &str| rule.allows(&url::Url::parse(to).unwrap());
        assert!(allows(
            &hub,
            "https://production.cloudflare.docker.com/blob"
        ));
        for refused in [
            "http://production.cloudflare.docker.com/blob",
            "https://127.0.0.1/x",
            "https://10.1.2.3/x",
            "https://172.16.0.1/x",
            "https://192.168.1.1/x",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/x",
            "https://0.0.0.0/x",
            "https://[::1]/x",
            "https://[fe80::1]/x",
            "https://[fd00::1]/x",
            "https://[::ffff:127.0.0.1]/x",
            "https://localhost/x",
            "https://a.localhost./x",
            "file:///etc/passwd",
        ] {
            assert!(!allows(&hub, refused), "{refused}");
        }
        // A registry on this machine over plain HTTP may send its own way.
        let local = leave_for(&["http://127.0.0.1:5000"]);
        assert!(allows(&local, "http://127.0.0.1:5001/blob"));
        assert!(allows(&local, "http://storage.example/blob"));
    }
}
