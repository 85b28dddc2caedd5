//! npm: a registry's packuments (`/{name}`, `/@scope%2F{name}`), full and
//! abbreviated (two variants by `Accept`), rewritten to point through the
//! proxy; tarballs (`/{name}/-/{name}-{version}.tgz`) immutable; the audit
//! and search endpoints passed through; `dist.integrity` (else `dist.shasum`)
//! as the declared digest; publish times from the full packument's `time`;
//! semver ranges in rules; packuments filtered of refused versions.

use std::collections::HashMap;

use axum::http::HeaderMap;
use percent_encoding::percent_decode_str;
use serde_json::Value;

use super::declared::{Algo, Declared, Document};
use super::guard::{parse_time, Filtered, Judge, VersionSet, VersionSpec};
use super::package::{self, Artifact};
use super::{
    Digests, Ecosystem, Packages, PassThrough, Plan, Respelling, Rewritten, TimeKey, TimeSource,
    TimesFrom, Variant, FILES_PREFIX,
};

pub struct Npm;

const FULL: Variant = Variant {
    suffix: "full",
    accept: "application/json",
};
const ABBREVIATED: Variant = Variant {
    suffix: "abbreviated",
    accept: "application/vnd.npm.install-v1+json",
};

/// npm's audit endpoints: POSTs of the client's dependency tree.
const AUDIT: [&str; 3] = [
    "-/npm/v1/security/advisories/bulk",
    "-/npm/v1/security/audits",
    "-/npm/v1/security/audits/quick",
];

impl Ecosystem for Npm {
    fn name(&self) -> &'static str {
        "npm"
    }

    /// Tarballs immutable; packuments rewritten, full or abbreviated by
    /// `Accept`; the audit and search endpoints passed through.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        let document = is_document(path);
        Plan {
            immutable: is_immutable(path),
            document: Rewritten::when(document),
            variants: if document { &[FULL, ABBREVIATED] } else { &[] },
            pass_through: pass_through(path),
            respelled: respelled(path),
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

/// A scoped packument asked for as `@scope/name` is the `@scope%2Fname`
/// clients send (and registries answer for both).
fn respelled(path: &str) -> Option<Respelling> {
    let (scope, name) = path.strip_prefix('@')?.split_once('/')?;
    (!scope.is_empty() && !name.is_empty() && !name.contains('/')).then_some(Respelling {
        at: 1 + scope.len(),
        len: 1,
        with: "%2F",
    })
}

fn is_immutable(path: &str) -> bool {
    path.contains("/-/") && path.ends_with(".tgz")
}

/// Packuments: `/{name}`, `/@scope%2f{name}`, `/@scope/{name}`; not
/// tarballs (`/-/`) nor registry endpoints (`-/…`).
fn is_document(path: &str) -> bool {
    !path.starts_with("-/") && !path.contains("/-/") && !path.starts_with(FILES_PREFIX)
}

fn pass_through(path: &str) -> Option<PassThrough> {
    if AUDIT.contains(&path) {
        Some(PassThrough { post: true })
    } else if path == "-/v1/search" {
        Some(PassThrough { post: false })
    } else {
        None
    }
}

impl Digests for Npm {
    fn artifact_key(&self, path: &str) -> Option<String> {
        (path.starts_with(FILES_PREFIX) || is_immutable(path))
            .then(|| super::declared::canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        is_document(path)
    }

    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        learn(body, document)
    }
}

impl Packages for Npm {
    fn osv_ecosystem(&self) -> Option<&'static str> {
        Some("npm")
    }

    fn compare_versions(&self, a: &str, b: &str) -> Option<std::cmp::Ordering> {
        nodejs_semver::Version::parse(a)
            .ok()?
            .partial_cmp(&nodejs_semver::Version::parse(b).ok()?)
    }

    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        nodejs_semver::Range::parse(text)
            .map(|range| VersionSpec::new(Range(range)))
            .map_err(|e| format!("{text:?} is not an npm version range: {e}"))
    }

    fn artifact(&self, path: &str) -> Option<Artifact> {
        tarball(path, package::file_name(path)?)
    }

    fn document(&self, path: &str) -> Option<String> {
        if path.starts_with("-/") || path.contains("/-/") || path.starts_with('~') {
            return None;
        }
        let name = percent_decode_str(path).decode_utf8().ok()?;
        let valid = match name.strip_prefix('@') {
            Some(scoped) => scoped.split('/').count() == 2,
            None => !name.contains('/'),
        };
        (valid && !name.is_empty()).then(|| name.into_owned())
    }

    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        let mut times = HashMap::new();
        if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) {
            if let Some(time) = doc.get("time").and_then(|t| t.as_object()) {
                for (version, at) in time {
                    if let Some(ms) = at.as_str().and_then(parse_time) {
                        times.insert(version.clone(), ms);
                    }
                }
            }
        }
        times
    }

    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        Some(TimeSource {
            document: packument_path(&artifact.name),
            suffix: FULL.suffix,
            key: TimeKey::Listed(artifact.version.clone()),
        })
    }

    /// The abbreviated packument has no `time`: the full one's.
    fn times_from(&self, _name: &str, suffix: &str) -> Option<TimesFrom> {
        (suffix == ABBREVIATED.suffix).then_some(TimesFrom::Variant(FULL.suffix))
    }

    fn filter(
        &self,
        judge: &Judge,
        name: &str,
        body: &[u8],
        times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        filter(judge, name, body, times)
    }
}

