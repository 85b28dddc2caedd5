//! nuget: a NuGet feed, v3 and v2. v3: the service index (`…/index.json`)
//! and every JSON document are rewritten, so each resource URL on the
//! remote's hosts (search and autocomplete on its `files` hosts, under
//! `~files/`) points at the proxy; the flat container (`{id}/index.json`,
//! `.nupkg`, `.nuspec`) and registration documents (`registration*/{id}/
//! index.json`, pages, leaves; gzipped or not upstream, stored decoded) are
//! cached, package files immutable; search and autocomplete (`…/query`,
//! `…/autocomplete`, `…/search`) are passed through. v2 (OData): the
//! service document (`…/v2`), `$metadata`, `Packages(Id=…,Version=…)`,
//! `FindPackagesById()`, `Packages()` and `Search()` (their query in the
//! key) are rewritten documents; `package/{id}/{version}` downloads are
//! immutable. A package's `packageHash` (SHA-512, base64), where a
//! registration's `catalogEntry` or a v2 entry carries one, is the declared
//! digest of its `packageContent` / `<content src>`; one nothing declares
//! (nuget.org's registration pages carry no hash) is pinned on first use.
//! Packages are ids (compared without regard to case), rules in NuGet's
//! interval notation (`[1.0,2.0)`, `(,1.0]`, a bare version exactly);
//! publish times each version's `published` (registration) or
//! `<d:Published>` (v2); a flat-container package (and the version list,
//! newest first) is dated by its registration leaf at nuget.org's path
//! (`v3/registration5-gz-semver2/{id}/{version}.json`), a v2 download by
//! its `api/v2/Packages(Id=…,Version=…)` entry. Registration documents,
//! version lists and v2 feeds lose refused versions; a package file of one
//! is 403 with the reason in the status line (`dotnet` and `nuget` print
//! the status line).

mod feed;
mod registration;
mod version;

use std::collections::HashMap;

use axum::http::HeaderMap;
use base64::Engine as _;

use super::declared::{canonical, Algo, Declared, Document};
use super::guard::{parse_time, Filtered, Judge, VersionSpec};
use super::package::Artifact;
use super::{
    interval, Digests, Ecosystem, Packages, PassThrough, Plan, Rewritten, TimeKey, TimeSource,
};
use registration::Left;
use version::NugetVersion;

pub struct Nuget;

/// The path without its query.
fn bare(path: &str) -> &str {
    path.split('?').next().unwrap_or(path)
}

fn segments(path: &str) -> Vec<&str> {
    bare(path).split('/').filter(|s| !s.is_empty()).collect()
}

/// A v2 OData document: the service document (`…/v2`), `$metadata`, or a
/// query (`Packages(…)`, `FindPackagesById()`, `Search()`).
fn is_v2_document(path: &str) -> bool {
    let last = segments(path).last().copied().unwrap_or("");
    last == "v2"
        || last == "$metadata"
        || ["Packages(", "FindPackagesById(", "Search(", "GetUpdates("]
            .iter()
            .any(|f| last.starts_with(f))
}

/// A v2 download: `…/package/{id}/{version}`.
fn v2_package(path: &str) -> Option<(&str, &str)> {
    match segments(path).as_slice() {
        [.., "package", id, version] if !path.contains('?') => Some((id, version)),
        _ => None,
    }
}

/// A flat-container file: `…/{id}/{version}/{file}` (`.nupkg`, `.nuspec`).
fn flat_file(path: &str) -> Option<(&str, &str)> {
    match segments(path).as_slice() {
        [.., id, version, file]
            if !path.contains('?') && (file.ends_with(".nupkg") || file.ends_with(".nuspec")) =>
        {
            Some((id, version))
        }
        _ => None,
    }
}

fn is_package(path: &str) -> bool {
    v2_package(path).is_some() || (flat_file(path).is_some() && path.ends_with(".nupkg"))
}

/// The search and autocomplete services.
fn is_search(path: &str) -> bool {
    matches!(
        segments(path).last(),
        Some(&("query" | "autocomplete" | "search"))
    )
}

/// Where a v3 document sits: (its base's kind, the package id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Registration,
    Flat,
}

