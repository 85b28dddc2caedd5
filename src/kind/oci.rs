//! The rules of an OCI / Docker registry remote (the distribution spec's
//! pull API): which request paths are manifests, blobs and tag lists, what a
//! valid repository name, tag and digest look like, which paths are
//! immutable (everything addressed by digest), Docker Hub's `library/`
//! names, and the manifest media types a request accepts (its variant).
//!
//! Paths here are the remote's upstream paths: `v2/<name>/manifests/<ref>`,
//! `v2/<name>/blobs/<digest>`, `v2/<name>/tags/list`.

use std::sync::OnceLock;

use axum::http::{header, HeaderMap};
use url::Url;

use super::declared::Declared;
use super::{standard_refusal, Digests, Ecosystem, Plan, Protocol, Variant};

/// An OCI / Docker registry remote, pulled through.
pub struct Oci;

impl Ecosystem for Oci {
    fn name(&self) -> &'static str {
        "oci"
    }

    /// Blobs and manifests by digest immutable; a manifest cached as one
    /// variant per set of manifest types the request accepts.
    fn plan<'p>(&self, path: &'p str, request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: is_immutable(path),
            variants: variants(path),
            variant: variant(path, request),
            ..Plan::default()
        }
    }

    fn protocol(&self) -> Protocol {
        Protocol::Registry
    }

    fn refuses_key(&self, key: &str) -> Option<String> {
        match key {
            "registry" => None,
            "bearer_token" => Some(
                "an oci remote fetches its own tokens from the registry's token service; \
                 give `username` and `password_env` instead"
                    .to_string(),
            ),
            _ => standard_refusal(self.name(), self.digests(), self.packages(), key),
        }
    }

    fn digests(&self) -> Option<&dyn Digests> {
        Some(self)
    }

    #[cfg(test)]
    fn conformance(&self) -> super::conformance::Rows {
        tests::rows()
    }
}

impl Digests for Oci {
    /// A blob, or a manifest fetched by digest: the address is the digest.
    fn in_path(&self, path: &str) -> Option<Declared> {
        Declared::parse(digest_in_path(path)?)
    }
}

/// What a `/v2/<name>/…` request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint<'a> {
    /// A manifest by tag (mutable) or by digest (immutable).
    Manifest(Reference<'a>),
    /// A blob (layer or config), always by digest.
    Blob(&'a str),
    /// The repository's tags, a mutable document.
    TagsList,
    /// The referrers of a manifest (signatures, SBOMs: the OCI 1.1
    /// referrers API), a mutable document like a tag list.
    Referrers(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference<'a> {
    Tag(&'a str),
    Digest(&'a str),
}

/// Why a `/v2/` path is refused, as the OCI error code says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// Not a pull endpoint of the spec (uploads, catalog, …).
    Unsupported,
    Name,
    Tag,
    Digest,
}

impl Invalid {
    /// The code of the OCI error JSON.
    pub fn code(self) -> &'static str {
        match self {
            Invalid::Unsupported => "UNSUPPORTED",
            Invalid::Name => "NAME_INVALID",
            Invalid::Tag => "TAG_INVALID",
            Invalid::Digest => "DIGEST_INVALID",
        }
    }
}

/// Splits `<name>/manifests/<ref>`, `<name>/blobs/<digest>` or
/// `<name>/tags/list` (the part of a path after `/v2/`) into the
/// repository name and the endpoint, checking each part.
pub fn split(rest: &str) -> Result<(&str, Endpoint<'_>), Invalid> {
    if let Some(name) = rest.strip_suffix("/tags/list") {
        return Ok((checked_name(name)?, Endpoint::TagsList));
    }
    let (before, last) = rest.rsplit_once('/').ok_or(Invalid::Unsupported)?;
    let (name, what) = before.rsplit_once('/').ok_or(Invalid::Unsupported)?;
    let endpoint = match what {
        "manifests" if last.contains(':') => {
            Endpoint::Manifest(Reference::Digest(checked_digest(last)?))
        }
        "manifests" if is_tag(last) => Endpoint::Manifest(Reference::Tag(last)),
        "manifests" => return Err(Invalid::Tag),
        "blobs" => Endpoint::Blob(checked_digest(last)?),
        "referrers" => Endpoint::Referrers(checked_digest(last)?),
        _ => return Err(Invalid::Unsupported),
    };
    Ok((checked_name(name)?, endpoint))
}

fn checked_name(name: &str) -> Result<&str, Invalid> {
    is_repository_name(name)
        .then_some(name)
        .ok_or(Invalid::Name)
}

fn checked_digest(digest: &str) -> Result<&str, Invalid> {
    sha256_hex(digest).map(|_| digest).ok_or(Invalid::Digest)
}

/// The distribution spec's name grammar: `/`-separated components of
/// lower-case letters and digits joined by `.`, `_`, `__` or runs of `-`,
/// at most 255 characters. Rules out `..`, empty components and anything
/// percent-encoded.
pub fn is_repository_name(name: &str) -> bool {
    name.len() <= 255 && !name.is_empty() && name.split('/').all(is_name_component)
}

fn is_name_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        // A separator: `.`, `_`, `__` or `-`+, between alphanumerics.
        let run = bytes[i..].iter().take_while(|b| !alnum(**b)).count();
        let separator = &component[i..i + run];
        let ok = matches!(separator, "." | "_" | "__") || separator.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
        i += run;
    }
    true
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
pub fn is_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The hex of a `sha256:<64 lower-case hex>` digest: the only algorithm
/// the store addresses by, and the one every registry uses.
pub fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then_some(hex)
}

