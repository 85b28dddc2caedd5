//! composer: a Composer repository in Packagist's p2 layout
//! (`packages.json`, `p2/<vendor>/<pkg>.json`, `p2/<vendor>/<pkg>~dev.json`),
//! dist archives on other hosts served by the `files` mirrors (`~files/`,
//! immutable). Documents are read as JSON: a minified `composer/2.0` p2 file
//! is expanded (each version inherits the previous one's keys, `__unset`
//! removes one) and each `dist.url` on the remote's hosts re-pointed at the
//! proxy; `packages.json`'s root-relative templates (`"metadata-url":
//! "/p2/%package%.json"`), which Composer resolves against the host root,
//! are put under the remote's prefix. `dist.shasum` (sha1) is the archive's
//! declared digest when not empty; when empty (GitHub zipballs) the archive
//! is pinned on first use. `notify-batch` is dropped (Composer sends no
//! download notifications through a cache); the advisories API
//! (`api/security-advisories/`) is passed through, `security-advisories`'
//! `api-url` re-pointed at it (`advisories_through_proxy`). Packages are
//! `vendor/name` (lower case), rules in Composer constraint syntax (`^1.2`,
//! `~1.2`, `>=1.0 <2.0`, `1.0.*`, `||`; `composer/constraint.rs`), publish
//! times each version's `time` in the p2 document itself; a filtered p2
//! document is served expanded, without the refused versions. An archive's
//! path names only its reference, so a direct request for a refused
//! version's archive is not refused (Composer finds no such version in the
//! filtered p2 document; a `composer.lock` naming it still fetches it).

mod constraint;

use std::collections::HashMap;

use axum::http::HeaderMap;
use serde_json::{Map, Value};

use super::declared::{canonical, Algo, Declared, Document};
use super::guard::{parse_time, Filtered, Judge, VersionSpec};
use super::package::Artifact;
use super::rewrite::Rewrite;
use super::{Digests, Ecosystem, Packages, PassThrough, Plan, Rewritten, FILES_PREFIX};

pub struct Composer;

/// `p2/<vendor>/<pkg>.json` (or `~dev.json`).
fn is_p2(path: &str) -> bool {
    path.strip_prefix("p2/")
        .and_then(|rest| rest.strip_suffix(".json"))
        .and_then(|name| name.split_once('/'))
        .is_some_and(|(vendor, pkg)| !vendor.is_empty() && !pkg.is_empty() && !pkg.contains('/'))
}

/// Every version of every package of a p2 document, expanded when it is
/// minified (`"minified": "composer/2.0"`); the document loses the marker.
fn expand(doc: &mut Value) {
    let minified = doc.get("minified").and_then(Value::as_str) == Some("composer/2.0");
    let Some(packages) = doc.get_mut("packages").and_then(Value::as_object_mut) else {
        return;
    };
    if minified {
        for versions in packages.values_mut() {
            let Some(list) = versions.as_array_mut() else {
                continue;
            };
            let mut current = Map::new();
            for release in list.iter_mut() {
                for (key, value) in release.as_object().into_iter().flatten() {
                    if value.as_str() == Some("__unset") {
                        current.remove(key);
                    } else {
                        current.insert(key.clone(), value.clone());
                    }
                }
                *release = Value::Object(current.clone());
            }
        }
    }
    if let Some(object) = doc.as_object_mut() {
        object.remove("minified");
    }
}

/// `packages.json`'s `security-advisories`, which `composer audit` reads:
/// an `api-url` on the remote's hosts (or root-relative) is re-pointed at
/// the proxy, whose `api/` is passed through to the mirrors; one on another
/// host is left out when `metadata` says the p2 files carry the advisories
/// (Composer then reads them there, through the cache), else put under the
/// remote's `api/` route too (asked of its mirrors), so Composer never
/// goes around the proxy.
fn advisories_through_proxy(advisories: &mut Map<String, Value>, rewrite: &Rewrite) {
    let Some(url) = advisories.get("api-url").and_then(Value::as_str) else {
        return;
    };
    let moved = match url.strip_prefix('/') {
        Some(rest) => Some(format!("{}/{rest}", rewrite.index_base())),
        None => Some(rewrite.apply(url)).filter(|moved| moved != url),
    };
    let in_metadata = advisories.get("metadata").and_then(Value::as_bool) == Some(true);
    let moved = match moved {
        Some(moved) => moved,
        None if in_metadata => {
            advisories.remove("api-url");
            return;
        }
        None => {
            // The remote's pass-through route, asked of its mirrors.
            let path = url::Url::parse(url)
                .ok()
                .map(|u| u.path().to_string())
                .filter(|p| p.starts_with("/api/"))
                .unwrap_or_else(|| "/api/security-advisories/".to_string());
            format!("{}{path}", rewrite.index_base())
        }
    };
    advisories.insert("api-url".into(), Value::String(moved));
}

/// Each version's `dist` object of an expanded p2 document.
fn dists(doc: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
    doc.get_mut("packages")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|p| p.values_mut())
        .filter_map(Value::as_array_mut)
        .flatten()
        .filter_map(|v| v.get_mut("dist").and_then(Value::as_object_mut))
}

