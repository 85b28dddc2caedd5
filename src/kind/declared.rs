//! Declared digests, the shared part: the hash an index document (or the
//! artifact's own address) says an artifact must have, as a value
//! ([`Declared`]), hashing a body in the declared function beside sha256
//! ([`Hashers`]), the key form of a path ([`canonical`]), and locating a
//! document's links at the proxy ([`Document`]). Which documents declare what
//! is each ecosystem's own (`Digests`). Pure: the fill checks the bytes
//! against what is declared, the cache keeps what was learned.

use std::fmt;

use base64::Engine as _;
use sha2::Digest as _;
use url::Url;

use super::rewrite::Rewrite;

/// The hash functions indexes declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    Sha256,
    Sha512,
    /// npm's `shasum`, for packages published before `integrity` existed.
    Sha1,
    /// Maven's `.md5` sidecars (the last resort: the weakest).
    Md5,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Sha256 => "sha256",
            Algo::Sha512 => "sha512",
            Algo::Sha1 => "sha1",
            Algo::Md5 => "md5",
        }
    }

    pub fn parse(name: &str) -> Option<Algo> {
        match name {
            "sha256" => Some(Algo::Sha256),
            "sha512" => Some(Algo::Sha512),
            "sha1" => Some(Algo::Sha1),
            "md5" => Some(Algo::Md5),
            _ => None,
        }
    }

    /// The digest's length in bytes, which also ranks the functions by
    /// strength (never 0: no `is_empty`).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(self) -> usize {
        match self {
            Algo::Sha256 => 32,
            Algo::Sha512 => 64,
            Algo::Sha1 => 20,
            Algo::Md5 => 16,
        }
    }
}

/// A digest an artifact must have, and its length when the index states it
/// too (rpm's `<size>`). Shown (in logs and 502 bodies) and stored as
/// `algo:hex`, or `algo:hex (N bytes)` with a length.
///
/// Two values are equal when their digests are and their lengths do not
/// contradict each other: a length only one side knows does not tell them
/// apart, so a body (whose length [`Hashers`] always counts) matches a
/// declaration without one, and one with another length is refused like
/// another digest.
#[derive(Debug, Clone)]
pub struct Declared {
    algo: Algo,
    digest: Vec<u8>,
    size: Option<u64>,
}

impl PartialEq for Declared {
    fn eq(&self, other: &Declared) -> bool {
        let sizes_agree = match (self.size, other.size) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        self.algo == other.algo && self.digest == other.digest && sizes_agree
    }
}

impl Eq for Declared {}

/// By the digest alone, as equality allows.
impl std::hash::Hash for Declared {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.algo.hash(state);
        self.digest.hash(state);
    }
}

impl Declared {
    pub fn new(algo: Algo, digest: Vec<u8>) -> Option<Declared> {
        (digest.len() == algo.len()).then_some(Declared {
            algo,
            digest,
            size: None,
        })
    }

    /// The same digest, with the length the index states beside it.
    pub fn with_size(self, size: Option<u64>) -> Declared {
        Declared { size, ..self }
    }

    /// The length stated with the digest, if any.
    pub fn size(&self) -> Option<u64> {
        self.size
    }

    pub fn from_hex(algo: Algo, hex: &str) -> Option<Declared> {
        Declared::new(algo, hex::decode(hex.trim()).ok()?)
    }

    /// `sha256:hex`, or `sha256:hex (N bytes)` (the stored forms).
    pub fn parse(text: &str) -> Option<Declared> {
        let (digest, size) = match text.split_once(' ') {
            Some((digest, size)) => {
                let n = size.strip_prefix('(')?.strip_suffix(" bytes)")?;
                (digest, Some(n.parse().ok()?))
            }
            None => (text, None),
        };
        let (algo, hex) = digest.split_once(':')?;
        Some(Declared::from_hex(Algo::parse(algo)?, hex)?.with_size(size))
    }

    /// A Subresource Integrity value (`sha512-<base64>`, perhaps several
    /// separated by spaces): the strongest one this proxy can check.
    pub fn from_sri(sri: &str) -> Option<Declared> {
        sri.split_whitespace()
            .filter_map(|item| {
                let (algo, b64) = item.split_once('-')?;
                let b64 = b64.split('?').next()?;
                let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
                Declared::new(Algo::parse(algo)?, bytes)
            })
            .max_by_key(|d| d.algo.len())
    }

    pub fn algo(&self) -> Algo {
        self.algo
    }

    pub fn hex(&self) -> String {
        lower_hex(&self.digest)
    }

    /// Whether `bytes` is what was declared.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        self.digest == bytes
    }
}

/// `bytes` in lower-case hex, written by `hex::encode_to_slice`'s table:
/// every miss writes a few digests so (`hex::encode` collects a `char` at
/// a time, five times the instructions).
pub fn lower_hex(bytes: &[u8]) -> String {
    let mut text = vec![0; bytes.len() * 2];
    hex::encode_to_slice(bytes, &mut text).expect("two digits a byte");
    String::from_utf8(text).expect("hex digits are ASCII")
}

impl fmt::Display for Declared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algo.name(), self.hex())?;
        match self.size {
            Some(size) => write!(f, " ({size} bytes)"),
            None => Ok(()),
        }
    }
}

