//! Declared digests: the hash an index document (or the artifact's own
//! address) says an artifact must have. This file reads them out of the
//! documents each kind serves — pypi's `#sha256=` fragments and PEP 691
//! `hashes`, npm's `dist.integrity` (else `dist.shasum`), cargo's `cksum`,
//! apt's `Release` and `Packages` (plain, `.gz` or `.xz`) — and names the artifact each one is for.
//! It is pure: the fill checks the bytes against what is declared, the cache
//! keeps what was learned.

use std::fmt;
use std::io::Read as _;

use base64::Engine as _;
use sha2::Digest as _;
use url::Url;

use super::rewrite::Rewrite;
use crate::config::{RemoteConfig, RemoteKind};

/// The hash functions indexes declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    Sha256,
    Sha512,
    /// npm's `shasum`, for packages published before `integrity` existed.
    Sha1,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Sha256 => "sha256",
            Algo::Sha512 => "sha512",
            Algo::Sha1 => "sha1",
        }
    }

    pub fn parse(name: &str) -> Option<Algo> {
        match name {
            "sha256" => Some(Algo::Sha256),
            "sha512" => Some(Algo::Sha512),
            "sha1" => Some(Algo::Sha1),
            _ => None,
        }
    }

    fn len(self) -> usize {
        match self {
            Algo::Sha256 => 32,
            Algo::Sha512 => 64,
            Algo::Sha1 => 20,
        }
    }
}

/// A digest an artifact must have. Shown (in logs and 502 bodies) and stored
/// as `algo:hex`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Declared {
    algo: Algo,
    digest: Vec<u8>,
}

impl Declared {
    pub fn new(algo: Algo, digest: Vec<u8>) -> Option<Declared> {
        (digest.len() == algo.len()).then_some(Declared { algo, digest })
    }

    pub fn from_hex(algo: Algo, hex: &str) -> Option<Declared> {
        Declared::new(algo, hex::decode(hex.trim()).ok()?)
    }

    /// `sha256:hex` (the stored form).
    pub fn parse(text: &str) -> Option<Declared> {
        let (algo, hex) = text.split_once(':')?;
        Declared::from_hex(Algo::parse(algo)?, hex)
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
        hex::encode(&self.digest)
    }

    /// Whether `bytes` is what was declared.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        self.digest == bytes
    }
}

impl fmt::Display for Declared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algo.name(), self.hex())
    }
}

/// Hashes a body with sha256 (the store's address) and, when the declared
/// digest uses another function, with that one too, in the same pass.
#[derive(Clone)]
pub struct Hashers {
    sha256: sha2::Sha256,
    other: Option<Other>,
}

#[derive(Clone)]
enum Other {
    Sha512(sha2::Sha512),
    Sha1(sha1::Sha1),
}

