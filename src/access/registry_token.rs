//! Registry tokens (the distribution token specification, as `docker login`,
//! containerd and podman use it): short-lived access tokens naming the
//! repositories they may pull, and refresh tokens (`docker login`'s identity
//! token) that stand for a user until they expire. Both are JWTs signed with
//! HS256 by a key kept in the metadata database (migration 0008), made by the
//! first instance that needs it, so every instance sharing the database
//! accepts the tokens of every other.

use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::meta::sql::db_error;
use crate::meta::sqlite::execute_retrying;
use crate::meta::MetadataStore;

/// The `service` of the challenge and the tokens' audience.
pub const SERVICE: &str = "mirrorcache";
const ISSUER: &str = "mirrorcache";
/// How long an access token is good for: a pull asks again after this.
pub const ACCESS_SECONDS: u64 = 300;
/// How long a refresh token (`docker login`'s stored identity token) is
/// good for.
pub const REFRESH_SECONDS: u64 = 30 * 24 * 3600;

/// One grant of an access token: `repository:<name>:<actions>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub actions: Vec<String>,
}

impl Grant {
    pub fn pull(name: &str) -> Grant {
        Grant {
            kind: "repository".to_string(),
            name: name.to_string(),
            actions: vec!["pull".to_string()],
        }
    }

    /// A `scope` parameter (`repository:org/app:pull,push`) as the grant it
    /// asks for; `None` for any other resource type or a malformed scope.
    pub fn parse_scope(scope: &str) -> Option<Grant> {
        let (kind, rest) = scope.split_once(':')?;
        let (name, actions) = rest.rsplit_once(':')?;
        if kind != "repository" || name.is_empty() {
            return None;
        }
        Some(Grant {
            kind: kind.to_string(),
            name: name.to_string(),
            actions: actions.split(',').map(str::to_string).collect(),
        })
    }
}

/// What a token says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub aud: String,
    /// The user; empty for an anonymous caller's token.
    pub sub: String,
    pub iat: u64,
    pub nbf: u64,
    pub exp: u64,
    /// Access tokens: what they may pull. Refresh tokens: empty.
    #[serde(default)]
    pub access: Vec<Grant>,
    /// `"refresh"` for a refresh token; absent for an access token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typ: Option<String>,
    /// The access token (`mirrorcache token`) a refresh token was issued
    /// for: it stands only while that token does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<String>,
}

impl Claims {
    pub fn is_refresh(&self) -> bool {
        self.typ.as_deref() == Some("refresh")
    }

    /// Whether this access token may pull `name`.
    pub fn may_pull(&self, name: &str) -> bool {
        !self.is_refresh()
            && self.access.iter().any(|g| {
                g.kind == "repository" && g.name == name && g.actions.iter().any(|a| a == "pull")
            })
    }
}

/// Whether a bearer token has the shape of a JWT (three base64url parts),
/// as opposed to a `mirrorcache token`.
pub fn is_jwt(text: &str) -> bool {
    let base64url = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    text.split('.').count() == 3 && text.split('.').all(base64url)
}

/// The registry token a request's `Authorization` offers, if it offers one.
pub fn offered(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = super::credentials::header_of(headers).ok()??;
    match super::credentials::parse(value).ok()? {
        super::credentials::Offered::Token(text) if is_jwt(&text) => Some(text),
        _ => None,
    }
}

struct Keys {
    encoding: jsonwebtoken::EncodingKey,
    decoding: jsonwebtoken::DecodingKey,
}

/// The signing key, read from (or first written to) the metadata database
/// once per process.
#[derive(Default)]
pub struct RegistryTokens {
    keys: OnceCell<Keys>,
}

impl RegistryTokens {
    async fn keys(&self, meta: &MetadataStore) -> Result<&Keys, ProxyError> {
        self.keys
            .get_or_try_init(|| async {
                let secret = shared_secret(meta).await?;
                Ok(Keys {
                    encoding: jsonwebtoken::EncodingKey::from_secret(&secret),
                    decoding: jsonwebtoken::DecodingKey::from_secret(&secret),
                })
            })
            .await
    }