/// The package a v3 document is about: `registration*/{id}/…` or a flat
/// container's `{id}/index.json`.
fn v3_package(path: &str) -> Option<(Base, &str)> {
    let segments = segments(path);
    if !path.ends_with(".json") {
        return None;
    }
    let at = segments.iter().position(|s| s.starts_with("registration"));
    if let Some(at) = at {
        return segments.get(at + 1).map(|id| (Base::Registration, *id));
    }
    match segments.as_slice() {
        [.., base, id, "index.json"] if base.contains("flat") => Some((Base::Flat, id)),
        _ => None,
    }
}

/// The id a v2 query names: `Packages(Id='x',…)`, `?id='x'`.
fn v2_id(path: &str) -> Option<String> {
    let quoted = |text: &str| {
        let text = text.trim_start_matches("%27").trim_start_matches('\'');
        let end = text.find(['\'', ',', ')', '&']).unwrap_or(text.len());
        let id = text[..end].trim_end_matches("%27");
        (!id.is_empty()).then(|| id.to_string())
    };
    let last = segments(path).last().copied().unwrap_or("");
    if let Some(rest) = last.strip_prefix("Packages(Id=") {
        return quoted(rest);
    }
    if last.starts_with("FindPackagesById(") {
        let query = path.split_once('?')?.1;
        let value = query.split('&').find_map(|p| p.strip_prefix("id="))?;
        return quoted(value);
    }
    None
}

