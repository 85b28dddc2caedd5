//! conan: a Conan v2 remote (conan_server's and Artifactory's REST API
//! under `v2/`, the capabilities ping at `v1/ping`). A recipe is addressed as
//! `v2/conans/<name>/<version>/<user>/<channel>/` (`_` for none); below it,
//! a revision's files (`revisions/<rrev>/files/<file>`, and a package's
//! `revisions/<rrev>/packages/<package_id>/revisions/<prev>/files/<file>`)
//! are immutable; the `latest` and `revisions` lists, the file lists, the
//! searches (`v2/conans/search?q=…`, the query in the key) and the ping
//! (with its `X-Conan-Server-Capabilities`) are revalidated; nothing is
//! rewritten (the API answers with references, never URLs). A revision's
//! `conanmanifest.txt` gives the md5 of each file of the revision; the ones
//! the client downloads by themselves (`conanfile.py`, `conaninfo.txt`) are
//! checked against it, the manifest read by the proxy itself first when the
//! client did not ask for it; the archives (`conan_export.tgz`,
//! `conan_package.tgz`, `conan_sources.tgz`), whose contents the manifest
//! lists rather than the archive, are pinned on first use. Logins
//! (`v2/users/…`) are answered by the proxy from the caller's credentials
//! ([`AnsweredHere`]), never fetched: a mirror would answer them for the
//! remote's own; conan 1's API (`v1/` but the ping) is a 404. Packages are
//! recipe names as spelt, rules in Conan's version ranges
//! (`conan/version.rs`), publish times each recipe revision's `time` in the
//! reference's `revisions` list. Every path below a
//! reference is that reference's: a refused one is a 403 with the reason,
//! which conan prints; under a cooldown a recipe's `latest` is restated as
//! its newest revision old enough (refused when none is); the search, from
//! which conan resolves a version range, is served without the refused
//! references.

mod version;

use std::collections::HashMap;

use axum::http::HeaderMap;

use super::declared::{canonical, Algo, Declared, Document};
use super::guard::{parse_time, Filtered, Judge, VersionSpec};
use super::package::Artifact;
use super::{AnsweredHere, Digests, Ecosystem, Packages, Plan, TimeKey, TimeSource, TimesFrom};

pub struct Conan;

/// The manifest of a revision's files.
const MANIFEST: &str = "conanmanifest.txt";

/// The search of recipes, by name pattern (`?q=liba/*`).
const SEARCH: &str = "v2/conans/search";

/// The key of a reference's newest revision in its publish times.
const NEWEST: &str = "latest";

/// The most of a manifest read (one line a file of the package).
const MAX_MANIFEST: usize = 16 * 1024 * 1024;

/// A path below `v2/conans/<name>/<version>/<user>/<channel>/`: the
/// reference's name and version, the prefix up to and with the channel's
/// `/`, and the rest.
struct Reference<'p> {
    name: &'p str,
    version: &'p str,
    prefix: &'p str,
    rest: &'p str,
}

fn reference(path: &str) -> Option<Reference<'_>> {
    let below = path.strip_prefix("v2/conans/")?;
    let mut parts = below.splitn(5, '/');
    let (name, version, user, channel) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let rest = parts.next()?;
    if [name, version, user, channel].iter().any(|s| s.is_empty()) {
        return None;
    }
    let prefix = &path[..path.len() - rest.len()];
    Some(Reference {
        name,
        version,
        prefix,
        rest,
    })
}

/// One path segment that names something (a revision, a package id).
fn named(segment: &str) -> bool {
    !segment.is_empty() && segment != NEWEST
}

/// The recipe revision a path below a reference names
/// (`revisions/<rrev>/…`), if any.
fn recipe_revision(rest: &str) -> Option<&str> {
    let (rrev, _) = rest.strip_prefix("revisions/")?.split_once('/')?;
    named(rrev).then_some(rrev)
}

/// A revision's file: `revisions/<rrev>/files/<file>` or
/// `revisions/<rrev>/packages/<pid>/revisions/<prev>/files/<file>`, as
/// (the revision's directory up to and with `files/`, the file).
fn revision_file(rest: &str) -> Option<(&str, &str)> {
    let rrev = recipe_revision(rest)?;
    let after = &rest["revisions/".len() + rrev.len() + 1..];
    let file = match after.strip_prefix("files/") {
        Some(file) => file,
        None => {
            let (pid, below) = after.strip_prefix("packages/")?.split_once('/')?;
            let (prev, below) = below.strip_prefix("revisions/")?.split_once('/')?;
            if !named(pid) || !named(prev) {
                return None;
            }
            below.strip_prefix("files/")?
        }
    };
    let good = !file.is_empty() && file.split('/').all(|s| !s.is_empty());
    good.then(|| (&rest[..rest.len() - file.len()], file))
}