/// The digest an upstream path is addressed by: a blob's, or a manifest's
/// fetched by digest. `None` for tags and tag lists.
pub fn digest_in_path(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("v2/")?;
    if let Some(digest) = rest.strip_prefix("blobs/") {
        return checked_digest(digest).ok();
    }
    match split(rest).ok()?.1 {
        Endpoint::Blob(digest) | Endpoint::Manifest(Reference::Digest(digest)) => Some(digest),
        Endpoint::Manifest(Reference::Tag(_)) | Endpoint::TagsList | Endpoint::Referrers(_) => None,
    }
}

/// The cache key (a path below the remote) of a blob, whatever repository
/// asks for it: one entry and one fill per digest per remote. No request
/// path has this shape (a repository name comes before `blobs/`), so it
/// names no other artifact.
pub fn blob_key(digest: &str) -> String {
    format!("v2/blobs/{digest}")
}

/// Whether `path` is fetched by digest, so never changes.
pub fn is_immutable(path: &str) -> bool {
    digest_in_path(path).is_some()
}

/// Whether `path` (below an oci remote) is one of the distribution API's
/// pull endpoints: a manifest, a blob, a tag list or referrers. Nothing
/// else of a registry (`_catalog`, uploads) is asked for with the
/// remote's token.
pub fn is_pull_path(path: &str) -> bool {
    path.strip_prefix("v2/")
        .is_some_and(|rest| split(rest).is_ok())
}

/// Whether `path` is a manifest (by tag or digest).
pub fn is_manifest(path: &str) -> bool {
    path.strip_prefix("v2/")
        .and_then(|rest| split(rest).ok())
        .is_some_and(|(_, e)| matches!(e, Endpoint::Manifest(_)))
}

/// Docker Hub's hosts: there, a one-component name is an official image
/// (`alpine` is `library/alpine`), as docker resolves it.
pub fn is_docker_hub(url: &Url) -> bool {
    url.host_str().is_some_and(|h| same_registry(h, DOCKER_HUB))
}

/// Whether two registry hosts are one registry (Docker Hub's spellings are).
pub fn same_registry(a: &str, b: &str) -> bool {
    registry_host(a) == registry_host(b)
}

/// Docker Hub as containerd names it in `?ns=`.
pub const DOCKER_HUB: &str = "docker.io";

/// A registry host as one spelling: Docker Hub's aliases (`index.docker.io`,
/// `registry-1.docker.io`, `registry.hub.docker.com`) are `docker.io`;
/// every other host is itself, lower-cased.
pub fn registry_host(host: &str) -> std::borrow::Cow<'_, str> {
    let lower = if host.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(host.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(host)
    };
    match lower.as_ref() {
        "registry-1.docker.io" | "index.docker.io" | "registry.hub.docker.com" => {
            std::borrow::Cow::Borrowed(DOCKER_HUB)
        }
        _ => lower,
    }
}

