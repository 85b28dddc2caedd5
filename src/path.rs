//! The request-path normaliser: turns `/{remote}/{path...}` from the wire into a
//! checked `(remote, path)` pair, or refuses it.
//!
//! Every decoding of the path, up to a few levels deep, is checked for
//! traversal and control characters, because some upstream server along the
//! way may decode once more than we do. Then each segment is normalised as
//! RFC 3986 §6.2.2 says, so one artifact has one cache key however it is
//! spelled: percent-encoded unreserved characters are decoded (`%61` → `a`),
//! and the hex digits of the remaining encodings are upper-cased. Reserved
//! encodings stay encoded (npm's `@scope%2fname` reaches the mirror as
//! `@scope%2Fname`, never as `@scope/name`).

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
    /// What the mirror is asked for when it is not `path()`: a key shared
    /// by several request paths (an OCI blob, one per digest whatever
    /// repository names it) still needs the requester's path upstream.
    upstream: Option<Box<str>>,
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
        if let Some(plain) = ArtifactPath::plain(rest) {
            return Ok(plain);
        }
        ArtifactPath::normalised(raw, rest)
    }

    /// The path as it is, when one look at its bytes shows that
    /// [`ArtifactPath::normalised`] would keep it so and refuse nothing:
    /// printable ASCII without `%` or `\`, a remote and a path below it,
    /// no empty segment but a trailing slash's, and no segment that starts
    /// with `.` (each of those takes the full check).
    fn plain(rest: &str) -> Option<ArtifactPath> {
        let bytes = rest.as_bytes();
        let mut remote_len = None;
        let mut segment = 0;
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'/' => {
                    if i == segment || bytes[segment] == b'.' {
                        return None;
                    }
                    remote_len.get_or_insert(i);
                    segment = i + 1;
                }
                b'%' | b'\\' | ..=0x1f | 0x7f.. => return None,
                _ => {}
            }
        }
        // The last segment: empty only after a trailing slash that follows
        // a segment below the remote.
        let remote_len = remote_len?;
        let last = &bytes[segment..];
        if last.first() == Some(&b'.') || (last.is_empty() && segment == remote_len + 1) {
            return None;
        }
        Some(ArtifactPath {
            key: rest.to_owned(),
            remote_len,
            path_end: rest.len(),
            upstream: None,
        })
    }

    /// The full check and normalisation of `raw` (`/` then `rest`).
    fn normalised(raw: &str, rest: &str) -> Result<ArtifactPath, ProxyError> {
        check_decodings(raw.as_bytes())?;

        // Normalising after the checks is safe: it decodes only unreserved
        // characters (never `%25`, never `%2F`), so every decoding of the
        // normalised path equals the same decoding of the raw path, which was
        // checked above. The segment check below restates that for this level.
        let trailing_slash = rest.ends_with('/');
        let mut key = String::with_capacity(rest.len());
        let mut remote_len = 0;
        for segment in rest.split('/').filter(|s| !s.is_empty() && *s != ".") {
            if !key.is_empty() {
                key.push('/');
            }
            let start = key.len();
            push_normalised(segment, &mut key);
            if dot_segment(&key.as_bytes()[start..]).is_some() {
                return Err(ProxyError::BadPath("encoded '.' segment in path"));
            }
            if start == 0 {
                remote_len = key.len();
            }
        }
        if key.len() == remote_len {
            return Err(ProxyError::BadPath(
                "missing artifact path after the remote name",
            ));
        }
        if trailing_slash {
            key.push('/');
        }
        // Decoding an unreserved character can complete an escape
        // (`%3%30` is `%30` once `%30` is `0`): the key's own decodings are
        // checked too, or one level deeper than the raw path's would go out
        // unchecked (found by the fuzz target).
        if key != rest {
            check_decodings(key.as_bytes())?;
        }
        let path_end = key.len();
        Ok(ArtifactPath {
            key,
            remote_len,
            path_end,
            upstream: None,
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
            upstream: self.upstream.clone(),
        }
    }

    /// The same path with the request's query string, which then is part of
    /// the key and of what the mirror is asked for (an API document whose
    /// query selects what it lists: `kind::Plan::query_in_key`). An empty
    /// query changes nothing. The query is taken as sent (hyper has checked
    /// its characters), within [`MAX_PATH_LEN`] with the path.
    pub fn with_query(&self, query: &str) -> Result<ArtifactPath, ProxyError> {
        if query.is_empty() {
            return Ok(self.clone());
        }
        if self.key.len() + 1 + query.len() > MAX_PATH_LEN || query.contains('#') {
            return Err(ProxyError::BadPath("query string too long"));
        }
        let mut key = String::with_capacity(self.path_end + 1 + query.len());
        key.push_str(&self.key[..self.path_end]);
        key.push('?');
        key.push_str(query);
        Ok(ArtifactPath {
            path_end: key.len(),
            key,
            remote_len: self.remote_len,
            upstream: None,
        })
    }

    /// The same key, fetched upstream as `upstream` (a path below the
    /// remote, already checked by the caller as one of its own request
    /// paths).
    pub fn fetched_as(mut self, upstream: &str) -> ArtifactPath {
        self.upstream = Some(upstream.into());
        self
    }

    /// What the mirror is asked for: `path()`, unless [`ArtifactPath::fetched_as`]
    /// said otherwise.
    pub fn upstream(&self) -> &str {
        self.upstream.as_deref().unwrap_or_else(|| self.path())
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

/// Appends `segment` to `out` normalised (RFC 3986 §6.2.2.1 and §6.2.2.2):
/// `%XX` of an unreserved character (ALPHA / DIGIT / `-` / `.` / `_` / `~`)
/// decoded, every other `%XX` with upper-case hex digits. A `%` not followed
/// by two hex digits is kept as it is.
fn push_normalised(segment: &str, out: &mut String) {
    let bytes = segment.as_bytes();
    // Copied in runs between escapes; every cut is at an ASCII `%`, so each
    // run is whole UTF-8.
    let mut run_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let escape = (bytes[i] == b'%')
            .then(|| {
                Some((
                    hex_value(*bytes.get(i + 1)?)?,
                    hex_value(*bytes.get(i + 2)?)?,
                ))
            })
            .flatten();
        let Some((high, low)) = escape else {
            i += 1;
            continue;
        };
        out.push_str(&segment[run_start..i]);
        let byte = high << 4 | low;
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(bytes[i + 1].to_ascii_uppercase()));
            out.push(char::from(bytes[i + 2].to_ascii_uppercase()));
        }
        i += 3;
        run_start = i;
    }
    out.push_str(&segment[run_start..]);
}

