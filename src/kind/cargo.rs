//! cargo: a sparse registry's index files (`3/s/syn`, `se/rd/serde`) and
//! `config.json` (rewritten to point through the proxy: `dl` at `~files/`,
//! static.crates.io by default); crates (`…/download`, `….crate`)
//! immutable; the web API (`api/v1/crates…`: search, info) passed through;
//! each index line's `cksum` as the declared digest, by crate and version;
//! `pubtime` as the publish time; cargo requirements in rules; index files
//! filtered of refused lines.

use std::collections::HashMap;

use axum::http::HeaderMap;
use serde_json::Value;

use super::declared::{Algo, Declared, Document};
use super::guard::{parse_time, Filtered, Judge, VersionSet, VersionSpec};
use super::package::{self, Artifact};
use super::{
    CachedAt, Digests, Ecosystem, Packages, PassThrough, Plan, Rewritten, TimeKey, TimeSource,
    FILES_PREFIX,
};

pub struct Cargo;

impl Ecosystem for Cargo {
    fn name(&self) -> &'static str {
        "cargo"
    }

    /// Crates immutable, `config.json` rewritten, the web API passed
    /// through.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: is_immutable(path),
            document: Rewritten::when(path == "config.json"),
            pass_through: pass_through(path),
            ..Plan::default()
        }
    }

    fn default_files(&self) -> &'static [&'static str] {
        &["https://static.crates.io/crates"]
    }

    /// `"auth-required": true` in `config.json`, so that cargo sends its
    /// token with every request, crate downloads included.
    fn mark_private(&self, path: &str, body: Vec<u8>) -> Vec<u8> {
        if path != "config.json" {
            return body;
        }
        match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(mut fields)) => {
                fields.insert("auth-required".to_string(), Value::Bool(true));
                serde_json::to_vec(&fields).unwrap_or(body)
            }
            _ => body,
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

fn is_immutable(path: &str) -> bool {
    path.ends_with(".crate") || path.ends_with("/download")
}

/// The web API (`cargo search`, `cargo info`), read-only, except crate
/// downloads, which are artifacts.
fn pass_through(path: &str) -> Option<PassThrough> {
    (is_api(path) && !path.ends_with("/download")).then_some(PassThrough { post: false })
}

impl Digests for Cargo {
    /// `crate/version`: the index declares by name and version, and the
    /// download URL is shaped by the registry's `dl` template.
    fn artifact_key(&self, path: &str) -> Option<String> {
        key_of_download(path)
    }

    /// Index files: not crates, `config.json` or the web API.
    fn declares(&self, path: &str) -> bool {
        !(path.starts_with(FILES_PREFIX) || is_immutable(path))
            && path != "config.json"
            && pass_through(path).is_none()
    }

    fn learn(&self, _document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        learn(body)
    }

    /// Any download path that spells the crate (one query per crate; the
    /// versions are told apart by their keys).
    fn cached_at(&self, artifact: &str) -> CachedAt {
        let name = artifact.split_once('/').map_or(artifact, |(name, _)| name);
        CachedAt::Like {
            group: name.to_string(),
            patterns: vec![format!("%/{name}/%/download"), format!("%{name}-%.crate")],
        }
    }
}

impl Packages for Cargo {
    fn osv_ecosystem(&self) -> Option<&'static str> {
        Some("crates.io")
    }

    fn compare_versions(&self, a: &str, b: &str) -> Option<std::cmp::Ordering> {
        Some(
            semver::Version::parse(a)
                .ok()?
                .cmp(&semver::Version::parse(b).ok()?),
        )
    }

    /// Lower case, `-` and `_` alike (as crates.io compares them).
    fn normalise(&self, name: &str) -> String {
        name.to_ascii_lowercase().replace('_', "-")
    }

    /// Cargo requirements (`>=0.3, <0.4`; a bare `1.2.3` is `=1.2.3`).
    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        let text = if semver::Version::parse(text).is_ok() {
            format!("={text}")
        } else {
            text.to_string()
        };
        semver::VersionReq::parse(&text)
            .map(|req| VersionSpec::new(Requirement(req)))
            .map_err(|e| format!("{text:?} is not a cargo version requirement: {e}"))
    }

    fn artifact(&self, path: &str) -> Option<Artifact> {
        crate_file(path, package::file_name(path)?)
    }

    fn document(&self, path: &str) -> Option<String> {
        let name = path.rsplit('/').next()?;
        (!name.is_empty() && index_path(name) == path.to_ascii_lowercase())
            .then(|| name.to_string())
    }

    /// `pubtime`, by version.
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        let mut times = HashMap::new();
        for line in body.split(|&b| b == b'\n') {
            let Ok(entry) = serde_json::from_slice::<serde_json::Value>(line) else {
                continue;
            };
            let at = entry["pubtime"].as_str().and_then(parse_time);
            if let (Some(version), Some(ms)) = (entry["vers"].as_str(), at) {
                times.insert(version.to_string(), ms);
            }
        }
        times
    }

    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        Some(TimeSource {
            document: index_path(&artifact.name),
            suffix: "",
            key: TimeKey::Listed(artifact.version.clone()),
        })
    }

    /// The refused lines go; an index file with none left is the refusal.
    fn filter(
        &self,
        judge: &Judge,
        _name: &str,
        body: &[u8],
        _times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        filter(judge, body)
    }
}

