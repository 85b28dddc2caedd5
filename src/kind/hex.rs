//! hex: a Hex repository (repo.hex.pm's layout, an organization's under
//! `repos/<org>/`). Tarballs (`tarballs/<name>-<version>.tar`) are
//! immutable; the signed registry (`names`, `versions`, `packages/<name>`:
//! gzipped protobuf, signed by the repository's key) and `public_key` are
//! revalidated and passed through byte for byte, so the client's signature
//! check holds. Each release's `outer_checksum` in `packages/<name>` (the
//! sha256 of the tarball) is its tarball's declared digest, read by the
//! proxy itself when the client did not ask for it first (a locked
//! project); a release without one is pinned on first use. Packages are
//! named as spelt, rules in Elixir's requirement syntax (`~> 1.2`, `>= 1.0
//! and < 2.0`; `hex/requirement.rs`), publish times each release's
//! `published_at` where the registry carries it. The registry is signed, so
//! nothing is taken out of it: a refused release's tarball is a 403 with the
//! reason (rebar3 shows the status code only, with `DEBUG=1`).

mod requirement;

use std::collections::HashMap;
use std::io::Read;

use axum::http::HeaderMap;

use super::declared::{canonical, Algo, Declared, Document};
use super::guard::VersionSpec;
use super::package::Artifact;
use super::{Digests, Ecosystem, Packages, Plan, TimeKey, TimeSource};

pub struct Hex;

/// The part of the signed registry the proxy reads (hex_core's
/// `hex_pb_signed.proto` and `hex_pb_package.proto`; the rest is skipped).
mod registry {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Signed {
        #[prost(bytes = "vec", optional, tag = "1")]
        pub payload: Option<Vec<u8>>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Package {
        #[prost(message, repeated, tag = "1")]
        pub releases: Vec<Release>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Release {
        #[prost(string, optional, tag = "1")]
        pub version: Option<String>,
        #[prost(bytes = "vec", optional, tag = "5")]
        pub outer_checksum: Option<Vec<u8>>,
        #[prost(message, optional, tag = "7")]
        pub published_at: Option<Timestamp>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Timestamp {
        #[prost(int64, optional, tag = "1")]
        pub seconds: Option<i64>,
    }
}

/// The most a registry document is unpacked to (hex.pm's largest
/// `packages/<name>` is a few hundred KiB).
const MAX_REGISTRY: u64 = 64 * 1024 * 1024;

/// The organization prefix (`repos/<org>/` or empty) and the rest.
fn split_repo(path: &str) -> (&str, &str) {
    if let Some(rest) = path.strip_prefix("repos/") {
        if let Some((org, tail)) = rest.split_once('/') {
            if !org.is_empty() {
                return (&path[..6 + org.len() + 1], tail);
            }
        }
    }
    ("", path)
}

/// One path segment after `prefix`.
fn segment<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let (_, rest) = split_repo(path);
    let name = rest.strip_prefix(prefix)?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

/// `tarballs/<name>-<version>.tar`: the name (no `-` in a Hex name) and
/// the version.
fn tarball(path: &str) -> Option<(&str, &str)> {
    let stem = segment(path, "tarballs/")?.strip_suffix(".tar")?;
    let (name, version) = stem.split_once('-')?;
    (!name.is_empty() && version.starts_with(|c: char| c.is_ascii_digit()))
        .then_some((name, version))
}

/// The releases of a `packages/<name>` body (gzipped `Signed` around a
/// `Package`), unverified: the client verifies the signature.
fn releases(body: &[u8]) -> Vec<registry::Release> {
    use prost::Message as _;
    let mut signed = Vec::new();
    let unpacked = flate2::read::GzDecoder::new(body)
        .take(MAX_REGISTRY)
        .read_to_end(&mut signed);
    if unpacked.is_err() {
        return Vec::new();
    }
    let Some(payload) = registry::Signed::decode(&signed[..])
        .ok()
        .and_then(|s| s.payload)
    else {
        return Vec::new();
    };
    registry::Package::decode(&payload[..]).map_or_else(|_| Vec::new(), |p| p.releases)
}

impl Ecosystem for Hex {
    fn name(&self) -> &'static str {
        "hex"
    }

    /// Tarballs immutable; the registry and the key revalidated, never
    /// rewritten (it is signed).
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: tarball(path).is_some(),
            ..Plan::default()
        }
    }

    fn digests(&self) -> Option<&dyn Digests> {
        Some(self)
    }

    fn packages(&self) -> Option<&dyn Packages> {
        Some(self)
    }

    #[cfg(test)]
    fn conformance(&self) -> super::conformance::Rows {
        tests::rows()
    }
}

impl Digests for Hex {
    fn artifact_key(&self, path: &str) -> Option<String> {
        tarball(path).map(|_| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        segment(path, "packages/").is_some()
    }

    /// The package's registry document, for a locked project whose client
    /// asks for the tarball alone.
    fn declared_by(&self, path: &str) -> Vec<String> {
        let (repo, _) = split_repo(path);
        tarball(path).map_or_else(Vec::new, |(name, _)| vec![format!("{repo}packages/{name}")])
    }

    /// Each release's `outer_checksum`, for its tarball.
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        let Some(name) = segment(document.path, "packages/") else {
            return Vec::new();
        };
        let (repo, _) = split_repo(document.path);
        releases(body)
            .into_iter()
            .filter_map(|release| {
                let declared = Declared::new(Algo::Sha256, release.outer_checksum?)?;
                let version = release.version?;
                Some((
                    canonical(&format!("{repo}tarballs/{name}-{version}.tar")),
                    declared,
                ))
            })
            .collect()
    }
}

impl Packages for Hex {
    fn osv_ecosystem(&self) -> Option<&'static str> {
        Some("Hex")
    }

    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        requirement::Requirement::parse(text).map(VersionSpec::new)
    }

    /// `tarballs/<name>-<version>.tar`; its `file` is the path, which says
    /// whose registry document dates it.
    fn artifact(&self, path: &str) -> Option<Artifact> {
        let (name, version) = tarball(path)?;
        Some(Artifact {
            name: name.to_string(),
            version: version.to_string(),
            file: path.to_string(),
        })
    }

    /// The registry is signed: no document is filtered.
    fn document(&self, _path: &str) -> Option<String> {
        None
    }

    /// By version: each release's `published_at`.
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        releases(body)
            .into_iter()
            .filter_map(|r| {
                let seconds = r.published_at?.seconds?;
                Some((r.version?, seconds.checked_mul(1000)?))
            })
            .collect()
    }

    /// The package's `packages/<name>`.
    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        let (repo, _) = split_repo(&artifact.file);
        Some(TimeSource {
            document: format!("{repo}packages/{}", artifact.name),
            suffix: "",
            key: TimeKey::Listed(artifact.version.clone()),
        })
    }
}

#[cfg(test)]
mod tests;
