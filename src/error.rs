//! Errors the proxy can answer with, and the one place they become HTTP statuses.
//!
//! Every error says which side it came from (the client, an upstream mirror, or
//! our own disk and database) and whether the client may retry it.
//! [`ProxyError::status`] is the only mapping from causes to status codes.
//! An [`AttemptError`] is one mirror's failure: `upstream::fetch` moves on to
//! the next mirror after every one of them (a 404 from one mirror does not
//! prove the others lack the file).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The challenge of a 401: HTTP Basic, which every client here answers
/// (container clients too, after `/v2/` asks for it).
pub const CHALLENGE: &str = "Basic realm=\"mirrorcache\"";

/// Which side of the proxy an error belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Downstream,
    Upstream,
    Internal,
}

/// Why one upstream attempt (one mirror) failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AttemptError {
    #[error("connect failed: {0}")]
    Connect(String),
    #[error("no response headers within {0:?}")]
    FirstByteTimeout(std::time::Duration),
    #[error("upstream answered {0}")]
    Status(u16),
    #[error("request failed: {0}")]
    Request(String),
}

impl AttemptError {
    pub fn is_timeout(&self) -> bool {
        matches!(self, AttemptError::FirstByteTimeout(_))
    }
}

/// An error that ends a request (before or while its response is sent).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProxyError {
    #[error("bad request path: {0}")]
    BadPath(&'static str),
    #[error("no remote named {0:?}")]
    UnknownRemote(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    /// A write (publish, unpublish, yank, login): said plainly, in a body
    /// npm and cargo both show their users.
    #[error(
        "mirrorcache is a read-only cache: publish to the registry itself, not through the proxy"
    )]
    ReadOnly,
    /// Refused by the remote's guard (`deny`, `allow`, `min_release_age`):
    /// the one-line reason goes in the body (npm prints `error`, cargo the
    /// body) and, with `in_reason_phrase`, in the status line, which is all
    /// pip prints (npm prints both: there it would say it twice).
    #[error("{reason}")]
    Refused {
        reason: String,
        in_reason_phrase: bool,
    },
    #[error("request body over the limit of {limit} bytes")]
    RequestTooLarge { limit: usize },
    /// The request body did not arrive within `server.body_read_timeout`.
    #[error("request body not received within server.body_read_timeout")]
    RequestTimeout,
    #[error("not found on any mirror")]
    NotFound { status: u16 },
    #[error("every mirror failed ({attempts} attempts); last: {last}")]
    MirrorsFailed { attempts: usize, last: AttemptError },
    #[error("every mirror is at its in-flight limit or on probation")]
    MirrorsBusy,
    /// Every mirror answered 429 (or is waiting out its `Retry-After`).
    #[error("upstream rate limit (429): {message}; retry after {retry_after} s")]
    RateLimited { retry_after: u64, message: String },
    #[error("upstream body of {size} bytes exceeds the limit of {limit}")]
    TooLarge { size: u64, limit: u64 },
    #[error("upstream body broke off: {0}")]
    UpstreamBody(String),
    /// Every mirror that answered sent bytes whose digest is not the one the
    /// index declared (the first two of the 502 body's lines name both).
    #[error("no mirror sent the declared bytes: expected {expected}, received {received}")]
    IntegrityMismatch { expected: String, received: String },
    /// `require_declared_hash`: no index declared this artifact's digest.
    #[error("refused: no index declared a digest for this artifact (require_declared_hash)")]
    Undeclared,
    #[error("store: {0}")]
    Store(String),
    #[error("metadata: {0}")]
    Metadata(String),
    #[error("{0} fills in progress: server.max_fills reached")]
    FillsBusy(usize),
    #[error("the fill ended without an answer")]
    FillAborted,
    /// Documents being built fill `documents::BUILDING_BYTES` for longer
    /// than `documents::BUILD_WAIT`.
    #[error("too many documents being built; retry shortly")]
    DocumentsBusy,
    /// The remote is not anonymous and the request has no valid
    /// credentials: 401 with a challenge. Says nothing of the path.
    #[error("authentication required")]
    Unauthenticated,
    /// An `Authorization` header that cannot be read.
    #[error("malformed Authorization header: {0}")]
    BadCredentials(&'static str),
    /// Too many failed logins from this peer lately.
    #[error("too many failed logins; retry later")]
    TooManyFailures,
    /// Too many password checks are waiting for the bcrypt threads.
    #[error("too many logins being checked; retry shortly")]
    LoginsBusy,
    /// Credentials could not be checked (the token table is unreachable).
    #[error("credentials cannot be checked now")]
    AuthUnavailable,
}