/// The path's revision file, as (the directory below the remote, the file).
fn file_path(path: &str) -> Option<(&str, &str)> {
    let reference = reference(path)?;
    let (dir, file) = revision_file(reference.rest)?;
    Some((&path[..reference.prefix.len() + dir.len()], file))
}

/// A file the client downloads by itself that a revision's manifest lists.
fn listed_by_manifest(file: &str) -> bool {
    file != MANIFEST && !file.contains('/') && !file.ends_with(".tgz")
}

/// What the proxy answers for the logins under `v2/users/`, and for conan
/// 1's API (`v1/` but the ping), whose download URLs point at the mirror.
fn answered_here(path: &str) -> Option<AnsweredHere> {
    if path.starts_with("v1/") && path != "v1/ping" {
        return Some(AnsweredHere::NotFound);
    }
    match path.strip_prefix("v2/users")? {
        "/authenticate" => Some(AnsweredHere::TokenLogin),
        "/check_credentials" => Some(AnsweredHere::Whoami),
        "" => Some(AnsweredHere::NotFound),
        other => other.starts_with('/').then_some(AnsweredHere::NotFound),
    }
}

impl Ecosystem for Conan {
    fn name(&self) -> &'static str {
        "conan"
    }

    /// A revision's files immutable; the search by its query; logins never
    /// fetched; the rest revalidated.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        let bare = path.split_once('?').map_or(path, |(bare, _)| bare);
        Plan {
            immutable: file_path(bare).is_some(),
            query_in_key: bare == SEARCH,
            answered_here: answered_here(bare),
            ..Plan::default()
        }
    }

    /// `require_declared_hash` would refuse every archive: the manifest
    /// lists the files in them, not the archives.
    fn refuses_key(&self, key: &str) -> Option<String> {
        match key {
            "require_declared_hash" => Some(
                "a conan remote's manifests declare the files conan unpacks, not the archives it downloads, so every archive would be refused; they are pinned on first use".to_string(),
            ),
            _ => super::standard_refusal(self.name(), self.digests(), self.packages(), key),
        }
    }

    /// The ping's answer is its capabilities header.
    fn kept_headers(&self, path: &str) -> &'static [&'static str] {
        match path {
            "v1/ping" | "v2/ping" => &["x-conan-server-capabilities"],
            _ => &[],
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

impl Digests for Conan {
    fn artifact_key(&self, path: &str) -> Option<String> {
        let (_, file) = file_path(path)?;
        (file != MANIFEST).then(|| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        file_path(path).is_some_and(|(_, file)| file == MANIFEST)
    }

    /// A listed file's manifest, beside it.
    fn declared_by(&self, path: &str) -> Vec<String> {
        match file_path(path) {
            Some((dir, file)) if listed_by_manifest(file) => vec![format!("{dir}{MANIFEST}")],
            _ => Vec::new(),
        }
    }

    /// Each `<file>: <md5>` line after the first (the time), for the files
    /// the client downloads by themselves.
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        let Some((dir, _)) = file_path(document.path) else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&body[..body.len().min(MAX_MANIFEST)]);
        text.lines()
            .skip(1)
            .filter_map(|line| {
                let (file, md5) = line.rsplit_once(": ")?;
                if !listed_by_manifest(file) {
                    return None;
                }
                let declared = Declared::from_hex(Algo::Md5, md5)?;
                Some((canonical(&format!("{dir}{file}")), declared))
            })
            .collect()
    }
}

/// A `time` as conan_server (`…+00:00`) or Artifactory (`…+0000`) writes
/// it, in unix ms.
fn revision_time(text: &str) -> Option<i64> {
    let text = text.trim();
    let at = text.len().checked_sub(5)?;
    match text.as_bytes().get(at..)? {
        [b'+' | b'-', h1, h2, m1, m2] if [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()) => {
            parse_time(&format!("{}:{}", &text[..at + 3], &text[at + 3..]))
        }
        _ => parse_time(text),
    }
}

/// `latest` (`{"revision": …, "time": …}`), or the newest revision of
/// `times` (by revision) that `judge` serves when it refuses that one.
fn latest_served(
    judge: &Judge,
    reference: &Reference<'_>,
    body: &[u8],
    times: &HashMap<String, i64>,
) -> Filtered {
    let Ok(latest) = serde_json::from_slice::<Revision>(body) else {
        return Filtered::Unchanged;
    };
    let (name, version) = (reference.name, reference.version);
    let published = times.get(&latest.revision).copied();
    let Some(reason) = judge.refusal(name, version, published) else {
        return Filtered::Unchanged;
    };
    let mut older: Vec<(&String, i64)> = times
        .iter()
        .filter(|(revision, _)| revision.as_str() != NEWEST)
        .map(|(revision, ms)| (revision, *ms))
        .collect();
    older.sort_by_key(|(_, ms)| std::cmp::Reverse(*ms));
    let Some((revision, ms)) = older
        .into_iter()
        .find(|(_, ms)| judge.refusal(name, version, Some(*ms)).is_none())
    else {
        return Filtered::Refused(reason);
    };
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    let time = humantime::format_rfc3339_micros(at).to_string();
    let time = format!("{}+00:00", time.trim_end_matches('Z'));
    let restated = serde_json::json!({"revision": revision, "time": time});
    serde_json::to_vec(&restated).map_or(Filtered::Unchanged, Filtered::Changed)
}

/// The search without the references `judge` refuses.
fn search_served(judge: &Judge, body: &[u8]) -> Filtered {
    let Ok(mut doc) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Filtered::Unchanged;
    };
    let Some(results) = doc.get_mut("results").and_then(|r| r.as_array_mut()) else {
        return Filtered::Unchanged;
    };
    let before = results.len();
    results.retain(|found| {
        let Some((name, version)) = found.as_str().and_then(name_version) else {
            return true;
        };
        judge.refusal(name, version, None).is_none()
    });
    if results.len() == before {
        return Filtered::Unchanged;
    }
    serde_json::to_vec(&doc).map_or(Filtered::Unchanged, Filtered::Changed)
}