impl Ecosystem for Composer {
    fn name(&self) -> &'static str {
        "composer"
    }

    /// `packages.json` and the `p2/` metadata rewritten; `composer
    /// audit`'s advisories API passed through (computed per request).
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            document: Rewritten::when(path == "packages.json" || is_p2(path)),
            pass_through: path
                .starts_with("api/")
                .then_some(PassThrough { post: true }),
            ..Plan::default()
        }
    }

    fn rewrite(&self, path: &str, text: &str, rewrite: &Rewrite) -> String {
        let Ok(mut doc) = serde_json::from_str::<Value>(text) else {
            return rewrite.apply(text);
        };
        if path == "packages.json" {
            let Some(object) = doc.as_object_mut() else {
                return rewrite.apply(text);
            };
            object.remove("notify-batch");
            if let Some(Value::Object(advisories)) = object.get_mut("security-advisories") {
                advisories_through_proxy(advisories, rewrite);
            }
            for value in object.values_mut() {
                if let Some(template) = value.as_str() {
                    let moved = match template.strip_prefix('/') {
                        Some(rest) => format!("{}/{rest}", rewrite.index_base()),
                        None => rewrite.apply(template),
                    };
                    *value = Value::String(moved);
                }
            }
        } else {
            expand(&mut doc);
            for dist in dists(&mut doc) {
                if let Some(url) = dist.get("url").and_then(Value::as_str) {
                    let moved = rewrite.apply(url);
                    dist.insert("url".into(), Value::String(moved));
                }
            }
        }
        serde_json::to_string(&doc).unwrap_or_else(|_| text.to_string())
    }

    fn default_files(&self) -> &'static [&'static str] {
        &["https://api.github.com", "https://codeload.github.com"]
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

impl Digests for Composer {
    fn artifact_key(&self, path: &str) -> Option<String> {
        path.starts_with(FILES_PREFIX).then(|| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        is_p2(path)
    }

    /// `dist.shasum` (sha1) where it is not empty, for the archive its
    /// `dist.url` names.
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
            return Vec::new();
        };
        expand(&mut doc);
        dists(&mut doc)
            .filter_map(|dist| {
                let sha1 = dist.get("shasum")?.as_str().filter(|s| !s.is_empty())?;
                let declared = Declared::from_hex(Algo::Sha1, sha1)?;
                Some((document.path_of(dist.get("url")?.as_str()?)?, declared))
            })
            .collect()
    }

    /// Archives nothing declares (Packagist's empty `shasum` for GitHub
    /// zipballs): the first download's sha256 is kept.
    fn pins_on_first_use(&self, path: &str) -> bool {
        path.starts_with(FILES_PREFIX)
    }
}

/// The releases of package `name` in an expanded p2 document.
fn releases<'a>(doc: &'a mut Value, name: &str) -> Option<&'a mut Vec<Value>> {
    let packages = doc.get_mut("packages")?.as_object_mut()?;
    let key = packages
        .keys()
        .find(|k| k.eq_ignore_ascii_case(name))?
        .clone();
    packages.get_mut(&key)?.as_array_mut()
}

fn version_of(release: &Value) -> Option<&str> {
    release.get("version")?.as_str()
}

impl Packages for Composer {
    fn osv_ecosystem(&self) -> Option<&'static str> {
        Some("Packagist")
    }

    /// Composer compares package names case-insensitively.
    fn normalise(&self, name: &str) -> String {
        name.to_ascii_lowercase()
    }

    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        constraint::Constraint::parse(text).map(VersionSpec::new)
    }

    /// An archive's path names its reference only, not its package.
    fn artifact(&self, _path: &str) -> Option<Artifact> {
        None
    }

    /// `p2/<vendor>/<pkg>.json` and its `~dev.json`: `vendor/pkg`.
    fn document(&self, path: &str) -> Option<String> {
        if !is_p2(path) {
            return None;
        }
        let name = path.strip_prefix("p2/")?.strip_suffix(".json")?;
        Some(name.strip_suffix("~dev").unwrap_or(name).to_string())
    }

    /// Each version's `time` (every package of the document, by version).
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
            return HashMap::new();
        };
        expand(&mut doc);
        let Some(packages) = doc.get("packages").and_then(Value::as_object) else {
            return HashMap::new();
        };
        packages
            .values()
            .filter_map(Value::as_array)
            .flatten()
            .filter_map(|release| {
                let at = release.get("time")?.as_str().and_then(parse_time)?;
                Some((version_of(release)?.to_string(), at))
            })
            .collect()
    }

    /// The refused versions go (dated by their own `time`); the document is
    /// served expanded. One with none left is the refusal.
    fn filter(
        &self,
        judge: &Judge,
        name: &str,
        body: &[u8],
        _times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
            return Filtered::Unchanged;
        };
        expand(&mut doc);
        let Some(list) = releases(&mut doc, name) else {
            return Filtered::Unchanged;
        };
        let before = list.len();
        let mut last = None;
        list.retain(|release| {
            let Some(version) = version_of(release) else {
                return true;
            };
            let time = release
                .get("time")
                .and_then(Value::as_str)
                .and_then(parse_time);
            match judge.refusal(name, version, time) {
                Some(reason) => {
                    last = Some(reason);
                    false
                }
                None => true,
            }
        });
        match last {
            None => Filtered::Unchanged,
            Some(reason) if list.is_empty() && before > 0 => Filtered::Refused(reason),
            Some(_) => match serde_json::to_vec(&doc) {
                Ok(out) => Filtered::Changed(out),
                Err(_) => Filtered::Unchanged,
            },
        }
    }

    /// Composer prints a failed download's status line, not its body.
    fn reason_in_status_line(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