struct Requirement(semver::VersionReq);

impl VersionSet for Requirement {
    fn contains(&self, version: &str) -> bool {
        semver::Version::parse(version).is_ok_and(|v| {
            // `matches` leaves prereleases out unless the requirement
            // names one; a deny rule means the range as numbers.
            self.0.matches(&v) || {
                let mut release = v.clone();
                release.pre = semver::Prerelease::EMPTY;
                self.0.matches(&release) && !v.pre.is_empty()
            }
        })
    }
}

/// Whether `path` is under a cargo registry's web API, `api/v1/crates`,
/// which a registry may serve below a prefix of its own (`config.json`'s
/// `api`, e.g. `artifactory/api/cargo/{repo}`).
fn is_api(path: &str) -> bool {
    const API: &str = "api/v1/crates";
    path.match_indices(API).any(|(at, _)| {
        (at == 0 || path[..at].ends_with('/'))
            && matches!(path[at + API.len()..].chars().next(), None | Some('/'))
    })
}

/// A crate's sparse index file: `1/a`, `2/ab`, `3/a/abc`, `se/rd/serde`.
pub fn index_path(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    match lower.len() {
        1 => format!("1/{lower}"),
        2 => format!("2/{lower}"),
        3 => format!("3/{}/{lower}", &lower[..1]),
        _ => format!("{}/{}/{lower}", &lower[..2], &lower[2..4]),
    }
}

/// `{crate}/{version}/download` (crates.io's `dl`, the web API) and
/// `{crate}-{version}.crate` (static.crates.io's layout).
fn crate_file(path: &str, file: String) -> Option<Artifact> {
    if file == "download" {
        let mut segments = path.rsplit('/').skip(1);
        let (version, name) = (segments.next()?, segments.next()?);
        return semver::Version::parse(version).is_ok().then(|| Artifact {
            name: name.to_string(),
            version: version.to_string(),
            file: file.clone(),
        });
    }
    let stem = file.strip_suffix(".crate")?;
    let at = stem
        .match_indices('-')
        .map(|(at, _)| at)
        .find(|&at| semver::Version::parse(&stem[at + 1..]).is_ok())?;
    Some(Artifact {
        name: stem[..at].to_string(),
        version: stem[at + 1..].to_string(),
        file: file.clone(),
    })
}

fn key(name: &str, version: &str) -> String {
    format!("{}/{}", name.to_ascii_lowercase(), version)
}

/// `…/{crate}/{version}/download`, or `…/{crate}-{version}.crate`.
fn key_of_download(path: &str) -> Option<String> {
    let mut segments = path.rsplit('/');
    let last = segments.next()?;
    if last == "download" {
        let version = segments.next()?;
        let name = segments.next()?;
        return Some(key(name, version));
    }
    let stem = last.strip_suffix(".crate")?;
    // Names may hold `-` and digits (`md-5`): the version starts after the
    // first `-` whose rest begins `major.minor.patch`.
    let at = stem
        .match_indices('-')
        .map(|(i, _)| i)
        .find(|&i| starts_with_semver(&stem[i + 1..]))?;
    Some(key(&stem[..at], &stem[at + 1..]))
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

fn learn(body: &[u8]) -> Vec<(String, Declared)> {
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
            Some((key(line.name, line.vers), declared))
        })
        .collect()
}

