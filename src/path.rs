//! The request-path normaliser: turns `/{remote}/{path...}` from the wire into a
//! checked `(remote, path)` pair, or refuses it.
//!
//! The path keeps the client's percent-encoding (npm's `@scope%2fname` must reach
//! the mirror as sent), but every decoding of it, up to a few levels deep, is
//! checked for traversal and control characters, because some upstream server
//! along the way may decode once more than we do.

use percent_encoding::percent_decode;

use crate::error::ProxyError;

/// Longest request path accepted, in bytes (as sent, still encoded).
pub const MAX_PATH_LEN: usize = 2048;

/// How many rounds of percent-decoding are checked (`%252e%252e` is two).
const DECODE_LEVELS: usize = 3;

/// A checked request for an artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactPath {
    /// `remote/path`, normalised, then `?variant` for a content-negotiated
    /// document: the cache key and the request's identity.
    key: String,
    /// Length of the remote name at the start of `key`.
    remote_len: usize,
    /// Where the upstream path ends in `key` (before `?variant`).
    path_end: usize,
}

impl ArtifactPath {
    /// Normalises and checks a raw URI path (without its query).
    pub fn parse(raw: &str) -> Result<ArtifactPath, ProxyError> {
        if raw.len() > MAX_PATH_LEN {
            return Err(ProxyError::BadPath("path too long"));
        }
        let Some(rest) = raw.strip_prefix('/') else {
            return Err(ProxyError::BadPath("path must start with /"));
        };
        check_decodings(raw.as_bytes())?;

        let trailing_slash = rest.ends_with('/');
        let mut key = String::with_capacity(rest.len());
        let mut remote_len = 0;
        for segment in rest.split('/').filter(|s| !s.is_empty() && *s != ".") {
            if !key.is_empty() {
                key.push('/');
            } else {
                remote_len = segment.len();
            }
            key.push_str(segment);
        }
        if key.len() == remote_len {
            return Err(ProxyError::BadPath(
                "missing artifact path after the remote name",
            ));
        }
        if trailing_slash {
            key.push('/');
        }
        let path_end = key.len();
        Ok(ArtifactPath {
            key,
            remote_len,
            path_end,
        })
    }

    /// The same path as one variant of a content-negotiated document (pypi's
    /// HTML or JSON page, npm's full or abbreviated packument), cached apart.
    /// Request paths never hold `?` (the query is not part of them), so the
    /// suffix cannot collide with a real path.
    pub fn with_variant(&self, variant: &str) -> ArtifactPath {
        let mut key = String::with_capacity(self.path_end + 1 + variant.len());
        key.push_str(&self.key[..self.path_end]);
        key.push('?');
        key.push_str(variant);
        ArtifactPath {
            key,
            remote_len: self.remote_len,
            path_end: self.path_end,
        }
    }

    pub fn remote(&self) -> &str {
        &self.key[..self.remote_len]
    }

    /// The path below the remote, without a leading slash: what the mirror is asked for.
    pub fn path(&self) -> &str {
        &self.key[self.remote_len + 1..self.path_end]
    }

    /// The path as the metadata row stores it: `path()` plus any `?variant`.
    pub fn stored_path(&self) -> &str {
        &self.key[self.remote_len + 1..]
    }

    /// `remote/path`: the key of the metadata row and of the in-flight fill.
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// Refuses traversal, backslashes and control characters in the raw path and
/// in each of its first few percent-decodings.
fn check_decodings(raw: &[u8]) -> Result<(), ProxyError> {
    let mut current: std::borrow::Cow<[u8]> = std::borrow::Cow::Borrowed(raw);
    for level in 0..=DECODE_LEVELS {
        if current.iter().any(|&b| b < 0x20 || b == 0x7f) {
            return Err(ProxyError::BadPath("control character in path"));
        }
        // Decoded bytes may be UTF-8 with C1 controls (U+0080..U+009F, e.g.
        // `%c2%99`): refused too (found by the fuzz target).
        if !current.is_ascii()
            && String::from_utf8_lossy(&current)
                .chars()
                .any(char::is_control)
        {
            return Err(ProxyError::BadPath("control character in path"));
        }
        if current.contains(&b'\\') {
            return Err(ProxyError::BadPath("backslash in path"));
        }
        if current.split(|&b| b == b'/').any(|seg| seg == b"..") {
            return Err(ProxyError::BadPath("'..' segment in path"));
        }
        if level > 0 && current.split(|&b| b == b'/').any(|seg| seg == b".") {
            return Err(ProxyError::BadPath("encoded '.' segment in path"));
        }
        // Most paths have no escapes at all: then there is nothing to decode
        // (and nothing to allocate).
        if !current.contains(&b'%') {
            break;
        }
        let decoded: Vec<u8> = percent_decode(&current).collect();
        if *decoded == *current {
            break;
        }
        current = std::borrow::Cow::Owned(decoded);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_encoding_and_trailing_slash() {
        let p = ArtifactPath::parse("/npm/@scope%2fname").unwrap();
        assert_eq!((p.remote(), p.path()), ("npm", "@scope%2fname"));
        let p = ArtifactPath::parse("/pypi//simple/./six/").unwrap();
        assert_eq!(
            (p.remote(), p.path(), p.key()),
            ("pypi", "simple/six/", "pypi/simple/six/")
        );
    }

    #[test]
    fn refuses_traversal_in_every_disguise() {
        for bad in [
            "/r/../etc/passwd",
            "/r/a/%2e%2e/b",
            "/r/a/%2E%2e/b",
            "/r/a/.%2E/b",
            "/r/a/%252e%252e/b",
            "/r/a/%25252e%25252e/b",
            "/r/a/..%2fb",
            "/r/a%2f..%2fb",
            "/r/a\\..\\b",
            "/r/a%5c..%5cb",
            "/r/a%00b",
            "/r/a%0ab",
            "/r/%2e/x",
            "/r/a%c2%99b",
            "/r/%3%6%%331%c2%99999/x",
            "/r",
            "/r/",
        ] {
            assert!(ArtifactPath::parse(bad).is_err(), "{bad} was accepted");
        }
        assert!(ArtifactPath::parse(&format!("/r/{}", "a".repeat(MAX_PATH_LEN))).is_err());
    }
}