/// The name and version of a reference as the search lists it
/// (`name/version[@user/channel][#revision]`).
fn name_version(reference: &str) -> Option<(&str, &str)> {
    let reference = reference.split(['@', '#']).next()?;
    let (name, version) = reference.split_once('/')?;
    (!name.is_empty() && !version.is_empty()).then_some((name, version))
}

/// A reference's `revisions` list.
#[derive(serde::Deserialize)]
struct RevisionList {
    revisions: Vec<Revision>,
}

#[derive(serde::Deserialize)]
struct Revision {
    revision: String,
    time: Option<String>,
}

impl Packages for Conan {
    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        version::Range::parse(text).map(VersionSpec::new)
    }

    /// Every path below a reference but its `revisions` list (which dates
    /// them); its `file` is the path, which says which revision it is of.
    fn artifact(&self, path: &str) -> Option<Artifact> {
        let bare = path.split_once('?').map_or(path, |(bare, _)| bare);
        let reference = reference(bare)?;
        if reference.rest == "revisions" {
            return None;
        }
        Some(Artifact {
            name: reference.name.to_string(),
            version: reference.version.to_string(),
            file: bare.to_string(),
        })
    }

    /// A name as rules match it: a reference's path
    /// (`v2/conans/<name>/<version>/<user>/<channel>/`, which names the
    /// document of its `latest`) is its recipe's name.
    fn normalise(&self, name: &str) -> String {
        reference(name).map_or(name, |r| r.name).to_string()
    }

    /// A recipe's `latest`, under its reference's path (its `revisions`
    /// date it), and the search (what a version range is resolved from),
    /// under its own: it lists many references.
    fn document(&self, path: &str) -> Option<String> {
        let bare = path.split_once('?').map_or(path, |(bare, _)| bare);
        if bare == SEARCH {
            return Some(bare.to_string());
        }
        let reference = reference(bare)?;
        (reference.rest == NEWEST).then(|| reference.prefix.to_string())
    }

    /// A recipe's `latest` is dated by its reference's `revisions`.
    fn times_from(&self, name: &str, _suffix: &str) -> Option<TimesFrom> {
        let reference = reference(name)?;
        Some(TimesFrom::Document(format!(
            "{}revisions",
            reference.prefix
        )))
    }

    /// A recipe's `latest` restated as the newest revision no rule refuses
    /// (the cooldown, by its `time`), refused when there is none; the
    /// search without the references refused.
    fn filter(
        &self,
        judge: &Judge,
        name: &str,
        body: &[u8],
        times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        match reference(name) {
            Some(reference) => latest_served(judge, &reference, body, times),
            None => search_served(judge, body),
        }
    }

    /// By recipe revision, and the newest (listed first) under `latest`.
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        let Ok(list) = serde_json::from_slice::<RevisionList>(body) else {
            return HashMap::new();
        };
        let mut times = HashMap::new();
        for (at, revision) in list.revisions.iter().enumerate() {
            let Some(ms) = revision.time.as_deref().and_then(revision_time) else {
                continue;
            };
            if at == 0 {
                times.insert(NEWEST.to_string(), ms);
            }
            times.insert(revision.revision.clone(), ms);
        }
        times
    }

    /// The reference's `revisions` list, at the path's recipe revision
    /// (the newest for a path that names none); none for `latest`, which
    /// is restated rather than refused.
    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        let reference = reference(&artifact.file)?;
        if reference.rest == NEWEST {
            return None;
        }
        let key = recipe_revision(reference.rest).unwrap_or(NEWEST);
        Some(TimeSource {
            document: format!("{}revisions", reference.prefix),
            suffix: "",
            key: TimeKey::Listed(key.to_string()),
        })
    }
}

#[cfg(test)]
mod tests;