impl Hashers {
    pub fn new(expected: Option<&Declared>) -> Hashers {
        let other = match expected.map(Declared::algo) {
            Some(Algo::Sha512) => Some(Other::Sha512(sha2::Sha512::new())),
            Some(Algo::Sha1) => Some(Other::Sha1(sha1::Sha1::new())),
            Some(Algo::Sha256) | None => None,
        };
        Hashers {
            sha256: sha2::Sha256::new(),
            other,
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.sha256.update(bytes);
        match &mut self.other {
            Some(Other::Sha512(h)) => h.update(bytes),
            Some(Other::Sha1(h)) => h.update(bytes),
            None => {}
        }
    }

    /// The sha256, and the digest in the declared function (the sha256 again
    /// when that is the declared one).
    pub fn finish(self) -> ([u8; 32], Declared) {
        let sha256: [u8; 32] = self.sha256.finalize().into();
        let received = match self.other {
            Some(Other::Sha512(h)) => Declared {
                algo: Algo::Sha512,
                digest: h.finalize().to_vec(),
            },
            Some(Other::Sha1(h)) => Declared {
                algo: Algo::Sha1,
                digest: h.finalize().to_vec(),
            },
            None => Declared {
                algo: Algo::Sha256,
                digest: sha256.to_vec(),
            },
        };
        (sha256, received)
    }
}

/// A digest the artifact's own path declares: apt's `by-hash/SHA256/<hex>`,
/// an OCI blob's or by-digest manifest's `sha256:<hex>`.
pub fn in_path(kind: RemoteKind, path: &str) -> Option<Declared> {
    match kind {
        RemoteKind::Apt => {
            let (_, hex) = path.split_once("/by-hash/SHA256/")?;
            Declared::from_hex(Algo::Sha256, hex)
        }
        // A blob, or a manifest fetched by digest: the address is the digest.
        RemoteKind::Oci => Declared::parse(super::oci::digest_in_path(path)?),
        _ => None,
    }
}

/// The name declared digests are kept under for the artifact at `path`, or
/// `None` when no index declares one for it (documents, and what a kind does
/// not check). Mostly the path itself,
/// percent-escapes decoded but for `%2F` (a link's `+` is a request's
/// `%2B`); for cargo `crate/version`, because the index declares by name and
/// version and the download URL is shaped by the registry's `dl` template.
pub fn artifact_key(kind: RemoteKind, path: &str) -> Option<String> {
    match kind {
        RemoteKind::Pypi if kind.is_immutable(path) && !path.ends_with(".metadata") => {
            Some(canonical(path))
        }
        RemoteKind::Npm if kind.is_immutable(path) => Some(canonical(path)),
        RemoteKind::Cargo => cargo_key_of_download(path),
        RemoteKind::Apt => {
            let name = path.rsplit('/').next().unwrap_or("");
            let listed = path.starts_with("pool/")
                || (path.starts_with("dists/")
                    && !matches!(name, "Release" | "InRelease" | "Release.gpg"));
            (listed && in_path(kind, path).is_none()).then(|| canonical(path))
        }
        _ => None,
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

fn cargo_key(name: &str, version: &str) -> String {
    format!("{}/{}", name.to_ascii_lowercase(), version)
}

/// `…/{crate}/{version}/download`, or `…/{crate}-{version}.crate`.
fn cargo_key_of_download(path: &str) -> Option<String> {
    let mut segments = path.rsplit('/');
    let last = segments.next()?;
    if last == "download" {
        let version = segments.next()?;
        let name = segments.next()?;
        return Some(cargo_key(name, version));
    }
    let stem = last.strip_suffix(".crate")?;
    // Names may hold `-` and digits (`md-5`): the version starts after the
    // first `-` whose rest begins `major.minor.patch`.
    let at = stem
        .match_indices('-')
        .map(|(i, _)| i)
        .find(|&i| starts_with_semver(&stem[i + 1..]))?;
    Some(cargo_key(&stem[..at], &stem[at + 1..]))
}

/// Whether `text` starts with `N.N.N`.
fn starts_with_semver(text: &str) -> bool {
    let mut parts = text.splitn(3, '.');
    let numeric = |part: Option<&str>, whole: bool| {
        part.is_some_and(|p| {
            let digits = p.chars().take_while(char::is_ascii_digit).count();
            digits > 0 && (!whole || digits == p.len())
        })
    };
    numeric(parts.next(), true) && numeric(parts.next(), true) && numeric(parts.next(), false)
}

/// Whether a body fetched at `path` is one this kind reads declarations from.
pub fn declares(kind: RemoteKind, path: &str) -> bool {
    match kind {
        RemoteKind::Pypi | RemoteKind::Npm => kind.is_document(path),
        RemoteKind::Cargo => {
            !kind.is_immutable(path) && path != "config.json" && kind.pass_through(path).is_none()
        }
        // Release files, Packages indexes, and by-hash copies (whose name
        // does not say what they are: sniffed once decompressed).
        RemoteKind::Apt => {
            let name = path.rsplit('/').next().unwrap_or("");
            path.starts_with("dists/")
                && (matches!(name, "Release" | "InRelease")
                    || name.starts_with("Packages")
                    || path.contains("/by-hash/"))
        }
        RemoteKind::Go | RemoteKind::Generic | RemoteKind::Oci => false,
    }
}

/// Every (artifact key, digest) the document fetched at `path` declares.
/// Links are resolved against the document's address at the first mirror and
/// kept only when they lead to one of the remote's own hosts; the keys are
/// the proxy's paths below the remote (not yet normalised: the caller parses
/// them as request paths).
pub fn learn(config: &RemoteConfig, path: &str, body: &[u8]) -> Vec<(String, Declared)> {
    let locate = Locator::new(config, path);
    match config.kind {
        RemoteKind::Pypi => match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(json) => pypi_json(&json, &locate),
            Err(_) => pypi_html(&String::from_utf8_lossy(body), &locate),
        },
        RemoteKind::Npm => npm(body, &locate),
        RemoteKind::Cargo => cargo(body),
        RemoteKind::Apt => apt(path, body),
        RemoteKind::Go | RemoteKind::Generic | RemoteKind::Oci => Vec::new(),
    }
}

/// Maps a link in a document to the proxy path it is served at.
struct Locator {
    /// The document's own address at the first mirror, for relative links.
    base: Option<Url>,
    rewrite: Rewrite,
    prefix: String,
}

impl Locator {
    fn new(config: &RemoteConfig, path: &str) -> Locator {
        let base = config.mirrors.first().map(|m| {
            let mut base = m.clone();
            base.set_path(&format!("{}/{path}", m.path().trim_end_matches('/')));
            base
        });
        Locator {
            base,
            rewrite: Rewrite::new(config, ""),
            prefix: format!("/{}/", config.name),
        }
    }

    fn path_of(&self, link: &str) -> Option<String> {
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

fn pypi_html(html: &str, locate: &Locator) -> Vec<(String, Declared)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find("href=") {
        rest = &rest[at + 5..];
        let Some(quote) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            continue;
        };
        let Some(end) = rest[1..].find(quote) else {
            break;
        };
        let href = rest[1..1 + end].replace("&amp;", "&");
        rest = &rest[1 + end..];
        let Some((link, fragment)) = href.split_once('#') else {
            continue;
        };
        let Some(hex) = fragment.strip_prefix("sha256=") else {
            continue;
        };
        if let (Some(path), Some(declared)) =
            (locate.path_of(link), Declared::from_hex(Algo::Sha256, hex))
        {
            out.push((path, declared));
        }
    }
    out
}

fn pypi_json(json: &serde_json::Value, locate: &Locator) -> Vec<(String, Declared)> {
    // PEP 691 (`files[].hashes`) and the JSON API (`urls[].digests`,
    // `releases.*[].digests`).
    let files = json["files"].as_array().into_iter().flatten();
    let urls = json["urls"].as_array().into_iter().flatten();
    let releases = json["releases"]
        .as_object()
        .into_iter()
        .flat_map(|r| r.values())
        .filter_map(|v| v.as_array())
        .flatten();
    files
        .chain(urls)
        .chain(releases)
        .filter_map(|file| {
            let hashes = file.get("hashes").or_else(|| file.get("digests"))?;
            let declared = Declared::from_hex(Algo::Sha256, hashes["sha256"].as_str()?)?;
            Some((locate.path_of(file["url"].as_str()?)?, declared))
        })
        .collect()
}

/// A packument as far as declarations go: a typed parse keeps a 50 MB
/// packument from becoming a tree of `Value`s.
#[derive(serde::Deserialize)]
struct Packument {
    #[serde(default)]
    versions: std::collections::HashMap<String, PackumentVersion>,
}

#[derive(serde::Deserialize)]
struct PackumentVersion {
    #[serde(default)]
    dist: Option<Dist>,
}

#[derive(serde::Deserialize)]
struct Dist {
    tarball: Option<String>,
    integrity: Option<String>,
    shasum: Option<String>,
}

fn npm(body: &[u8], locate: &Locator) -> Vec<(String, Declared)> {
    let Ok(packument) = serde_json::from_slice::<Packument>(body) else {
        return Vec::new();
    };
    packument
        .versions
        .into_values()
        .filter_map(|version| {
            let dist = version.dist?;
            let declared = dist
                .integrity
                .as_deref()
                .and_then(Declared::from_sri)
                .or_else(|| Declared::from_hex(Algo::Sha1, dist.shasum.as_deref()?))?;
            Some((locate.path_of(dist.tarball.as_deref()?)?, declared))
        })
        .collect()
}

fn cargo(body: &[u8]) -> Vec<(String, Declared)> {
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        name: &'a str,
        vers: &'a str,
        cksum: &'a str,
    }
    body.split(|&b| b == b'\n')
        .filter_map(|line| {
            let line: Line = serde_json::from_slice(line).ok()?;
            let declared = Declared::from_hex(Algo::Sha256, line.cksum)?;
            Some((cargo_key(line.name, line.vers), declared))
        })
        .collect()
}

/// The largest decompressed `Packages.gz`/`.xz` read for declarations
/// (Debian's largest, main/amd64, is about 50 MB).
const MAX_APT_INDEX: u64 = 256 * 1024 * 1024;

fn apt(path: &str, body: &[u8]) -> Vec<(String, Declared)> {
    let mut inflated = Vec::new();
    let body = if body.starts_with(&[0x1f, 0x8b]) {
        let decoder = flate2::read::GzDecoder::new(body);
        if decoder
            .take(MAX_APT_INDEX)
            .read_to_end(&mut inflated)
            .is_err()
        {
            return Vec::new();
        }
        &inflated[..]
    } else if body.starts_with(b"\xfd7zXZ\0") {
        let mut input = std::io::BufReader::new(body);
        if lzma_rs::xz_decompress(&mut input, &mut Limited(&mut inflated)).is_err() {
            return Vec::new();
        }
        &inflated[..]
    } else {
        body
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return Vec::new();
    };
    let name = path.rsplit('/').next().unwrap_or("");
    if matches!(name, "Release" | "InRelease") {
        let dir = &path[..path.len() - name.len()];
        apt_release(dir, text)
    } else if text.starts_with("Package:") {
        apt_packages(text)
    } else {
        Vec::new()
    }
}

/// A writer that refuses to grow past [`MAX_APT_INDEX`] (an xz bomb).
struct Limited<'a>(&'a mut Vec<u8>);

