//! terraform: a Terraform / OpenTofu registry (the remote's mirrors are
//! registry roots whose `providers.v1` is `/v1/providers/`, such as
//! `registry.terraform.io` and `registry.opentofu.org`, in order), served
//! two ways. The provider registry protocol is passed through:
//! `.well-known/terraform.json` (its service URLs re-pointed at the
//! remote), `v1/providers/{ns}/{type}/versions`, `…/{version}/download/{os}/{arch}`
//! (its `download_url`, `shasums_url` and `shasums_signature_url` on the
//! remote's `files` hosts re-pointed under `~files/`), `v1/modules/…` (a
//! module's `download` answer keeps its `X-Terraform-Get`, re-pointed the
//! same way). The provider network mirror protocol is answered from it:
//! `{hostname}/{ns}/{type}/index.json` and `…/{version}.json`, for the
//! hostnames in the remote's `hostnames` (others are 404), are stored as the
//! registry's version list and made into the mirror's documents, each
//! archive's `url` re-pointed and its `hashes` (`zh:`, the archive's
//! sha256, and any the registry lists per platform) read from the version's
//! download answers. A download answer's `shasum` and the lines of a
//! `SHA256SUMS` file declare the archives' sha256; the signature is passed
//! on untouched for the client to check with the registry's
//! `signing_keys`. Packages are providers (`namespace/type`, compared
//! without regard to case), rules in Terraform's constraint syntax
//! (`>= 1.2, < 2.0`, `~> 1.2`, `!= 1.3.0`); a refused version leaves the
//! version lists, and its download answer and `{version}.json` are 403 with
//! the reason in the status line. The registry protocol gives no publish
//! times, so `min_release_age` is refused.

mod constraint;
mod documents;

use std::collections::HashMap;

use axum::http::HeaderMap;

use super::declared::{canonical, Algo, Declared, Document};
use super::guard::{Filtered, Judge, VersionSpec};
use super::package::Artifact;
use super::{Digests, Ecosystem, Packages, Plan, Rewritten};

pub struct Terraform;

/// What a path below a terraform remote is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'p> {
    /// `.well-known/terraform.json`.
    Discovery,
    /// `v1/providers/{ns}/{type}/versions`.
    Versions {
        ns: &'p str,
        ty: &'p str,
    },
    /// `v1/providers/{ns}/{type}/{version}/download/{os}/{arch}`.
    Download {
        ns: &'p str,
        ty: &'p str,
        version: &'p str,
    },
    /// `v1/modules/{ns}/{name}/{system}/versions`.
    ModuleVersions,
    /// `v1/modules/{ns}/{name}/{system}/{version}/download`.
    ModuleDownload,
    /// `{host}/{ns}/{type}/index.json`.
    MirrorIndex {
        host: &'p str,
        ns: &'p str,
        ty: &'p str,
    },
    /// `{host}/{ns}/{type}/{version}.json`.
    MirrorVersion {
        host: &'p str,
        ns: &'p str,
        ty: &'p str,
        version: &'p str,
    },
    /// `…_SHA256SUMS` (under `~files/` or the registry's own host).
    Sums,
    /// `….zip`: a provider archive.
    Archive,
    Other,
}

fn route(path: &str) -> Route<'_> {
    if path == ".well-known/terraform.json" {
        return Route::Discovery;
    }
    if path.contains('?') {
        return Route::Other;
    }
    // Where the registry's own host serves archives too, they are below
    // the remote itself.
    if path.ends_with("_SHA256SUMS") {
        return Route::Sums;
    }
    if path.ends_with(".zip") {
        return Route::Archive;
    }
    if path.starts_with(super::FILES_PREFIX) {
        return Route::Other;
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Route::Other;
    }
    match segments.as_slice() {
        ["v1", "providers", ns, ty, "versions"] => Route::Versions { ns, ty },
        ["v1", "providers", ns, ty, version, "download", _os, _arch] => {
            Route::Download { ns, ty, version }
        }
        ["v1", "modules", _, _, _, "versions"] => Route::ModuleVersions,
        ["v1", "modules", _, _, _, _, "download"] => Route::ModuleDownload,
        [host, ns, ty, "index.json"] if is_host(host) => Route::MirrorIndex { host, ns, ty },
        [host, ns, ty, file] if is_host(host) => match file.strip_suffix(".json") {
            Some(version) if version.starts_with(|c: char| c.is_ascii_digit()) => {
                Route::MirrorVersion {
                    host,
                    ns,
                    ty,
                    version,
                }
            }
            _ => Route::Other,
        },
        _ => Route::Other,
    }
}