    /// A signed token of `user` (empty: anonymous) granting `access`, or a
    /// refresh token when `refresh` (tied to the `mirrorcache token` `tid`
    /// when the login used one). Returns the token and its lifetime.
    pub async fn issue(
        &self,
        meta: &MetadataStore,
        user: &str,
        access: Vec<Grant>,
        refresh: Option<Option<String>>,
    ) -> Result<(String, u64), ProxyError> {
        let keys = self.keys(meta).await?;
        let now = (now_ms() / 1000) as u64;
        let lifetime = if refresh.is_some() {
            REFRESH_SECONDS
        } else {
            ACCESS_SECONDS
        };
        let claims = Claims {
            iss: ISSUER.to_string(),
            aud: SERVICE.to_string(),
            sub: user.to_string(),
            iat: now,
            nbf: now.saturating_sub(10),
            exp: now + lifetime,
            access,
            typ: refresh.is_some().then(|| "refresh".to_string()),
            tid: refresh.flatten(),
        };
        let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        let token = jsonwebtoken::encode(&header, &claims, &keys.encoding).map_err(|e| {
            tracing::error!(error = %e, "could not sign a registry token");
            ProxyError::AuthUnavailable
        })?;
        Ok((token, lifetime))
    }

    /// The claims of a token this fleet signed that has not expired; `None`
    /// for any other text.
    pub async fn verify(
        &self,
        meta: &MetadataStore,
        token: &str,
    ) -> Result<Option<Claims>, ProxyError> {
        let keys = self.keys(meta).await?;
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        validation.set_audience(&[SERVICE]);
        validation.set_issuer(&[ISSUER]);
        validation.leeway = 0;
        validation.validate_nbf = true;
        Ok(
            jsonwebtoken::decode::<Claims>(token, &keys.decoding, &validation)
                .ok()
                .map(|data| data.claims),
        )
    }
}

/// The fleet's key: the row written by whichever instance came first.
async fn shared_secret(meta: &MetadataStore) -> Result<Vec<u8>, ProxyError> {
    let pool = meta.db.pool();
    let mut fresh = [0u8; 32];
    getrandom::fill(&mut fresh).map_err(|e| {
        tracing::error!(error = %e, "no random bytes for the registry signing key");
        ProxyError::AuthUnavailable
    })?;
    let fresh = hex::encode(fresh);
    execute_retrying(pool, || {
        sqlx::query(
            "INSERT INTO registry_keys (id, secret, created_at) VALUES ('hs256', $1, $2) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&fresh)
        .bind(now_ms())
    })
    .await
    .map_err(db_error)?;
    let (secret,): (String,) =
        sqlx::query_as("SELECT secret FROM registry_keys WHERE id = 'hs256'")
            .fetch_one(pool)
            .await
            .map_err(db_error)?;
    hex::decode(secret)
        .map_err(|_| ProxyError::Metadata("the registry signing key is not hex".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_into_repository_grants() {
        let grant = Grant::parse_scope("repository:org/app:pull,push").unwrap();
        assert_eq!(grant.name, "org/app");
        assert_eq!(grant.actions, ["pull", "push"]);
        // A registry with a port in the name is not a scope of ours, but a
        // name with colons in it parses from the right.
        assert_eq!(
            Grant::parse_scope("repository:a:b:pull").unwrap().name,
            "a:b"
        );
        assert!(Grant::parse_scope("registry:catalog:*").is_none());
        assert!(Grant::parse_scope("repository::pull").is_none());
        assert!(Grant::parse_scope("nonsense").is_none());
    }

    #[test]
    fn jwts_are_told_from_mirrorcache_tokens() {
        assert!(is_jwt("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIifQ.c2ln"));
        assert!(!is_jwt("mct_0123456789ab_secret"));
        assert!(!is_jwt("a.b"));
        assert!(!is_jwt("a.b.c.d"));
        assert!(!is_jwt("a..c"));
    }
}