impl std::io::Write for Limited<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.0.len() as u64 + bytes.len() as u64 > MAX_APT_INDEX {
            return Err(std::io::ErrorKind::OutOfMemory.into());
        }
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `Release`'s `SHA256:` section: ` <hex> <size> <path below the suite>`.
fn apt_release(dir: &str, text: &str) -> Vec<(String, Declared)> {
    let mut out = Vec::new();
    let mut in_sha256 = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            in_sha256 = line.trim_end() == "SHA256:";
            continue;
        }
        if !in_sha256 {
            continue;
        }
        let mut fields = line.split_whitespace();
        if let (Some(hex), Some(_size), Some(file)) = (fields.next(), fields.next(), fields.next())
        {
            if let Some(declared) = Declared::from_hex(Algo::Sha256, hex) {
                out.push((format!("{dir}{file}"), declared));
            }
        }
    }
    out
}

/// `Packages` paragraphs: `Filename:` (below the archive root) and `SHA256:`.
fn apt_packages(text: &str) -> Vec<(String, Declared)> {
    text.split("\n\n")
        .filter_map(|paragraph| {
            let field = |name: &str| {
                paragraph.lines().find_map(|line| {
                    let (key, value) = line.split_once(':')?;
                    (key == name).then(|| value.trim())
                })
            };
            let declared = Declared::from_hex(Algo::Sha256, field("SHA256")?)?;
            Some((field("Filename")?.to_string(), declared))
        })
        .collect()
}

#[cfg(test)]
mod tests;
