//! Who is asking: the credentials of a request checked against the htpasswd
//! users (`[auth]`) and the token table, verified credentials remembered by a
//! hash of their header for a minute (`verified`) (bcrypt costs milliseconds and must not
//! run per request), failed logins limited per peer. Which remote a caller
//! may read is `RemoteAccess::admits`; answering is `http::access`.
//!
//! Secrets are compared in constant time: bcrypt for passwords, on a pool of
//! its own (`bcrypt_pool`; an unknown user is checked against a dummy hash
//! of the cost most users' hashes have, so it takes as long as most wrong
//! passwords), `subtle` for token hashes.

mod bcrypt_pool;
pub mod credentials;
pub mod lfs;
pub mod limit;
pub mod registry_token;
pub mod token;
pub mod token_table;
mod verified;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::http::HeaderMap;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

use crate::cache::Cache;
use crate::clock::now_ms;
use crate::config::AuthConfig;
use credentials::Offered;
use limit::FailureLimiter;
use registry_token::{Claims, RegistryTokens};
use token_table::TokenTable;
use verified::{Verified, VerifiedCache};

/// How long a verified credential is taken on trust. A reload of the
/// htpasswd file forgets them all at once; a token revoked on another
/// instance stops working here within this.
pub const VERIFIED_FOR: Duration = Duration::from_secs(60);

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Anonymous,
    User(Arc<str>),
}

impl Caller {
    pub fn user(&self) -> Option<&str> {
        match self {
            Caller::Anonymous => None,
            Caller::User(name) => Some(name),
        }
    }
}

/// What a request's credentials are checked for: registry tokens are taken
/// by the registry API only, each for the repositories it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Any route but the registry API: registry tokens are refused.
    Other,
    /// `/v2/` itself: any registry token this fleet signed.
    RegistryBase,
    /// A pull of this repository, as the request names it.
    Pull(&'a str),
}

/// Why credentials were not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The header cannot be read (two of them, bad base64, …): 400.
    Malformed(&'static str),
    /// Wrong, unknown, expired or revoked: 401.
    BadCredentials,
    /// This peer failed too often lately: 429.
    TooManyFailures,
    /// The token table could not be read: 503.
    Unavailable,
    /// Too many password checks waiting already: 429, nothing counted.
    Busy,
}

/// The users of one htpasswd reading.
struct Users {
    hashes: HashMap<String, Arc<str>>,
    /// Checked for an unknown user, at the cost most users' hashes have.
    dummy: Arc<str>,
}

impl Users {
    fn of(auth: Option<&AuthConfig>) -> Users {
        let hashes: HashMap<String, Arc<str>> = auth
            .map(|a| {
                a.users
                    .iter()
                    .map(|u| (u.name.clone(), Arc::from(u.hash.expose())))
                    .collect()
            })
            .unwrap_or_default();
        let mut costs: HashMap<u32, usize> = HashMap::new();
        for cost in hashes
            .values()
            .filter_map(|h| h.get(4..6)?.parse::<u32>().ok())
        {
            *costs.entry(cost).or_default() += 1;
        }
        // The most common cost; of equally common ones, the highest.
        let cost = costs
            .into_iter()
            .max_by_key(|&(cost, n)| (n, cost))
            .map_or(4, |(cost, _)| cost);
        let dummy = bcrypt::hash("mirrorcache: not a user", cost)
            .unwrap_or_else(|_| bcrypt::hash("x", 4).expect("bcrypt at cost 4"));
        Users {
            hashes,
            dummy: dummy.into(),
        }
    }
}

pub struct Access {
    /// `[auth]` is set: credentials are read at all.
    enabled: std::sync::atomic::AtomicBool,
    users: ArcSwap<Users>,
    /// By SHA-256 of the `Authorization` header.
    verified: VerifiedCache,
    failures: FailureLimiter,
    /// Where passwords are checked.
    bcrypt: bcrypt_pool::BcryptPool,
    /// The token table is in its metadata database.
    cache: Arc<Cache>,
    /// Registry tokens and their signing key.
    registry: RegistryTokens,
}