/// Index files: the lines of refused versions go. A version the
/// quarantine refuses keeps its line with one more dependency, on
/// [`quarantine_marker`]: a name no registry can hold, so cargo's resolver
/// passes over the version for a range (it backtracks from a dependency it
/// cannot find) and, for an exact `=` pin, fails naming the advisory.
fn filter(judge: &Judge, body: &[u8]) -> Filtered {
    let mut out = Vec::with_capacity(body.len());
    let (mut kept, mut last_reason) = (0, None);
    for line in body.split_inclusive(|&b| b == b'\n') {
        let mut entry = serde_json::from_slice::<Value>(line.trim_ascii()).ok();
        let verdict = entry.as_ref().and_then(|e| {
            let (name, version) = (e["name"].as_str()?, e["vers"].as_str()?);
            let published = e["pubtime"].as_str().and_then(parse_time);
            judge.verdict(name, version, published)
        });
        match (verdict, entry.as_mut()) {
            (Some((reason, Some(advisory))), Some(entry)) => {
                last_reason = Some(reason);
                if let Some(deps) = entry.get_mut("deps").and_then(Value::as_array_mut) {
                    deps.push(serde_json::json!({
                        "name": quarantine_marker(&advisory.id), "req": "*", "features": [],
                        "optional": false, "default_features": true, "target": null,
                        "kind": "normal"
                    }));
                    out.extend_from_slice(&serde_json::to_vec(entry).unwrap_or_default());
                    out.push(b'\n');
                }
            }
            (Some((reason, _)), _) => last_reason = Some(reason),
            (None, _) => {
                if !line.trim_ascii().is_empty() {
                    kept += 1;
                }
                out.extend_from_slice(line);
            }
        }
    }
    match last_reason {
        None => Filtered::Unchanged,
        Some(reason) if kept == 0 => Filtered::Refused(reason),
        Some(_) => Filtered::Changed(out),
    }
}