/// npm semver ranges (`>=1.4.1`, `^2 || 3.x`); prereleases included.
struct Range(nodejs_semver::Range);

impl VersionSet for Range {
    fn contains(&self, version: &str) -> bool {
        nodejs_semver::Version::parse(version)
            .is_ok_and(|v| self.0.satisfies_with_prerelease(&v, true))
    }
}

/// An npm package's packument path, as npm spells it (`@scope%2Fname`,
/// normalised as the proxy normalises request paths).
pub fn packument_path(name: &str) -> String {
    name.replacen('/', "%2F", 1)
}

/// `name/-/name-1.2.3.tgz`, `@scope/name/-/name-1.2.3.tgz` (or `@scope%2F…`).
fn tarball(path: &str, file: String) -> Option<Artifact> {
    let (package, tail) = path.split_once("/-/")?;
    if tail.contains('/') {
        return None;
    }
    let name = percent_decode_str(package).decode_utf8().ok()?.into_owned();
    let bare = name.rsplit('/').next()?;
    let version = file
        .strip_suffix(".tgz")?
        .strip_prefix(bare)?
        .strip_prefix('-')?
        .to_string();
    (!version.is_empty()).then_some(Artifact {
        version,
        name,
        file,
    })
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

fn learn(body: &[u8], document: &Document<'_>) -> Vec<(String, Declared)> {
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
            Some((document.path_of(dist.tarball.as_deref()?)?, declared))
        })
        .collect()
}