fn hex_value(digit: u8) -> Option<u8> {
    char::from(digit).to_digit(16).map(|d| d as u8)
}

/// What a segment is once its `;parameters` are dropped, when that is a dot
/// segment: servlet containers (the Java registries behind many mirrors) read
/// `..;jsessionid=x` as `..`, so the parameters never hide one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dots {
    One,
    Two,
}

fn dot_segment(segment: &[u8]) -> Option<Dots> {
    let name = segment.split(|&b| b == b';').next().unwrap_or_default();
    match name {
        b"." => Some(Dots::One),
        b".." => Some(Dots::Two),
        _ => None,
    }
}

/// Refuses traversal (`..`, and `.` or `..` with `;parameters`),
/// backslashes and control characters in the raw path and in each of its
/// first few percent-decodings.
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
        for segment in current.split(|&b| b == b'/') {
            match dot_segment(segment) {
                Some(Dots::Two) => return Err(ProxyError::BadPath("'..' segment in path")),
                // A plain `.` is dropped by the normaliser; one that was
                // encoded, or that carries `;parameters`, would reach the
                // mirror as it is.
                Some(Dots::One) if level > 0 || segment.len() > 1 => {
                    return Err(ProxyError::BadPath(
                        "'.' segment with parameters or encoded in path",
                    ))
                }
                _ => {}
            }
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
    fn keeps_reserved_encodings_and_trailing_slash() {
        let p = ArtifactPath::parse("/npm/@scope%2fname").unwrap();
        assert_eq!((p.remote(), p.path()), ("npm", "@scope%2Fname"));
        let p = ArtifactPath::parse("/pypi//simple/./six/").unwrap();
        assert_eq!(
            (p.remote(), p.path(), p.key()),
            ("pypi", "simple/six/", "pypi/simple/six/")
        );
    }

    #[test]
    fn one_key_per_artifact_however_it_is_spelled() {
        for raw in [
            "/g/kn/a.bin",
            "/g/kn/%61.bin",
            "/g/kn/%61%2Ebin",
            "/g/kn/%61%2ebin",
            "/g/%6Bn/a.bin",
            "/g/%6bn/a.bin",
            "/%67/kn/a.bin",
            "//g/./kn//a.bin",
        ] {
            let p = ArtifactPath::parse(raw).unwrap();
            assert_eq!(
                (p.remote(), p.path(), p.key()),
                ("g", "kn/a.bin", "g/kn/a.bin"),
                "{raw}"
            );
        }
        for (raw, path) in [
            // Every unreserved character is decoded.
            ("/g/%41%5a%30%39%2D%5F%7e", "AZ09-_~"),
            // Other encodings stay, upper-cased: reserved, space, `%`, UTF-8.
            ("/g/a%2fb%3a%40%20", "a%2Fb%3A%40%20"),
            ("/g/%2561", "%2561"),
            ("/g/caf%c3%a9", "caf%C3%A9"),
            // Not an escape: kept as it is.
            ("/g/100%", "100%"),
            ("/g/%4", "%4"),
            ("/g/%zz%4g", "%zz%4g"),
        ] {
            assert_eq!(ArtifactPath::parse(raw).unwrap().path(), path, "{raw}");
        }
        let variant = ArtifactPath::parse("/py/simple/%70roj/")
            .unwrap()
            .with_variant("json");
        assert_eq!(
            (variant.path(), variant.key()),
            ("simple/proj/", "py/simple/proj/?json")
        );
    }

    #[test]
    fn a_path_taken_as_it_is_is_what_the_full_check_makes_of_it() {
        let mut rng = crate::test_rng::XorShift(0x9e37_79b9_7f4a_7c15);
        let alphabet: Vec<char> = "ab/./;%2eE5c\\\u{1}\u{7f}é-_~".chars().collect();
        let mut taken = 0;
        for _ in 0..200_000 {
            let len = rng.below(12) as usize;
            let rest: String = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                .collect();
            let raw = format!("/{rest}");
            if let Some(plain) = ArtifactPath::plain(&rest) {
                taken += 1;
                assert_eq!(
                    ArtifactPath::normalised(&raw, &rest).ok(),
                    Some(plain),
                    "{raw}"
                );
            }
        }
        // Most of the alphabet takes the full check; enough is left.
        assert!(taken > 1_000, "{taken}");
        let plain = ArtifactPath::plain("pypi/packages/ab/six-1.16.0.tar.gz").unwrap();
        assert_eq!(
            (plain.remote(), plain.path()),
            ("pypi", "packages/ab/six-1.16.0.tar.gz")
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
            "/r/%2E",
            "/r/a/%2E%2E",
            "/r/a/.%2e/",
            "/%2E%2E/x",
            "/r/a%c2%99b",
            "/r/a/..;/b",
            "/r/a/..;x=1/b",
            "/r/a/..;jsessionid=x/b",
            "/r/a/%2e%2e;/b",
            "/r/a/%2E%2E%3B/b",
            "/r/a/.;/b",
            "/r/a/.;x=1",
            "/r/..;",
            "/r/a/%252e%252e%253b/b",
            // An escape completed by normalising (`%3` then `%30`): its
            // control character lies one decoding deeper than the raw path's.
            "//%%3%3%30777%9]%7//@/%3%377..%779]]]]]]]]]]/%9^",
            "/r/%3%6%%331%c2%99999/x",
            "/r",
            "/r/",
        ] {
            assert!(ArtifactPath::parse(bad).is_err(), "{bad} was accepted");
        }
        assert!(ArtifactPath::parse(&format!("/r/{}", "a".repeat(MAX_PATH_LEN))).is_err());
    }
}