impl Access {
    pub fn new(auth: Option<&AuthConfig>, cache: Arc<Cache>) -> Access {
        Access {
            enabled: auth.is_some().into(),
            users: ArcSwap::from_pointee(Users::of(auth)),
            verified: VerifiedCache::default(),
            failures: FailureLimiter::default(),
            bcrypt: bcrypt_pool::BcryptPool::new(),
            cache,
            registry: RegistryTokens::default(),
        }
    }

    /// Whether `[auth]` is configured.
    pub fn enabled(&self) -> bool {
        self.enabled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes the users of a new reading of the htpasswd file, forgetting
    /// every credential verified under the old one.
    pub fn reload(&self, auth: Option<&AuthConfig>) {
        self.users.store(Arc::new(Users::of(auth)));
        self.enabled
            .store(auth.is_some(), std::sync::atomic::Ordering::Relaxed);
        self.verified.clear();
    }

    /// Whether `user` is in the htpasswd file now.
    pub fn has_user(&self, user: &str) -> bool {
        self.users.load().hashes.contains_key(user)
    }

    /// The caller of a request with these headers, from `peer`.
    pub async fn identify(&self, headers: &HeaderMap, peer: IpAddr) -> Result<Caller, Refusal> {
        self.identify_for(headers, peer, Scope::Other).await
    }

    /// The caller of a request with these headers, from `peer`, for
    /// `scope`: a registry token counts only in the registry API, and only
    /// for a repository it names.
    pub async fn identify_for(
        &self,
        headers: &HeaderMap,
        peer: IpAddr,
        scope: Scope<'_>,
    ) -> Result<Caller, Refusal> {
        let Some(value) = credentials::header_of(headers).map_err(|m| Refusal::Malformed(m.0))?
        else {
            return Ok(Caller::Anonymous);
        };
        let key: [u8; 32] = Sha256::digest(value).into();
        if let Some(user) = self.verified.get(&key, now_ms()) {
            return Ok(Caller::User(user));
        }
        let offered = credentials::parse(value).map_err(|m| Refusal::Malformed(m.0))?;
        if offered == Offered::None {
            return Ok(Caller::Anonymous);
        }
        if let Offered::Token(text) = &offered {
            if registry_token::is_jwt(text) {
                // An HMAC check, never remembered: the scope differs per
                // request.
                return self.registry_caller(text, scope).await;
            }
        }
        // Counted as a failure from now until it succeeds.
        if !self.failures.begin(peer) {
            return Err(Refusal::TooManyFailures);
        }
        let verified = match offered {
            Offered::None => unreachable!("answered above"),
            Offered::Unknown => Ok(None),
            Offered::Token(text) => self.token(&text, None).await,
            Offered::Basic { user, password } if token::is_token(&password) => {
                self.token(&password, Some(&user)).await
            }
            Offered::Basic { user, password } => self.password(user, password).await,
        };
        // Neither a failure nor a success: the check was not run.
        if matches!(verified, Err(Refusal::Unavailable | Refusal::Busy)) {
            self.failures.forgive(peer);
        }
        match verified? {
            Some(mut verified) => {
                self.failures.forgive(peer);
                let user = verified.user.clone();
                let trusted_until = now_ms() + VERIFIED_FOR.as_millis() as i64;
                verified.until_ms = verified.until_ms.min(trusted_until);
                self.verified.insert(key, verified);
                Ok(Caller::User(user))
            }
            None => Err(Refusal::BadCredentials),
        }
    }

    /// The caller a registry access token stands for, if it is one of this
    /// fleet's, unexpired, for `scope`, and its user is still a user.
    async fn registry_caller(&self, token: &str, scope: Scope<'_>) -> Result<Caller, Refusal> {
        let claims = self.registry_claims(token).await?;
        let covers = match scope {
            Scope::Other => false,
            Scope::RegistryBase => true,
            Scope::Pull(name) => claims.may_pull(name),
        };
        if claims.is_refresh() || !covers {
            return Err(Refusal::BadCredentials);
        }
        if claims.sub.is_empty() {
            return Ok(Caller::Anonymous);
        }
        if !self.has_user(&claims.sub) {
            return Err(Refusal::BadCredentials);
        }
        Ok(Caller::User(claims.sub.into()))
    }

    async fn registry_claims(&self, token: &str) -> Result<Claims, Refusal> {
        self.registry
            .verify(&self.cache.meta, token)
            .await
            .map_err(|_| Refusal::Unavailable)?
            .ok_or(Refusal::BadCredentials)
    }

    /// The user (and `mirrorcache token` id, if the login used one) a
    /// registry refresh token stands for: signed by this fleet, unexpired,
    /// its user still a user, its token not revoked.
    pub async fn refresh_login(&self, token: &str) -> Result<(Arc<str>, Option<String>), Refusal> {
        let claims = self.registry_claims(token).await?;
        if !claims.is_refresh() || claims.sub.is_empty() || !self.has_user(&claims.sub) {
            return Err(Refusal::BadCredentials);
        }
        if let Some(id) = &claims.tid {
            let row = TokenTable::of(&self.cache.meta)
                .find(id)
                .await
                .map_err(|_| Refusal::Unavailable)?;
            let live = row.is_some_and(|r| {
                r.user == claims.sub && r.expires_at_ms.is_none_or(|until| now_ms() < until)
            });
            if !live {
                return Err(Refusal::BadCredentials);
            }
        }
        Ok((claims.sub.into(), claims.tid))
    }

    /// Signs a registry access token of `caller` granting `access`, and a
    /// refresh token with it when `refresh` is `Some` (the `mirrorcache
    /// token` id the login used, if any). Tokens and the access token's
    /// lifetime in seconds.
    pub async fn registry_tokens(
        &self,
        caller: &Caller,
        access: Vec<registry_token::Grant>,
        refresh: Option<Option<String>>,
    ) -> Result<(String, u64, Option<String>), crate::error::ProxyError> {
        let user = caller.user().unwrap_or("");
        let meta = &self.cache.meta;
        let (token, lifetime) = self.registry.issue(meta, user, access, None).await?;
        let refresh = match refresh {
            Some(tid) if !user.is_empty() => Some(
                self.registry
                    .issue(meta, user, Vec::new(), Some(tid))
                    .await?
                    .0,
            ),
            _ => None,
        };
        Ok((token, lifetime, refresh))
    }

    /// bcrypt, on its own pool: an unknown user is checked against the
    /// dummy hash, so both failures take the same time.
    async fn password(&self, user: String, password: String) -> Result<Option<Verified>, Refusal> {
        let users = self.users.load();
        let (known, hash) = match users.hashes.get(&user) {
            Some(hash) => (true, hash.clone()),
            None => (false, users.dummy.clone()),
        };
        let matches = self
            .bcrypt
            .verify(password, hash)
            .await
            .map_err(|bcrypt_pool::Busy| Refusal::Busy)?;
        Ok((known && matches).then(|| Verified {
            user: user.into(),
            until_ms: i64::MAX,
        }))
    }

    /// A token: its row by id, the hash of its secret compared in constant
    /// time, its expiry, and its user still in the htpasswd file (and the
    /// one named, when it came as a Basic password).
    async fn token(&self, text: &str, named: Option<&str>) -> Result<Option<Verified>, Refusal> {
        let Some((id, secret)) = token::split(text) else {
            return Ok(None);
        };
        let offered = token::hash_secret(secret);
        let row = TokenTable::of(&self.cache.meta)
            .find(id)
            .await
            .map_err(|_| Refusal::Unavailable)?;
        let stored = row.as_ref().map_or(&offered, |r| &r.secret_hash);
        let same: bool = offered.as_bytes().ct_eq(stored.as_bytes()).into();
        let Some(row) = row.filter(|_| same) else {
            return Ok(None);
        };
        let now = now_ms();
        if row.expires_at_ms.is_some_and(|until| now >= until)
            || !self.has_user(&row.user)
            || named.is_some_and(|n| n != row.user)
        {
            return Ok(None);
        }
        Ok(Some(Verified {
            user: row.user.into(),
            until_ms: row.expires_at_ms.unwrap_or(i64::MAX),
        }))
    }
}