impl Ecosystem for Nuget {
    fn name(&self) -> &'static str {
        "nuget"
    }

    /// JSON and v2 documents rewritten (v2 queries keyed with their query);
    /// package files immutable; search passed through.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        if is_search(path) {
            return Plan {
                pass_through: Some(PassThrough { post: false }),
                ..Plan::default()
            };
        }
        let v2 = is_v2_document(path);
        Plan {
            immutable: is_package(path) || flat_file(path).is_some(),
            document: Rewritten::when(v2 || bare(path).ends_with(".json")),
            query_in_key: v2,
            ..Plan::default()
        }
    }

    /// nuget.org's search hosts (its service index names them).
    fn default_files(&self) -> &'static [&'static str] {
        &[
            "https://azuresearch-usnc.nuget.org",
            "https://azuresearch-ussc.nuget.org",
        ]
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

/// A package's hash as NuGet writes it: (base64, algorithm).
type Hash = (String, String);

/// A declared SHA-512 (base64, as NuGet writes `packageHash`).
fn declared_hash((hash, algo): &Hash) -> Option<Declared> {
    let algo = Algo::parse(&algo.to_ascii_lowercase())?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(hash)
        .ok()?;
    Declared::new(algo, bytes)
}

impl Digests for Nuget {
    fn artifact_key(&self, path: &str) -> Option<String> {
        is_package(path).then(|| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        v3_package(path).is_some_and(|(base, _)| base == Base::Registration) || is_v2_document(path)
    }

    /// `packageHash` for each version's `packageContent` (registration), or
    /// `PackageHash` for each entry's `<content src>` (v2).
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        let pairs: Vec<(Option<String>, Option<Hash>)> = if is_v2_document(document.path) {
            let text = String::from_utf8_lossy(body);
            feed::entries(&text)
                .into_iter()
                .map(|e| (e.content, e.hash))
                .collect()
        } else {
            registration::leaves(body)
                .into_iter()
                .map(|l| (l.content, l.hash))
                .collect()
        };
        pairs
            .into_iter()
            .filter_map(|(url, hash)| {
                let declared = declared_hash(hash.as_ref()?)?;
                Some((document.path_of(&url?)?, declared))
            })
            .collect()
    }
}

/// nuget.org's registration index of `id` (below a remote whose mirror is
/// `https://api.nuget.org`), and its leaf of `version`.
fn registration(id: &str, version: Option<&str>) -> String {
    let id = id.to_ascii_lowercase();
    match version {
        Some(version) => format!(
            "v3/registration5-gz-semver2/{id}/{}.json",
            NugetVersion::normalised(version)
        ),
        None => format!("v3/registration5-gz-semver2/{id}/index.json"),
    }
}

impl Packages for Nuget {
    /// NuGet ids are compared without regard to case.
    fn normalise(&self, name: &str) -> String {
        name.to_ascii_lowercase()
    }

    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        interval::parse(text, NugetVersion::read)
            .map(VersionSpec::new)
            .map_err(|e| format!("{text:?} is not a NuGet version range: {e}"))
    }

    /// `…/{id}/{version}/{id}.{version}.nupkg` or `…/package/{id}/{version}`.
    fn artifact(&self, path: &str) -> Option<Artifact> {
        let (id, version) = v2_package(path).or_else(|| flat_file(path))?;
        let file = segments(path).last()?.to_string();
        Some(Artifact {
            name: id.to_string(),
            version: version.to_string(),
            file,
        })
    }

    fn document(&self, path: &str) -> Option<String> {
        if is_v2_document(path) {
            return v2_id(path);
        }
        v3_package(path).map(|(_, id)| id.to_string())
    }

    /// By normalised version: registration leaves' `published`, v2
    /// entries' `<d:Published>` (UTC, often without a zone).
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        let dated: Vec<(String, Option<String>)> = if body.first() == Some(&b'<') {
            let text = String::from_utf8_lossy(body);
            feed::entries(&text)
                .into_iter()
                .map(|e| (e.version, e.published))
                .collect()
        } else {
            registration::leaves(body)
                .into_iter()
                .map(|l| (l.version, l.published))
                .collect()
        };
        dated
            .into_iter()
            .filter_map(|(version, published)| {
                let at = parse_time(&published?)?;
                Some((NugetVersion::normalised(&version), at))
            })
            .collect()
    }

    /// A flat-container package's registration leaf; a v2 download's
    /// `api/v2/Packages(Id=…,Version=…)` entry.
    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        let key = TimeKey::Listed(NugetVersion::normalised(&artifact.version));
        let document = if artifact.file.ends_with(".nupkg") || artifact.file.ends_with(".nuspec") {
            registration(&artifact.name, Some(&artifact.version))
        } else {
            format!(
                "api/v2/Packages(Id='{}',Version='{}')",
                artifact.name, artifact.version
            )
        };
        Some(TimeSource {
            document,
            suffix: "",
            key,
        })
    }

    /// A flat container's version list has no times: each version's
    /// package, newest first, is dated by its registration leaf.
    fn dated_versions(&self, name: &str, body: &[u8]) -> Vec<Artifact> {
        #[derive(serde::Deserialize)]
        struct Versions {
            versions: Vec<String>,
        }
        let Ok(list) = serde_json::from_slice::<Versions>(body) else {
            return Vec::new();
        };
        let mut versions = list.versions;
        versions.sort_by_key(|v| std::cmp::Reverse(NugetVersion::read(v)));
        let id = name.to_ascii_lowercase();
        versions
            .into_iter()
            .map(|version| Artifact {
                file: format!("{id}.{version}.nupkg"),
                name: id.clone(),
                version,
            })
            .collect()
    }

    /// The refused versions go, each dated by its own `published` (the
    /// version list by `times`); a document with none left is the refusal.
    fn filter(
        &self,
        judge: &Judge,
        name: &str,
        body: &[u8],
        times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        let mut last = None;
        let mut refused = |version: &str, published: Option<i64>| {
            let published = published
                .or_else(|| times.get(version).copied())
                .or_else(|| times.get(&NugetVersion::normalised(version)).copied());
            let reason = judge.refusal(name, version, published);
            let is = reason.is_some();
            last = reason.or(last.take());
            is
        };
        let left = if body.first() == Some(&b'<') {
            let Ok(text) = std::str::from_utf8(body) else {
                return Filtered::Unchanged;
            };
            match feed::without(text, |e| {
                refused(&e.version, e.published.as_deref().and_then(parse_time))
            }) {
                None => Left::All,
                Some((_, true)) => Left::None,
                Some((out, false)) => Left::Some(out.into_bytes()),
            }
        } else if body.windows(11).any(|w| w == b"\"versions\":")
            && !body.windows(7).any(|w| w == b"\"items\"")
        {
            registration::without_versions(body, |v| refused(v, None))
        } else {
            registration::without_leaves(body, |l| {
                refused(&l.version, l.published.as_deref().and_then(parse_time))
            })
        };
        match (left, last) {
            (Left::All, _) | (_, None) => Filtered::Unchanged,
            (Left::Some(out), _) => Filtered::Changed(out),
            (Left::None, Some(reason)) => Filtered::Refused(reason),
        }
    }

    /// `dotnet` prints `Response status code does not indicate success: 403
    /// (<reason>)`, `nuget` the status line: the reason phrase.
    fn reason_in_status_line(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
