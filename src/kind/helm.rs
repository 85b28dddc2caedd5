//! helm: a Helm chart repository over HTTP. `index.yaml` (YAML, or the JSON
//! form `helm repo index --json` writes, which Helm reads at the same path)
//! and `index.json` are documents: absolute chart URLs on the remote's
//! hosts are re-pointed at the proxy (on its `files` hosts under
//! `~files/`), relative ones already resolve against the proxy, since Helm
//! resolves them against the repository URL. Charts (`*.tgz`) and their
//! provenance files (`*.tgz.prov`, passed on untouched for `helm
//! verify`) are immutable; each version's `digest` (sha256) is the declared
//! digest of every URL it lists. Packages are charts (names as spelt),
//! rules in Helm's constraint syntax (`^1.2`, `~1.2`, `>= 1.2, < 2`,
//! `1.2.x`, `||`); publish times each version's `created`. The index is
//! filtered of refused versions' records (a chart with none left loses its
//! key); a chart file's name (`<chart>-<version>.tgz`) names its version,
//! so a refused one is 403 with the reason in the status line, which Helm
//! prints. The index is read line by line (`helm/index.rs`), so a
//! tens-of-MB index costs a few times its size while it is rewritten.

mod index;

use std::collections::HashMap;

use axum::http::HeaderMap;

use super::declared::{canonical, Algo, Declared, Document};
use super::guard::{parse_time, Filtered, Judge, VersionSet, VersionSpec};
use super::package::{self, Artifact};
use super::{Digests, Ecosystem, Packages, Plan, Rewritten, TimeKey, TimeSource};

pub struct Helm;

/// Where the index is, below the remote.
const INDEX: &str = "index.yaml";

fn is_index(path: &str) -> bool {
    path == INDEX || path == "index.json"
}

fn is_chart(path: &str) -> bool {
    path.ends_with(".tgz") && !path.ends_with('/')
}

impl Ecosystem for Helm {
    fn name(&self) -> &'static str {
        "helm"
    }

    /// The index rewritten; charts and provenance files immutable.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: is_chart(path) || path.ends_with(".tgz.prov"),
            document: Rewritten::when(is_index(path)),
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

impl Digests for Helm {
    fn artifact_key(&self, path: &str) -> Option<String> {
        is_chart(path).then(|| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        is_index(path)
    }

    /// Each version's `digest` (sha256, `sha256:` allowed before it) for
    /// every URL it lists on the remote's hosts.
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        index::records(body)
            .into_iter()
            .filter_map(|record| {
                let hex = record.digest.as_deref()?;
                let declared = Declared::from_hex(Algo::Sha256, hex.trim_start_matches("sha256:"))?;
                Some((record.urls, declared))
            })
            .flat_map(|(urls, declared)| {
                urls.into_iter()
                    .filter_map(|url| document.path_of(&url))
                    .map(move |path| (path, declared.clone()))
            })
            .collect()
    }
}

/// The first URL and the `digest` the index `body` lists for `chart` at
/// `version`, as Helm picks them (`warm` reads a `Chart.lock` with it).
pub fn chart_in_index(body: &[u8], chart: &str, version: &str) -> Option<(String, Option<String>)> {
    let record = index::records(body)
        .into_iter()
        .find(|r| r.chart == chart && r.version == version)?;
    let url = record.urls.into_iter().next()?;
    Some((url.into_owned(), record.digest.map(|d| d.into_owned())))
}

/// A Helm version constraint (Masterminds semver: commas between
/// comparators, `||` between alternatives), read as an npm range, which
/// has the same operators; versions may start with `v`.
struct Constraint(nodejs_semver::Range);

impl VersionSet for Constraint {
    fn contains(&self, version: &str) -> bool {
        nodejs_semver::Version::parse(version.trim_start_matches('v'))
            .is_ok_and(|v| self.0.satisfies_with_prerelease(&v, true))
    }
}

/// The key of a version's publish time: `<chart> <version>`.
fn time_key(chart: &str, version: &str) -> String {
    format!("{chart} {version}")
}

impl Packages for Helm {
    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        let spaced = text.replace(',', " ");
        nodejs_semver::Range::parse(spaced.trim_start_matches('v'))
            .map(|range| VersionSpec::new(Constraint(range)))
            .map_err(|_| format!("{text:?} is not a Helm version constraint"))
    }

    /// `<chart>-<version>.tgz`: the version starts at the first `-` a digit
    /// (or `v` and a digit) follows.
    fn artifact(&self, path: &str) -> Option<Artifact> {
        if !is_chart(path) {
            return None;
        }
        let file = package::file_name(path)?;
        let stem = file.strip_suffix(".tgz")?;
        let at = stem.match_indices('-').map(|(at, _)| at).find(|&at| {
            let rest = stem[at + 1..].trim_start_matches('v');
            rest.starts_with(|c: char| c.is_ascii_digit())
        })?;
        Some(Artifact {
            name: stem[..at].to_string(),
            version: stem[at + 1..].to_string(),
            file: file.clone(),
        })
    }

    /// The index, which lists every chart.
    fn document(&self, path: &str) -> Option<String> {
        is_index(path).then(|| path.to_string())
    }

    /// Each version's `created`, by `<chart> <version>`.
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        index::records(body)
            .into_iter()
            .filter_map(|r| {
                let at = parse_time(r.created.as_deref()?)?;
                Some((time_key(&r.chart, &r.version), at))
            })
            .collect()
    }

    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        Some(TimeSource {
            document: INDEX.to_string(),
            suffix: "",
            key: TimeKey::Listed(time_key(&artifact.name, &artifact.version)),
        })
    }

    /// The refused versions' records go, of every chart the index lists
    /// (dated by their own `created`); the index itself is never refused.
    fn filter(
        &self,
        judge: &Judge,
        _name: &str,
        body: &[u8],
        _times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        let filtered = index::without(body, |record| {
            let created = record.created.as_deref().and_then(parse_time);
            judge
                .refusal(&record.chart, &record.version, created)
                .is_some()
        });
        match filtered {
            Some(body) => Filtered::Changed(body),
            None => Filtered::Unchanged,
        }
    }

    /// Helm prints a failed download's status line (`failed to fetch … :
    /// 403 …`), not its body.
    fn reason_in_status_line(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