/// Hashes a body with sha256 (the store's address) and, when the declared
/// digest uses another function, with that one too, in the same pass,
/// counting its length.
#[derive(Clone)]
pub struct Hashers {
    sha256: sha2::Sha256,
    other: Option<Other>,
    len: u64,
}

#[derive(Clone)]
enum Other {
    Sha512(sha2::Sha512),
    Sha1(sha1::Sha1),
    Md5(md5::Md5),
}

impl Hashers {
    pub fn new(expected: Option<&Declared>) -> Hashers {
        Hashers::with(expected.map(Declared::algo))
    }

    /// sha256, and `algo` beside it when it is another function.
    pub fn with(algo: Option<Algo>) -> Hashers {
        let other = match algo {
            Some(Algo::Sha512) => Some(Other::Sha512(sha2::Sha512::new())),
            Some(Algo::Sha1) => Some(Other::Sha1(sha1::Sha1::new())),
            Some(Algo::Md5) => Some(Other::Md5(md5::Md5::new())),
            Some(Algo::Sha256) | None => None,
        };
        Hashers {
            sha256: sha2::Sha256::new(),
            other,
            len: 0,
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        self.sha256.update(bytes);
        if let Some(other) = &mut self.other {
            other.update(bytes);
        }
    }

    /// The sha256, and the digest in the declared function (the sha256 again
    /// when that is the declared one) with the length hashed.
    pub fn finish(self) -> ([u8; 32], Declared) {
        let sha256: [u8; 32] = self.sha256.finalize().into();
        let (algo, digest) = match self.other {
            Some(Other::Sha512(h)) => (Algo::Sha512, h.finalize().to_vec()),
            Some(Other::Sha1(h)) => (Algo::Sha1, h.finalize().to_vec()),
            Some(Other::Md5(h)) => (Algo::Md5, h.finalize().to_vec()),
            None => (Algo::Sha256, sha256.to_vec()),
        };
        let received = Declared {
            algo,
            digest,
            size: Some(self.len),
        };
        (sha256, received)
    }
}

impl Other {
    fn update(&mut self, bytes: &[u8]) {
        match self {
            Other::Sha512(h) => h.update(bytes),
            Other::Sha1(h) => h.update(bytes),
            Other::Md5(h) => h.update(bytes),
        }
    }
}

/// `path` with every `%XX` decoded except `%2F`, which stays a part of one
/// segment: the same artifact whether a link or a client escaped it.
pub fn canonical(path: &str) -> String {
    if !path.contains('%') {
        return path.to_string();
    }
    // Decoded a piece at a time, between the `%2F`s (either case), which
    // are kept as they are spelt.
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    loop {
        let slash = [rest.find("%2F"), rest.find("%2f")]
            .into_iter()
            .flatten()
            .min();
        let piece = &rest[..slash.unwrap_or(rest.len())];
        match percent_encoding::percent_decode_str(piece).decode_utf8() {
            Ok(decoded) => out.push_str(&decoded),
            Err(_) => return path.to_string(),
        }
        let Some(at) = slash else {
            return out;
        };
        out.push_str(&rest[at..at + 3]);
        rest = &rest[at + 3..];
    }
}

/// A document being learned: its path below the remote, and how a link in
/// it maps to the proxy path it is served at.
pub struct Document<'a> {
    pub path: &'a str,
    /// The document's own address at the first mirror, for relative links.
    base: Option<Url>,
    rewrite: Rewrite,
    prefix: String,
    /// The most the document is unpacked to while it is learned
    /// (`max_learned_size`; see `kind::unpack`).
    pub max_unpacked: u64,
}

impl<'a> Document<'a> {
    /// The document at `path` of the remote `remote`, whose index mirrors are
    /// `mirrors` and files mirrors `files`.
    pub fn new(remote: &str, mirrors: &[Url], files: &[Url], path: &'a str) -> Document<'a> {
        let base = mirrors.first().map(|m| {
            let mut base = m.clone();
            base.set_path(&format!("{}/{path}", m.path().trim_end_matches('/')));
            base
        });
        Document {
            path,
            base,
            rewrite: Rewrite::new(remote, mirrors, files, ""),
            prefix: format!("/{remote}/"),
            max_unpacked: super::unpack::DEFAULT_MAX_UNPACKED,
        }
    }

    /// The same document, unpacked to at most `max` bytes while learned.
    pub fn with_max_unpacked(mut self, max: u64) -> Document<'a> {
        self.max_unpacked = max;
        self
    }

    /// The proxy path below the remote that `link` (absolute, or relative
    /// to the document) is served at; `None` for a link to another host.
    pub fn path_of(&self, link: &str) -> Option<String> {
        let mut url = match Url::parse(link) {
            Ok(url) => url,
            Err(url::ParseError::RelativeUrlWithoutBase) => self.base.as_ref()?.join(link).ok()?,
            Err(_) => return None,
        };
        url.set_fragment(None);
        url.set_query(None);
        let local = self.rewrite.apply(url.as_str());
        local.strip_prefix(&self.prefix).map(str::to_string)
    }
}

#[cfg(test)]
mod tests;
