//! The logins a kind answers here instead of asking a mirror
//! ([`AnsweredHere`]): a mirror would answer them for the remote's own
//! credentials, so they are answered from the caller's, already checked by
//! `access::admit`.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::Served;
use crate::access::credentials::{self, Offered};
use crate::access::{token, Caller};
use crate::error::ProxyError;
use crate::kind::AnsweredHere;
use crate::metrics::CacheStatus;

/// The answer to a login path, for `caller`, who sent `headers`.
pub fn answer(
    here: Option<AnsweredHere>,
    caller: &Caller,
    headers: &HeaderMap,
) -> Result<Served, ProxyError> {
    match (here, caller.user()) {
        (Some(AnsweredHere::Whoami), Some(user)) => Ok(text(user.to_string())),
        (Some(AnsweredHere::Whoami), None) => Err(ProxyError::Unauthenticated),
        (Some(AnsweredHere::TokenLogin), Some(_)) => match basic_password(headers) {
            Some(password) if token::is_token(&password) => Ok(text(password)),
            _ => Err(ProxyError::Refused {
                reason: "log in with one of this proxy's tokens as the password \
                         (`mirrorcache token add`); a password is not a token"
                    .to_string(),
                in_reason_phrase: false,
            }),
        },
        _ => Err(ProxyError::NotFound { status: 404 }),
    }
}

/// The password of the request's Basic credentials, if it sent some.
fn basic_password(headers: &HeaderMap) -> Option<String> {
    let value = credentials::header_of(headers).ok()??;
    match credentials::parse(value).ok()? {
        Offered::Basic { password, .. } => Some(password),
        _ => None,
    }
}

/// A 200 of `body` as plain text, kept by no cache.
fn text(body: String) -> Served {
    let mut response: Response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Served::hit(response, CacheStatus::Pass)
}