/// `name` as a registry with Docker Hub's rule knows it.
pub fn hub_name(name: &str, docker_hub: bool) -> String {
    if docker_hub && !name.contains('/') {
        format!("library/{name}")
    } else {
        name.to_string()
    }
}

/// The manifest media types a puller may accept, in the order the variants'
/// bit masks use.
pub const MANIFEST_TYPES: [&str; 4] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// Every set of accepted manifest types as a variant (suffix `m<mask>`,
/// the `Accept` sent upstream listing those types), the set of all four
/// first (the default, for a client that names none).
fn variant_table() -> &'static [Variant] {
    static TABLE: OnceLock<Vec<Variant>> = OnceLock::new();
    TABLE.get_or_init(|| {
        // Fifteen short strings, made once for the life of the process.
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        (1..16u8)
            .rev()
            .map(|mask| Variant {
                suffix: leak(format!("m{mask:x}")),
                accept: leak(
                    MANIFEST_TYPES
                        .iter()
                        .enumerate()
                        .filter(|(bit, _)| mask & (1 << bit) != 0)
                        .map(|(_, t)| *t)
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
            })
            .collect()
    })
}

/// The variants a manifest is cached as: by tag, one per set of accepted
/// types (a registry answers a tag with the index or with one platform's
/// manifest, depending on `Accept`); by digest, one (the bytes are the
/// digest's whatever the client accepts, but the registry must be told
/// every type or it refuses an index it cannot convert).
pub fn variants(path: &str) -> &'static [Variant] {
    match path.strip_prefix("v2/").and_then(|rest| split(rest).ok()) {
        Some((_, Endpoint::Manifest(Reference::Tag(_)))) => variant_table(),
        Some((_, Endpoint::Manifest(Reference::Digest(_)))) => &variant_table()[..1],
        _ => &[],
    }
}