/// The dependency a quarantined version's index line gains:
/// `quarantined.<advisory id>`. Cargo package names hold only letters,
/// digits, `-` and `_`, so no registry serves one with a dot, and cargo
/// prints it: "no matching package named `quarantined.MAL-2025-1` found,
/// required by package `x v1.0.1`".
pub fn quarantine_marker(id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("quarantined.{id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::conformance::{
        check_rules, guard, iso, Class, Declares, Expect, Filters, Rewritten, Rows, DAY, NOW,
    };
    use serde_json::json;

    const A: &str = "aa00000000000000000000000000000000000000000000000000000000000000";
    const B: &str = "bb00000000000000000000000000000000000000000000000000000000000000";

    pub(super) fn rows() -> Rows {
        let index = format!(
            "{{\"name\":\"Serde_Json\",\"vers\":\"1.0.1\",\"cksum\":\"{A}\"}}\nnot json\n{{\"name\":\"x\",\"vers\":\"2.0.0\",\"cksum\":\"{B}\"}}\n"
        );
        let line =
            |v: &str| format!("{{\"name\":\"mc_leaf\",\"vers\":\"{v}\",\"cksum\":\"00\"}}\n");
        Rows {
            paths: vec![
                ("config.json", Class::Document),
                ("3/s/syn", Class::Mutable),
                ("~files/syn/2.0.0/download", Class::Immutable),
                ("api/v1/crates/syn/2.0.0/download", Class::Immutable),
                ("api/v1/crates", Class::Pass { post: false }),
                ("api/v1/crates/serde", Class::Pass { post: false }),
                ("api/v1/crates/serde/1.0.0/download", Class::Immutable),
                ("api/v1/crates-and-more", Class::Mutable),
                (
                    "artifactory/api/cargo/crates-io/api/v1/crates",
                    Class::Pass { post: false },
                ),
                (
                    "artifactory/api/cargo/crates-io/v1/crates/itoa/1.0.19/download",
                    Class::Immutable,
                ),
                ("myapi/v1/crates", Class::Mutable),
            ],
            variants: vec![("config.json", "", None)],
            artifacts: vec![
                ("~files/mc_leaf/0.1.0/download", Some(("mc_leaf", "0.1.0"))),
                (
                    "api/v1/crates/serde/1.0.0-rc.1/download",
                    Some(("serde", "1.0.0-rc.1")),
                ),
                (
                    "~files/crates/foo-2d/foo-2d-1.0.0-alpha.crate",
                    Some(("foo-2d", "1.0.0-alpha")),
                ),
                ("se/rd/serde", None),
            ],
            documents: vec![
                ("mc/_l/mc_leaf", Some("mc_leaf")),
                ("3/s/syn", Some("syn")),
                ("1/a", Some("a")),
                ("config.json", None),
                ("ab/cd/serde", None),
            ],
            keys: vec![
                ("~files/Serde_Json/1.0.1/download", Some("serde_json/1.0.1")),
                ("api/v1/crates/x/2.0.0/download", Some("x/2.0.0")),
                (
                    "~files/se/rd/serde-json2-1.0.0-rc.1.crate",
                    Some("serde-json2/1.0.0-rc.1"),
                ),
                ("~files/md-5/md-5-0.10.6.crate", Some("md-5/0.10.6")),
                ("se/rd/serde_json", None),
            ],
            declares: vec![Declares {
                mirrors: &["https://index.crates.io"],
                files: &[],
                path: "se/rd/serde_json",
                body: index.into_bytes(),
                declared: vec![
                    ("serde_json/1.0.1".into(), format!("sha256:{A}")),
                    ("x/2.0.0".into(), format!("sha256:{B}")),
                ],
            }],
            rewrites: vec![Rewritten {
                mirrors: &["https://crates.io"],
                files: &["https://static.crates.io/crates"],
                path: "config.json",
                body: r#"{"dl":"https://static.crates.io/crates","api":"https://crates.io"}"#,
                expected: r#"{"dl":"http://proxy/r/~files","api":"http://proxy/r"}"#,
            }],
            filters: vec![Filters {
                deny: &["mc_leaf@0.2.0"],
                name: "mc_leaf",
                suffix: "",
                body: [line("0.1.0"), line("0.2.0")].concat().into_bytes(),
                expected: Expect::Changed("0.1.0", "0.2.0"),
            }],
        }
    }

    #[test]
    fn cargo_index_lines_go_and_an_empty_index_is_refused() {
        let g = guard("cargo", Some(7), &["mc_leaf@>=0.3"]);
        let judge = Judge::new(&g, &Cargo, NOW);
        let line = |v: &str, at: Option<i64>| {
            let mut l = json!({"name": "mc_leaf", "vers": v, "deps": [], "cksum": "00"});
            if let Some(at) = at {
                l["pubtime"] = json!(iso(at).replace(".000Z", "Z"));
            }
            format!("{l}\n")
        };
        let body = [
            line("0.1.0", None),
            line("0.2.0", Some(NOW - DAY)),
            line("0.3.0", Some(NOW - 99 * DAY)),
        ]
        .concat();
        let Filtered::Changed(out) =
            Cargo.filter(&judge, "mc_leaf", body.as_bytes(), &HashMap::new(), "")
        else {
            panic!()
        };
        assert_eq!(String::from_utf8(out).unwrap(), line("0.1.0", None));
        let body = line("0.3.0", None);
        assert!(matches!(
            Cargo.filter(&judge, "mc_leaf", body.as_bytes(), &HashMap::new(), ""),
            Filtered::Refused(_)
        ));
    }

    #[test]
    fn index_files_declare_and_crates_do_not() {
        assert!(Cargo.declares("se/rd/serde_json"));
        assert!(!Cargo.declares("config.json"));
        assert!(!Cargo.declares("~files/serde/1.0.0/download"));
        assert_eq!(index_path("Serde"), "se/rd/serde");
        assert_eq!(
            Cargo.cached_at("leaf_x/1.0.0"),
            CachedAt::Like {
                group: "leaf_x".into(),
                patterns: vec!["%/leaf_x/%/download".into(), "%leaf_x-%.crate".into()],
            }
        );
    }

    #[test]
    fn publish_times_come_from_pubtime() {
        let cargo = b"{\"name\":\"a\",\"vers\":\"0.1.0\",\"pubtime\":\"2020-01-02T00:00:00+00:00\"}\n{\"name\":\"a\",\"vers\":\"0.2.0\"}\n";
        let times = Cargo.publish_times(cargo);
        assert_eq!(times.len(), 1);
        assert_eq!(times["0.1.0"], parse_time("2020-01-02T00:00:00Z").unwrap());
    }

    #[test]
    fn rules_read_cargo_requirements() {
        check_rules(
            &Cargo,
            &[
                ("serde@1.0.0", "serde", "1.0.1", false),
                ("serde@^1.0.0", "serde", "1.0.1", true),
                ("rustdecimal", "rustdecimal", "1.23.0", true),
                ("mc_leaf@>=0.1, <0.2", "mc-leaf", "0.1.5", true),
                ("mc_leaf@>=0.1, <0.2", "mc-leaf", "0.2.0-rc.1", false),
            ],
            ("serde@~>1", "cargo version requirement"),
        );
    }
}