/// A registry hostname as a provider address names it (not one of the
/// registry protocol's own first segments).
fn is_host(segment: &str) -> bool {
    segment != "v1" && !segment.starts_with('.') && !segment.starts_with('~')
}

/// The provider address compared by rules: `namespace/type`.
fn provider(ns: &str, ty: &str) -> String {
    format!("{ns}/{ty}")
}

impl Ecosystem for Terraform {
    fn name(&self) -> &'static str {
        "terraform"
    }

    /// Registry answers and mirror documents rewritten; archives and their
    /// `SHA256SUMS` immutable; the mirror protocol's hostname checked.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        let route = route(path);
        let registry_host = match route {
            Route::MirrorIndex { host, .. } | Route::MirrorVersion { host, .. } => Some(host),
            _ => None,
        };
        Plan {
            immutable: matches!(route, Route::Sums | Route::Archive),
            document: Rewritten::when(!matches!(
                route,
                Route::Sums | Route::Archive | Route::Other
            )),
            registry_host,
            ..Plan::default()
        }
    }

    /// The mirror protocol's documents are made from the registry's list
    /// of the provider's versions.
    fn upstream_path(&self, path: &str) -> Option<String> {
        match route(path) {
            Route::MirrorIndex { ns, ty, .. } | Route::MirrorVersion { ns, ty, .. } => {
                Some(format!("v1/providers/{ns}/{ty}/versions"))
            }
            _ => None,
        }
    }

    /// A `{version}.json` states each platform's download answer.
    fn rewritten_with(&self, path: &str, body: &[u8]) -> Vec<String> {
        match route(path) {
            Route::MirrorVersion {
                ns, ty, version, ..
            } => documents::platforms(body, version)
                .into_iter()
                .map(|(os, arch)| format!("v1/providers/{ns}/{ty}/{version}/download/{os}/{arch}"))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The services document's URLs, root-relative ones too; any other
    /// answer's absolute URLs.
    fn rewrite(&self, path: &str, text: &str, rewrite: &super::rewrite::Rewrite) -> String {
        match route(path) {
            Route::Discovery => documents::services(text, rewrite),
            _ => None,
        }
        .unwrap_or_else(|| rewrite.apply(text))
    }

    /// The mirror's documents made; a module's empty download answer (a
    /// 204) made `{}`, which clients read as "see `X-Terraform-Get`".
    fn rewrite_body(
        &self,
        path: &str,
        body: Vec<u8>,
        rewrite: &super::rewrite::Rewrite,
        others: &[(String, Vec<u8>)],
    ) -> Vec<u8> {
        match route(path) {
            Route::MirrorIndex { .. } => documents::mirror_index(&body),
            Route::MirrorVersion { .. } => documents::mirror_version(others, rewrite),
            Route::ModuleDownload if body.is_empty() => b"{}".to_vec(),
            _ => match String::from_utf8(body) {
                Ok(text) => self.rewrite(path, &text, rewrite).into_bytes(),
                Err(e) => e.into_bytes(),
            },
        }
    }

    /// A module's download answer gives its location in this header.
    fn kept_headers(&self, path: &str) -> &'static [&'static str] {
        match route(path) {
            Route::ModuleDownload => &["x-terraform-get"],
            _ => &[],
        }
    }

    /// Where the public registries' archives are: HashiCorp's releases
    /// host, and GitHub releases (with the hosts they redirect to).
    fn default_files(&self) -> &'static [&'static str] {
        &[
            "https://releases.hashicorp.com",
            "https://github.com",
            "https://objects.githubusercontent.com",
            "https://release-assets.githubusercontent.com",
        ]
    }

    fn default_hostnames(&self) -> &'static [&'static str] {
        &["registry.terraform.io", "registry.opentofu.org"]
    }

    fn refuses_key(&self, key: &str) -> Option<String> {
        match key {
            "hostnames" => None,
            "min_release_age" => Some(
                "the provider registry protocol gives no publish times: a terraform remote has no cooldown"
                    .to_string(),
            ),
            _ => super::standard_refusal(self.name(), self.digests(), self.packages(), key),
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

impl Digests for Terraform {
    fn artifact_key(&self, path: &str) -> Option<String> {
        (route(path) == Route::Archive).then(|| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        matches!(route(path), Route::Download { .. } | Route::Sums)
    }

    /// A download answer's `shasum` for its `download_url`; a `SHA256SUMS`
    /// file's lines for the files beside it.
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        let sha256 = |hex: &str| Declared::from_hex(Algo::Sha256, hex);
        if route(document.path) == Route::Sums {
            let dir = document.path.rsplit_once('/').map_or("", |(dir, _)| dir);
            return String::from_utf8_lossy(body)
                .lines()
                .filter_map(|line| {
                    let (hex, file) = line.split_once(char::is_whitespace)?;
                    let file = file.trim().trim_start_matches('*');
                    Some((format!("{dir}/{file}"), sha256(hex)?))
                })
                .collect();
        }
        documents::download(body)
            .and_then(|d| Some((document.path_of(&d.download_url)?, sha256(&d.shasum)?)))
            .into_iter()
            .collect()
    }
}

impl Packages for Terraform {
    /// Provider addresses are compared without regard to case.
    fn normalise(&self, name: &str) -> String {
        name.to_ascii_lowercase()
    }

    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        constraint::Constraint::parse(text)
            .map(VersionSpec::new)
            .map_err(|e| format!("{text:?} is not a Terraform version constraint: {e}"))
    }

    /// A download answer (`{os}_{arch}`) or a mirror's `{version}.json`.
    fn artifact(&self, path: &str) -> Option<Artifact> {
        let (ns, ty, version) = match route(path) {
            Route::Download { ns, ty, version } => (ns, ty, version),
            Route::MirrorVersion {
                ns, ty, version, ..
            } => (ns, ty, version),
            _ => return None,
        };
        Some(Artifact {
            name: provider(ns, ty),
            version: version.to_string(),
            file: super::package::file_name(path)?,
        })
    }

    /// The registry's version list and the mirror's `index.json`.
    fn document(&self, path: &str) -> Option<String> {
        match route(path) {
            Route::Versions { ns, ty } | Route::MirrorIndex { ns, ty, .. } => {
                Some(provider(ns, ty))
            }
            _ => None,
        }
    }

    /// The refused versions leave the list; a list with none left is the
    /// refusal.
    fn filter(
        &self,
        judge: &Judge,
        name: &str,
        body: &[u8],
        _times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        let mut last = None;
        let left = documents::without_versions(body, |version| {
            let reason = judge.refusal(name, version, None);
            let refused = reason.is_some();
            last = reason.or(last.take());
            refused
        });
        match (left, last) {
            (None, _) | (_, None) => Filtered::Unchanged,
            (Some((_, 0)), Some(reason)) => Filtered::Refused(reason),
            (Some((out, _)), Some(_)) => Filtered::Changed(out),
        }
    }

    /// `tofu` and `terraform` print the status of a failed registry or
    /// mirror request, not its body.
    fn reason_in_status_line(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
