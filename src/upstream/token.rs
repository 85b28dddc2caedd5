//! Registry token authentication (the distribution spec's token flow), for
//! oci remotes: a request the registry answers 401 with
//! `WWW-Authenticate: Bearer realm=…,service=…,scope=…` is sent again with
//! a token fetched from the realm — anonymously, or with the remote's
//! `username` and password. Tokens are cached per (mirror, repository) until
//! they expire, and a 401 with a cached token fetches a fresh one.
//!
//! The client's own `Authorization` never reaches this room; the remote's
//! password goes only to the realm the mirror named (as docker sends it),
//! and tokens are wrapped so that no `Debug` or log shows them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, StatusCode};

use super::Remote;
use crate::config::UpstreamAuth;

/// Tokens issued without `expires_in` live 60 s (the spec's default).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(60);

/// A token is not used in its last seconds, so it cannot expire in flight.
const MARGIN: Duration = Duration::from_secs(5);

/// A bearer token; `Debug` never shows it.
#[derive(Clone)]
struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Tokens of one remote, by (mirror base URL, repository).
#[derive(Debug, Default)]
pub struct Tokens {
    // A std mutex: held only to read or insert, never across an await.
    issued: Mutex<HashMap<(String, String), (Token, Instant)>>,
}

impl Tokens {
    fn get(&self, mirror: &str, repository: &str) -> Option<Token> {
        let issued = self.issued.lock().expect("token cache poisoned");
        let (token, until) = issued.get(&(mirror.to_string(), repository.to_string()))?;
        (Instant::now() < *until).then(|| token.clone())
    }

    fn put(&self, mirror: &str, repository: &str, token: Token, lifetime: Duration) {
        let until = Instant::now() + lifetime.saturating_sub(MARGIN);
        let mut issued = self.issued.lock().expect("token cache poisoned");
        // Expired tokens go when the map is next written to.
        let now = Instant::now();
        issued.retain(|_, (_, until)| *until > now);
        issued.insert((mirror.to_string(), repository.to_string()), (token, until));
    }
}

/// A `WWW-Authenticate: Bearer …` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub realm: String,
    pub service: Option<String>,
    pub scope: Option<String>,
}

/// Parses `Bearer realm="…",service="…",scope="…"` (parameters in any
/// order, values quoted or not; a quoted value may hold commas).
pub fn parse_challenge(value: &str) -> Option<Challenge> {
    let (scheme, params) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut found: HashMap<String, String> = HashMap::new();
    let mut rest = params.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim(), &after[end..])
        };
        found.insert(key, value.to_string());
        rest = remaining.trim_start().trim_start_matches(',').trim_start();
    }
    Some(Challenge {
        realm: found.remove("realm").filter(|r| !r.is_empty())?,
        service: found.remove("service"),
        scope: found.remove("scope"),
    })
}

/// The repository an upstream path (`v2/<name>/…`) is in: the token scope's
/// key. Empty for the base endpoint.
fn repository_of(path: &str) -> &str {
    let rest = path.strip_prefix("v2/").unwrap_or(path);
    ["/manifests/", "/blobs/", "/tags/"]
        .iter()
        .find_map(|marker| rest.rfind(marker).map(|at| &rest[..at]))
        .unwrap_or("")
}

/// Sends `request` (to `mirror`, for `path`) with the cached token of its
/// repository, if any; a 401 that challenges for a bearer token gets a
/// token from the realm and the request once more. A registry asking for
/// basic credentials gets the remote's, when it has them. Whatever the
/// second answer is, it is the answer.
pub async fn send(
    remote: &Remote,
    mirror: &str,
    path: &str,
    request: reqwest::RequestBuilder,
) -> reqwest::Result<reqwest::Response> {
    let repository = repository_of(path);
    let retry = request.try_clone();
    let first = match remote.tokens.get(mirror, repository) {
        Some(token) => request.bearer_auth(&token.0),
        None => request,
    };
    let response = first.send().await?;
    if response.status() != StatusCode::UNAUTHORIZED {
        return Ok(response);
    }
    let Some(retry) = retry else {
        return Ok(response);
    };
    let challenge = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let Some(challenge) = challenge else {
        return Ok(response);
    };
    if let Some(bearer) = parse_challenge(&challenge) {
        match issue(remote, &bearer).await {
            Some((token, lifetime)) => {
                remote
                    .tokens
                    .put(mirror, repository, token.clone(), lifetime);
                return retry.bearer_auth(&token.0).send().await;
            }
            None => return Ok(response),
        }
    }
    match &remote.config.auth {
        UpstreamAuth::Basic { username, password }
            if challenge
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("basic") =>
        {
            retry
                .basic_auth(username, Some(password.expose()))
                .send()
                .await
        }
        _ => Ok(response),
    }
}

