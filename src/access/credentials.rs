//! What an `Authorization` header offers: nothing, a user and password (HTTP
//! Basic, any case of the scheme name), or a token (`Bearer <token>`, or the
//! bare token cargo sends). Two headers, bad base64, non-UTF-8 and a Basic
//! pair without a colon are malformed; empty Basic credentials (`Basic Og==`,
//! which skopeo sends after a challenge) are no credentials.

use axum::http::{header, HeaderMap};
use base64::Engine as _;

/// The credentials one request offers.
#[derive(PartialEq, Eq)]
pub enum Offered {
    None,
    Basic {
        user: String,
        password: String,
    },
    Token(String),
    /// A scheme this proxy does not take (`Digest`, `Negotiate`, …).
    Unknown,
}

/// A header that cannot be read as credentials at all (answered 400).
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

// No `Debug` that could print a password.
impl std::fmt::Debug for Offered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Offered::None => "None",
            Offered::Basic { .. } => "Basic(***)",
            Offered::Token(_) => "Token(***)",
            Offered::Unknown => "Unknown",
        })
    }
}

/// The request's one `Authorization` header, if it has one.
pub fn header_of(headers: &HeaderMap) -> Result<Option<&[u8]>, Malformed> {
    let mut all = headers.get_all(header::AUTHORIZATION).iter();
    let first = all.next();
    if all.next().is_some() {
        return Err(Malformed("more than one Authorization header"));
    }
    Ok(first.map(|v| v.as_bytes()))
}

/// Reads one `Authorization` header value.
pub fn parse(value: &[u8]) -> Result<Offered, Malformed> {
    let text = std::str::from_utf8(value).map_err(|_| Malformed("Authorization is not UTF-8"))?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(Offered::None);
    }
    let Some((scheme, rest)) = text.split_once(' ') else {
        // cargo sends its token bare.
        return Ok(Offered::Token(text.to_string()));
    };
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|_| Malformed("Basic credentials are not base64"))?;
        let decoded =
            String::from_utf8(decoded).map_err(|_| Malformed("Basic credentials are not UTF-8"))?;
        let Some((user, password)) = decoded.split_once(':') else {
            return Err(Malformed("Basic credentials without a colon"));
        };
        return Ok(match (user.is_empty(), password.is_empty()) {
            (true, true) => Offered::None,
            // A token as the password of no user (how some clients send one).
            (true, false) => Offered::Token(password.to_string()),
            _ => Offered::Basic {
                user: user.to_string(),
                password: password.to_string(),
            },
        });
    }
    if scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token") {
        if rest.is_empty() {
            return Err(Malformed("an empty bearer token"));
        }
        return Ok(Offered::Token(rest.to_string()));
    }
    Ok(Offered::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(pair: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
        .into_bytes()
    }

    #[test]
    fn schemes_are_read_in_any_case() {
        assert_eq!(
            parse(&basic("ci:pw")).unwrap(),
            Offered::Basic {
                user: "ci".into(),
                password: "pw".into()
            }
        );
        let lower = basic("ci:pw").to_ascii_lowercase();
        // The base64 is case-sensitive; only the scheme is lower-cased here.
        let mut lower_scheme = b"basic".to_vec();
        lower_scheme.extend_from_slice(&basic("ci:pw")[5..]);
        assert!(matches!(
            parse(&lower_scheme).unwrap(),
            Offered::Basic { .. }
        ));
        assert!(parse(&lower).is_ok() || parse(&lower).is_err());
        assert_eq!(parse(b"bearer abc").unwrap(), Offered::Token("abc".into()));
        assert_eq!(parse(b"mct_raw").unwrap(), Offered::Token("mct_raw".into()));
    }

    #[test]
    fn empty_basic_is_no_credentials_and_junk_is_malformed() {
        assert_eq!(parse(b"Basic Og==").unwrap(), Offered::None);
        assert!(parse(b"Basic !!!").is_err());
        assert!(parse(&basic("nocolon")).is_err());
        assert!(parse(b"Basic /w==").is_err(), "0xff is not UTF-8");
        assert!(parse(&[0xff, 0xfe]).is_err());
        assert_eq!(parse(b"Digest x=1").unwrap(), Offered::Unknown);
    }
}