impl ProxyError {
    pub fn side(&self) -> Side {
        match self {
            ProxyError::BadPath(_)
            | ProxyError::UnknownRemote(_)
            | ProxyError::MethodNotAllowed
            | ProxyError::ReadOnly
            | ProxyError::Refused { .. }
            | ProxyError::RequestTooLarge { .. }
            | ProxyError::RequestTimeout
            | ProxyError::Undeclared
            | ProxyError::Unauthenticated
            | ProxyError::BadCredentials(_)
            | ProxyError::TooManyFailures
            | ProxyError::LoginsBusy => Side::Downstream,
            ProxyError::NotFound { .. }
            | ProxyError::MirrorsFailed { .. }
            | ProxyError::MirrorsBusy
            | ProxyError::RateLimited { .. }
            | ProxyError::TooLarge { .. }
            | ProxyError::UpstreamBody(_)
            | ProxyError::IntegrityMismatch { .. } => Side::Upstream,
            ProxyError::Store(_)
            | ProxyError::Metadata(_)
            | ProxyError::FillsBusy(_)
            | ProxyError::FillAborted
            | ProxyError::DocumentsBusy
            | ProxyError::AuthUnavailable => Side::Internal,
        }
    }

    /// Whether the client may usefully retry the same request later.
    pub fn retryable(&self) -> bool {
        matches!(self.side(), Side::Upstream | Side::Internal)
            && !matches!(
                self,
                ProxyError::NotFound { .. } | ProxyError::TooLarge { .. }
            )
    }

    /// The one mapping from error causes to HTTP statuses.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::BadPath(_) | ProxyError::BadCredentials(_) => StatusCode::BAD_REQUEST,
            ProxyError::Unauthenticated => StatusCode::UNAUTHORIZED,
            ProxyError::TooManyFailures
            | ProxyError::LoginsBusy
            | ProxyError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::AuthUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::UnknownRemote(_) => StatusCode::NOT_FOUND,
            ProxyError::MethodNotAllowed | ProxyError::ReadOnly => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::RequestTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ProxyError::Undeclared | ProxyError::Refused { .. } => StatusCode::FORBIDDEN,
            ProxyError::NotFound { status } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::NOT_FOUND)
            }
            ProxyError::MirrorsFailed { last, .. } if last.is_timeout() => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ProxyError::MirrorsBusy | ProxyError::FillsBusy(_) | ProxyError::DocumentsBusy => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ProxyError::MirrorsFailed { .. }
            | ProxyError::TooLarge { .. }
            | ProxyError::UpstreamBody(_)
            | ProxyError::IntegrityMismatch { .. }
            | ProxyError::FillAborted => StatusCode::BAD_GATEWAY,
            ProxyError::Store(_) | ProxyError::Metadata(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// What the client is told: short, and never the internal cause.
    fn client_message(&self) -> String {
        match self {
            ProxyError::Store(_) | ProxyError::Metadata(_) => "internal error".to_string(),
            ProxyError::FillsBusy(_) => "too many downloads in progress; retry shortly".to_string(),
            ProxyError::MirrorsFailed { attempts, .. } => {
                format!("every mirror failed ({attempts} attempts)")
            }
            other => other.to_string(),
        }
    }
}

impl IntoResponse for ProxyError {
    fn into_response(self) -> Response {
        let status = self.status();
        if self.side() == Side::Downstream {
            tracing::debug!(error = %self, "refused request");
        } else {
            tracing::warn!(error = %self, side = ?self.side(), retryable = self.retryable(), "request failed");
        }
        let mut response = if matches!(
            self,
            ProxyError::ReadOnly | ProxyError::Undeclared | ProxyError::Refused { .. }
        ) {
            // npm prints `error`, cargo prints `errors[].detail`.
            let message = self.client_message();
            axum::Json(serde_json::json!({"error": message, "errors": [{"detail": message}]}))
                .into_response()
        } else {
            (status, format!("{}\n", self.client_message())).into_response()
        };
        *response.status_mut() = status;
        if let ProxyError::Refused {
            reason,
            in_reason_phrase: true,
        } = &self
        {
            // Visible characters only, as HTTP/1.1 allows in a reason phrase.
            let phrase: String = reason
                .chars()
                .map(|c| {
                    if c.is_ascii_graphic() || c == ' ' {
                        c
                    } else {
                        '?'
                    }
                })
                .collect();
            if let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(phrase) {
                response.extensions_mut().insert(phrase);
            }
        }
        if status == StatusCode::METHOD_NOT_ALLOWED {
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(CHALLENGE),
            );
        }
        if status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body is not waited for: the connection ends.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if status == StatusCode::TOO_MANY_REQUESTS {
            let after = match &self {
                ProxyError::LoginsBusy => HeaderValue::from_static("1"),
                ProxyError::RateLimited { retry_after, .. } => HeaderValue::from(*retry_after),
                _ => HeaderValue::from_static("60"),
            };
            response.headers_mut().insert(header::RETRY_AFTER, after);
        }
        response
    }
}