/// Whether the remote's credentials may go to this token realm: one of the
/// remote's own mirrors (same scheme, host and port), a realm the operator
/// listed in `token_realms`, or Docker Hub's own token service for a Docker
/// Hub mirror. Any other host named in a challenge gets no password.
fn realm_is_trusted(config: &crate::config::RemoteConfig, realm: &url::Url) -> bool {
    use crate::config::origin;
    let wanted = origin(realm);
    let hub_realm = realm.scheme() == "https" && realm.host_str() == Some("auth.docker.io");
    config
        .mirrors
        .iter()
        .chain(&config.token_realms)
        .any(|m| origin(m) == wanted)
        || (hub_realm && config.mirrors.iter().any(crate::kind::oci::is_docker_hub))
}

/// The token service's answer.
#[derive(serde::Deserialize)]
struct Issued {
    token: Option<String>,
    access_token: Option<String>,
    expires_in: Option<u64>,
}

/// Asks the challenge's realm for a token (with the remote's basic
/// credentials when it has them). `None` when it cannot be had: the 401
/// stands and counts as the mirror's answer.
async fn issue(remote: &Remote, challenge: &Challenge) -> Option<(Token, Duration)> {
    let mut url = url::Url::parse(&challenge.realm).ok()?;
    // A realm on one of the mirrors' own origins is theirs to name; any
    // other goes by the rule of the registry's redirects.
    if !realm_is_trusted(&remote.config, &url)
        && !super::outbound::LeaveFor::of(&remote.config).allows(&url)
    {
        tracing::warn!(remote = %remote.name, "the registry names a token realm this proxy does not ask (not https, or an inward address)");
        return None;
    }
    {
        let mut query = url.query_pairs_mut();
        if let Some(service) = &challenge.service {
            query.append_pair("service", service);
        }
        if let Some(scope) = &challenge.scope {
            for scope in scope.split(' ').filter(|s| !s.is_empty()) {
                query.append_pair("scope", scope);
            }
        }
    }
    let trusted = realm_is_trusted(&remote.config, &url);
    let mut request = remote.client().get(url);
    if let UpstreamAuth::Basic { username, password } = &remote.config.auth {
        if trusted {
            request = request.basic_auth(username, Some(password.expose()));
        } else {
            tracing::warn!(
                remote = %remote.name,
                "the registry names a token realm on another host; asking it without the \
                 remote's credentials (list it in `token_realms` to send them)"
            );
        }
    }
    let response = match request.send().await {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            tracing::warn!(remote = %remote.name, status = r.status().as_u16(), "the token service refused a token");
            return None;
        }
        Err(e) => {
            tracing::warn!(remote = %remote.name, error = %e.without_url(), "the token service failed");
            return None;
        }
    };
    let body = response.bytes().await.ok()?;
    let issued: Issued = serde_json::from_slice(&body).ok()?;
    let token = issued.token.or(issued.access_token)?;
    let lifetime = issued
        .expires_in
        .map_or(DEFAULT_LIFETIME, Duration::from_secs);
    Some((Token(token), lifetime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_in_any_order_with_quoted_commas() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/alpine:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.realm, "https://auth.docker.io/token");
        assert_eq!(c.service.as_deref(), Some("registry.docker.io"));
        assert_eq!(
            c.scope.as_deref(),
            Some("repository:library/alpine:pull,push")
        );
        let c = parse_challenge(r#"bearer scope="s", realm=http://127.0.0.1:1/t"#).unwrap();
        assert_eq!(c.realm, "http://127.0.0.1:1/t");
        assert_eq!(c.service, None);
        assert_eq!(parse_challenge(r#"Basic realm="x""#), None);
        assert_eq!(parse_challenge(r#"Bearer service="x""#), None);
    }

    #[test]
    fn tokens_are_kept_per_mirror_and_repository_until_they_expire() {
        let tokens = Tokens::default();
        tokens.put("m", "a", Token("t".into()), Duration::from_secs(60));
        tokens.put("m", "b", Token("u".into()), Duration::from_secs(1));
        assert_eq!(tokens.get("m", "a").unwrap().0, "t");
        assert!(tokens.get("n", "a").is_none());
        // Within the margin: not used.
        assert!(tokens.get("m", "b").is_none());
        assert_eq!(format!("{:?}", tokens.get("m", "a").unwrap()), "***");
    }

    #[test]
    fn the_repository_is_the_name_before_the_endpoint() {
        assert_eq!(
            repository_of("v2/library/alpine/manifests/latest"),
            "library/alpine"
        );
        assert_eq!(repository_of("v2/a/b/blobs/sha256:00"), "a/b");
        assert_eq!(repository_of("v2/a/tags/list"), "a");
        assert_eq!(repository_of("v2/"), "");
    }
}