/// Packuments (full and abbreviated): `versions` and `time` entries of
/// refused versions go, `dist-tags` move down to the newest version left. A
/// version the quarantine refuses stays, marked `deprecated` with the
/// reason: npm passes over deprecated versions while another satisfies the
/// range (`npm-pick-manifest`), so only an exact pin picks it, prints the
/// reason as a deprecation warning and gets its tarball's 403.
fn filter(judge: &Judge, name: &str, body: &[u8], times: &HashMap<String, i64>) -> Filtered {
    let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
        return Filtered::Unchanged;
    };
    let own_times = doc.get("time").cloned().unwrap_or(Value::Null);
    let Some(versions) = doc.get_mut("versions").and_then(Value::as_object_mut) else {
        return Filtered::Unchanged;
    };
    // (version, reason, quarantined)
    let mut refused: Vec<(String, String, bool)> = Vec::new();
    for version in versions.keys() {
        let published = own_times[version.as_str()]
            .as_str()
            .and_then(parse_time)
            .or_else(|| times.get(version).copied());
        if let Some((reason, advisory)) = judge.verdict(name, version, published) {
            refused.push((version.clone(), reason, advisory.is_some()));
        }
    }
    if refused.is_empty() {
        return Filtered::Unchanged;
    }
    if refused.len() == versions.len() {
        let latest = doc["dist-tags"]["latest"].as_str().unwrap_or_default();
        let reason = refused
            .iter()
            .find(|(v, _, _)| v == latest)
            .unwrap_or(&refused[0]);
        return Filtered::Refused(reason.1.clone());
    }
    for (version, reason, quarantined) in &refused {
        match versions.get_mut(version).and_then(Value::as_object_mut) {
            Some(manifest) if *quarantined => {
                manifest.insert("deprecated".to_string(), Value::String(reason.clone()));
            }
            _ => {
                versions.remove(version);
            }
        }
    }
    let left: Vec<nodejs_semver::Version> = versions
        .keys()
        .filter(|v| !refused.iter().any(|(r, _, _)| r == *v))
        .filter_map(|v| nodejs_semver::Version::parse(v).ok())
        .collect();
    if let Some(time) = doc.get_mut("time").and_then(Value::as_object_mut) {
        for (version, _, quarantined) in &refused {
            if !quarantined {
                time.remove(version);
            }
        }
    }
    if let Some(tags) = doc.get_mut("dist-tags").and_then(Value::as_object_mut) {
        let mut moved = serde_json::Map::new();
        for (tag, version) in tags.iter() {
            let Some(named) = version.as_str() else {
                continue;
            };
            if !refused.iter().any(|(v, _, _)| v == named) {
                moved.insert(tag.clone(), version.clone());
                continue;
            }
            // Down to the newest version left below the one it named
            // (never up): `latest` 1.1.0 refused → 1.0.0.
            let Ok(named) = nodejs_semver::Version::parse(named) else {
                continue;
            };
            let below = left.iter().filter(|v| **v < named);
            let stable = below.clone().filter(|v| !v.is_prerelease()).max();
            if let Some(v) = stable.or_else(|| below.max()) {
                moved.insert(tag.clone(), Value::String(v.to_string()));
            }
        }
        *tags = moved;
    }
    Filtered::Changed(serde_json::to_vec(&doc).unwrap_or_else(|_| body.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::conformance::{
        changed_json, check_rules, guard, iso, Class, Declares, Expect, Filters, Rewritten, Rows,
        DAY, NOW,
    };
    use serde_json::json;

    pub(super) fn rows() -> Rows {
        let sri = format!(
            "sha512-{}",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [9u8; 64])
        );
        let packument = json!({"versions": {
            "1.0.0": {"dist": {"tarball": "https://registry.npmjs.org/a/-/a-1.0.0.tgz", "integrity": sri, "shasum": "00"}},
            "0.9.0": {"dist": {"tarball": "https://registry.npmjs.org/a/-/a-0.9.0.tgz", "shasum": "0101010101010101010101010101010101010101"}},
        }});
        Rows {
            paths: vec![
                ("left-pad", Class::Document),
                ("@scope%2fname", Class::Document),
                ("@scope/name", Class::Document),
                ("@scope/name/-/name-1.0.0.tgz", Class::Immutable),
                (
                    "-/npm/v1/security/advisories/bulk",
                    Class::Pass { post: true },
                ),
                ("-/npm/v1/security/audits", Class::Pass { post: true }),
                ("-/npm/v1/security/audits/quick", Class::Pass { post: true }),
                ("-/v1/search", Class::Pass { post: false }),
                ("-/v1/search/more", Class::Mutable),
                ("-/npm/v1/security/audits/quick/x", Class::Mutable),
            ],
            variants: vec![
                ("left-pad", "application/json", Some("full")),
                (
                    "left-pad",
                    "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8",
                    Some("abbreviated"),
                ),
                ("left-pad/-/left-pad-1.0.0.tgz", "", None),
            ],
            artifacts: vec![
                ("left-pad/-/left-pad-1.3.0.tgz", Some(("left-pad", "1.3.0"))),
                (
                    "@mc/c/-/c-1.0.0-beta.1.tgz",
                    Some(("@mc/c", "1.0.0-beta.1")),
                ),
                ("@mc%2Fc/-/c-2.0.0.tgz", Some(("@mc/c", "2.0.0"))),
                ("left-pad/-/other-1.0.0.tgz", None),
                ("left-pad", None),
            ],
            documents: vec![
                ("left-pad", Some("left-pad")),
                ("@mc%2Fc", Some("@mc/c")),
                ("@mc/c", Some("@mc/c")),
                ("-/v1/search", None),
                ("left-pad/-/left-pad-1.0.0.tgz", None),
            ],
            keys: vec![
                ("a/-/a-1.0.0.tgz", Some("a/-/a-1.0.0.tgz")),
                ("@scope%2fname/-/x.tgz", Some("@scope%2fname/-/x.tgz")),
                ("a", None),
            ],
            declares: vec![Declares {
                mirrors: &["https://registry.npmjs.org"],
                files: &[],
                path: "a",
                body: packument.to_string().into_bytes(),
                declared: vec![
                    (
                        "a/-/a-1.0.0.tgz".into(),
                        format!("sha512:{}", hex::encode([9u8; 64])),
                    ),
                    (
                        "a/-/a-0.9.0.tgz".into(),
                        format!("sha1:{}", "01".repeat(20)),
                    ),
                ],
            }],
            rewrites: vec![Rewritten {
                mirrors: &["https://registry.npmjs.org"],
                files: &[],
                path: "a",
                body: r#"{"tarball":"https://registry.npmjs.org/a/-/a-1.0.0.tgz","home":"https://example.com/a"}"#,
                expected: r#"{"tarball":"http://proxy/r/a/-/a-1.0.0.tgz","home":"https://example.com/a"}"#,
            }],
            filters: vec![Filters {
                deny: &["a@1.0.0"],
                name: "a",
                suffix: "full",
                body: br#"{"dist-tags":{"latest":"1.0.0"},"versions":{"0.9.0":{},"1.0.0":{}}}"#
                    .to_vec(),
                expected: Expect::Changed("0.9.0", "1.0.0"),
            }],
        }
    }

    #[test]
    fn a_scoped_packument_is_keyed_as_clients_spell_it() {
        let respelled = |path| {
            let plan = Npm.plan(path, &HeaderMap::new());
            plan.respelled.map(|r| r.apply(path))
        };
        assert_eq!(respelled("@scope/name").as_deref(), Some("@scope%2Fname"));
        assert_eq!(respelled("@scope%2Fname"), None);
        assert_eq!(respelled("@scope/name/-/name-1.0.0.tgz"), None);
        assert_eq!(respelled("@/name"), None);
    }

    #[test]
    fn npm_young_versions_leave_versions_time_and_dist_tags() {
        let g = guard("npm", Some(7), &[]);
        let judge = Judge::new(&g, &Npm, NOW);
        let full = json!({
            "name": "p",
            "dist-tags": {"latest": "1.1.0", "next": "2.0.0-rc.1", "old": "1.0.0"},
            "versions": {"1.0.0": {}, "1.1.0": {}, "2.0.0-rc.1": {}},
            "time": {"created": iso(NOW - 90 * DAY), "1.0.0": iso(NOW - 60 * DAY),
                     "1.1.0": iso(NOW - DAY), "2.0.0-rc.1": iso(NOW - DAY)},
        });
        let body = serde_json::to_vec(&full).unwrap();
        let doc = changed_json(Npm.filter(&judge, "p", &body, &HashMap::new(), "full"));
        assert_eq!(doc["versions"], json!({"1.0.0": {}}));
        assert_eq!(
            doc["dist-tags"],
            json!({"latest": "1.0.0", "next": "1.0.0", "old": "1.0.0"})
        );
        assert!(doc["time"].get("1.1.0").is_none() && doc["time"].get("created").is_some());

        // The abbreviated form has no `time`: the full one's are passed in.
        let abbreviated = json!({"name": "p", "dist-tags": {"latest": "1.1.0"},
                                 "versions": {"1.0.0": {}, "1.1.0": {}}});
        let body = serde_json::to_vec(&abbreviated).unwrap();
        let times = Npm.publish_times(&serde_json::to_vec(&full).unwrap());
        let doc = changed_json(Npm.filter(&judge, "p", &body, &times, "full"));
        assert_eq!(doc["versions"], json!({"1.0.0": {}}));
        assert_eq!(doc["dist-tags"]["latest"], "1.0.0");
        // Without times nothing is refused; with nothing left, the refusal.
        assert_eq!(
            Npm.filter(&judge, "p", &body, &HashMap::new(), "full"),
            Filtered::Unchanged
        );
        let g = guard("npm", None, &["p"]);
        let judge = Judge::new(&g, &Npm, NOW);
        match Npm.filter(&judge, "p", &body, &HashMap::new(), "full") {
            Filtered::Refused(reason) => {
                assert!(reason.starts_with("p@1.1.0 is refused"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn publish_times_come_from_the_full_packuments_time() {
        let npm = br#"{"time": {"created": "2020-01-01T00:00:00.000Z", "1.0.0": "2020-01-02T00:00:00.000Z"}}"#;
        let times = Npm.publish_times(npm);
        assert_eq!(times["1.0.0"] - times["created"], DAY);
        assert_eq!(packument_path("@mc/c"), "@mc%2Fc");
    }

    #[test]
    fn rules_read_npm_ranges() {
        check_rules(
            &Npm,
            &[
                ("event-stream@3.3.6", "event-stream", "3.3.6", true),
                ("event-stream@3.3.6", "event-stream", "3.3.5", false),
                ("flatmap-stream", "flatmap-stream", "0.1.1", true),
                ("colors@>=1.4.1", "colors", "1.4.2", true),
                ("colors@>=1.4.1", "colors", "1.5.0-beta.1", true),
                ("colors@>=1.4.1", "colors", "1.4.0", false),
                ("@evil/*", "@evil/pkg", "1.0.0", true),
                ("@evil/*@^2", "@evil/pkg", "2.1.0", true),
                ("@evil/*@^2", "@evil/pkg", "3.0.0", false),
            ],
            ("colors@>=>1", "npm version range"),
        );
    }
}