/// The variant a request for a manifest asks for: the set of known
/// manifest types its `Accept` names (all four when it names none).
pub fn variant(path: &str, request: &HeaderMap) -> Option<Variant> {
    let variants = variants(path);
    if variants.len() <= 1 {
        return variants.first().copied();
    }
    let mut mask = 0u8;
    for value in request.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let media_type = item.split(';').next().unwrap_or("").trim();
            if let Some(bit) = MANIFEST_TYPES.iter().position(|t| *t == media_type) {
                mask |= 1 << bit;
            }
        }
    }
    let mask = if mask == 0 { 15 } else { mask };
    // The table runs from mask 15 down to 1.
    Some(variants[15 - usize::from(mask)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::conformance::{Class, Rows};

    const D: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    pub(super) fn rows() -> Rows {
        Rows {
            paths: vec![
                ("v2/library/alpine/manifests/3.19", Class::Mutable),
                (
                    "v2/library/alpine/manifests/sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                    Class::Immutable,
                ),
                (
                    "v2/a/b/blobs/sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                    Class::Immutable,
                ),
                ("v2/library/alpine/tags/list", Class::Mutable),
            ],
            variants: vec![
                ("v2/library/alpine/manifests/3.19", "", Some("mf")),
                (
                    "v2/library/alpine/manifests/3.19",
                    "application/vnd.oci.image.manifest.v1+json",
                    Some("m4"),
                ),
                ("v2/library/alpine/tags/list", "", None),
            ],
            keys: vec![("v2/library/alpine/tags/list", None)],
            ..Rows::default()
        }
    }

    #[test]
    fn digest_addressed_paths_declare_their_digest() {
        let blob = format!("v2/a/b/blobs/{D}");
        assert_eq!(
            Oci.in_path(&blob).map(|d| d.to_string()),
            Some(D.to_string())
        );
        assert_eq!(Oci.in_path("v2/a/manifests/latest"), None);
    }

    #[test]
    fn pull_endpoints_split_and_check_their_parts() {
        let manifest_by_digest = format!("library/alpine/manifests/{D}");
        let blob = format!("a/b/c/blobs/{D}");
        assert_eq!(
            split("library/alpine/manifests/3.19"),
            Ok(("library/alpine", Endpoint::Manifest(Reference::Tag("3.19"))))
        );
        assert_eq!(
            split(&manifest_by_digest),
            Ok(("library/alpine", Endpoint::Manifest(Reference::Digest(D))))
        );
        assert_eq!(split(&blob), Ok(("a/b/c", Endpoint::Blob(D))));
        assert_eq!(
            split("alpine/tags/list"),
            Ok(("alpine", Endpoint::TagsList))
        );
        for (rest, invalid) in [
            ("alpine/blobs/sha256:abc", Invalid::Digest),
            ("alpine/blobs/md5:abcd", Invalid::Digest),
            ("alpine/manifests/sha256:XYZ", Invalid::Digest),
            ("alpine/manifests/-bad", Invalid::Tag),
            ("a/../b/manifests/latest", Invalid::Name),
            ("a/./b/manifests/latest", Invalid::Name),
            ("Alpine/manifests/latest", Invalid::Name),
            ("a//b/manifests/latest", Invalid::Name),
            ("a%2fb/manifests/latest", Invalid::Name),
            ("alpine/blobs/uploads/", Invalid::Unsupported),
            ("_catalog", Invalid::Unsupported),
            ("alpine/referrers/x", Invalid::Digest),
        ] {
            assert_eq!(split(rest).err(), Some(invalid), "{rest}");
        }
    }

    #[test]
    fn names_follow_the_distribution_grammar() {
        for ok in ["a", "library/alpine", "a.b_c__d---e/f0", "x/y/z"] {
            assert!(is_repository_name(ok), "{ok}");
        }
        for bad in [
            "", "-a", "a-", "a..b", "a._b", "a___b", "a/", "/a", "A", "a b",
        ] {
            assert!(!is_repository_name(bad), "{bad}");
        }
        assert!(!is_repository_name(&"a".repeat(256)));
    }

    #[test]
    fn only_digest_addressed_paths_are_immutable() {
        assert!(is_immutable(&format!("v2/alpine/blobs/{D}")));
        assert!(is_immutable(&format!("v2/alpine/manifests/{D}")));
        assert!(!is_immutable("v2/alpine/manifests/latest"));
        assert!(!is_immutable("v2/alpine/tags/list"));
        assert!(!is_immutable(&format!("v2/alpine/referrers/{D}")));
        assert!(is_immutable(&blob_key(D)));
        assert_eq!(digest_in_path(&blob_key(D)), Some(D));
        assert_eq!(digest_in_path("v2/blobs/sha256:abc"), None);
        assert!(is_manifest("v2/alpine/manifests/latest"));
        assert!(!is_manifest(&format!("v2/alpine/blobs/{D}")));
    }

    #[test]
    fn docker_hub_names_get_library() {
        let hub = Url::parse("https://registry-1.docker.io").unwrap();
        assert!(is_docker_hub(&hub));
        assert!(!is_docker_hub(
            &Url::parse("https://mirror.gcr.io").unwrap()
        ));
        assert_eq!(hub_name("alpine", true), "library/alpine");
        assert_eq!(hub_name("user/app", true), "user/app");
        assert_eq!(hub_name("alpine", false), "alpine");
    }

    #[test]
    fn accept_picks_the_set_of_manifest_types() {
        let accept = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, value.parse().unwrap());
            headers
        };
        let tag = "v2/alpine/manifests/latest";
        let all = variant(tag, &HeaderMap::new()).unwrap();
        assert_eq!(all.suffix, "mf");
        assert_eq!(all.accept, MANIFEST_TYPES.join(", "));
        let one = variant(
            tag,
            &accept("application/vnd.docker.distribution.manifest.v2+json; q=0.9, */*"),
        )
        .unwrap();
        assert_eq!(one.suffix, "m8");
        assert_eq!(one.accept, MANIFEST_TYPES[3]);
        let two = variant(
            tag,
            &accept(&format!("{}, {}", MANIFEST_TYPES[0], MANIFEST_TYPES[2])),
        )
        .unwrap();
        assert_eq!(two.suffix, "m5");
        assert_eq!(variants(tag).len(), 15);
        let by_digest = format!("v2/alpine/manifests/{D}");
        assert_eq!(variant(&by_digest, &accept(MANIFEST_TYPES[3])), Some(all));
        assert_eq!(
            variant(&format!("v2/alpine/blobs/{D}"), &HeaderMap::new()),
            None
        );
    }
}
