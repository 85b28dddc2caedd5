//! galaxy: an Ansible Galaxy server's v3 API as galaxy_ng and pulp_ansible
//! serve it and `ansible-galaxy collection install` reads it
//! (`ansible/galaxy/api.py`): the API root (`api/`, `available_versions`),
//! a collection (`…/collections/{namespace}/{name}/`), its `versions/`
//! pages (`?limit=…&offset=…`, the query part of the key) and one
//! version's detail (`…/versions/{version}/`: `download_url`,
//! `artifact.sha256`, `metadata.dependencies`, `created_at`), below
//! `v3/collections/` or galaxy_ng's `v3/plugin/ansible/content/{base}/
//! collections/index/`. Every API answer is a JSON document: an absolute
//! link on the remote's hosts (`download_url` on a `files` host) is
//! re-pointed at the proxy, a root-relative one (`links.next`, `href`)
//! put below the remote, root-relative still (the client puts `next` in
//! place of its own path). The collection tarball
//! (`{namespace}-{name}-{version}.tar.gz`) is immutable and checked against
//! the `artifact.sha256` its version's detail declares. The roles' v1 API
//! (`api/v1/…`) is passed through.
//!
//! Packages are `namespace.name`; `deny`/`allow` take Galaxy's version
//! specifiers (`galaxy/specifier.rs`); the cooldown dates a version by its
//! `created_at`: a refused version leaves the `versions/` pages, its
//! detail is a 403, and so is its tarball.

mod specifier;

use std::collections::HashMap;

use axum::http::HeaderMap;
use serde_json::Value;

use super::declared::{canonical, Algo, Declared, Document};
use super::guard::{parse_time, Filtered, Judge, Standing, VersionSpec};
use super::package::{file_name, Artifact};
use super::rewrite::Rewrite;
use super::{
    Digests, Ecosystem, Packages, PassThrough, Plan, Respelling, Rewritten, TimeKey, TimeSource,
};

pub struct Galaxy;

/// What a path below a galaxy remote names (its query aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GalaxyPath<'a> {
    /// `{namespace}-{name}-{version}.tar.gz`, wherever it is served.
    Tarball {
        namespace: &'a str,
        name: &'a str,
        version: &'a str,
    },
    /// The roles' v1 API.
    V1,
    /// `…/{namespace}/{name}/`.
    Collection { namespace: &'a str, name: &'a str },
    /// `…/{namespace}/{name}/versions/`.
    Versions { namespace: &'a str, name: &'a str },
    /// `…/{namespace}/{name}/versions/{version}/`.
    Version {
        namespace: &'a str,
        name: &'a str,
        version: &'a str,
    },
    /// Any other API document (the root, the collection index, namespaces).
    Api,
}

/// Where the collections of the v3 API are listed: pulp_ansible's (and
/// what `ansible-galaxy` builds from `available_versions`) and galaxy_ng's.
const COLLECTION_ROOTS: [&str; 2] = ["/collections/index/", "v3/collections/"];

/// A namespace or collection name: lower-case letters, digits and `_`.
fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn classify(path: &str) -> GalaxyPath<'_> {
    let path = path.split('?').next().unwrap_or(path);
    let file = path.rsplit('/').next().unwrap_or(path);
    if let Some(stem) = file.strip_suffix(".tar.gz") {
        let mut parts = stem.splitn(3, '-');
        if let (Some(namespace), Some(name), Some(version)) =
            (parts.next(), parts.next(), parts.next())
        {
            if is_name(namespace) && is_name(name) && !version.is_empty() {
                return GalaxyPath::Tarball {
                    namespace,
                    name,
                    version,
                };
            }
        }
    }
    if path.starts_with("api/v1/") || path.starts_with("v1/") {
        return GalaxyPath::V1;
    }
    let below = COLLECTION_ROOTS.iter().find_map(|root| {
        let at = path.find(root)?;
        Some(&path[at + root.len()..])
    });
    let Some(below) = below else {
        return GalaxyPath::Api;
    };
    let parts: Vec<&str> = below.trim_end_matches('/').split('/').collect();
    match parts[..] {
        [namespace, name] if is_name(namespace) && is_name(name) => {
            GalaxyPath::Collection { namespace, name }
        }
        [namespace, name, "versions"] if is_name(namespace) && is_name(name) => {
            GalaxyPath::Versions { namespace, name }
        }
        [namespace, name, "versions", version]
            if is_name(namespace) && is_name(name) && !version.is_empty() =>
        {
            GalaxyPath::Version {
                namespace,
                name,
                version,
            }
        }
        _ => GalaxyPath::Api,
    }
}

/// The keys whose values are links a client follows or shows.
const LINK_KEYS: [&str; 8] = [
    "href",
    "download_url",
    "versions_url",
    "next",
    "previous",
    "first",
    "last",
    "signatures_url",
];

/// Every link in `value` (at any depth, under a [`LINK_KEYS`] key)
/// re-pointed at the proxy: absolute ones on the remote's hosts with
/// `rewrite`, root-relative ones below the remote, root-relative still.
fn repoint(value: &mut Value, rewrite: &Rewrite) {
    match value {
        Value::Object(object) => {
            for (key, value) in object.iter_mut() {
                match value {
                    Value::String(link) if LINK_KEYS.contains(&key.as_str()) => {
                        let moved = rewrite
                            .root_relative(link)
                            .unwrap_or_else(|| rewrite.apply(link));
                        *link = moved;
                    }
                    _ => repoint(value, rewrite),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| repoint(item, rewrite)),
        _ => {}
    }
}

/// The versions a `versions/` page lists (pulp_ansible: `data`; an older
/// galaxy: `results`).
fn listed(page: &mut Value) -> Option<&mut Vec<Value>> {
    let object = page.as_object_mut()?;
    let key = ["data", "results"]
        .into_iter()
        .find(|key| object.get(*key).is_some_and(Value::is_array))?;
    object.get_mut(key)?.as_array_mut()
}

fn created_at(release: &Value) -> Option<i64> {
    release.get("created_at")?.as_str().and_then(parse_time)
}

impl Ecosystem for Galaxy {
    fn name(&self) -> &'static str {
        "galaxy"
    }

    /// Tarballs immutable; the roles' v1 API passed through; every other
    /// path an API document, its query part of the key. `api` is `api/`:
    /// `ansible-galaxy` asks for the API root without its slash, which
    /// Galaxy answers with a redirect to it.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        match classify(path) {
            GalaxyPath::Tarball { .. } => Plan {
                immutable: true,
                ..Plan::default()
            },
            GalaxyPath::V1 => Plan {
                pass_through: Some(PassThrough { post: false }),
                ..Plan::default()
            },
            _ => Plan {
                document: Rewritten::Always,
                query_in_key: true,
                respelled: (path.split('?').next() == Some("api")).then_some(Respelling {
                    at: 3,
                    len: 0,
                    with: "/",
                }),
                ..Plan::default()
            },
        }
    }

    /// Links re-pointed in the JSON; a body that is not JSON is rewritten
    /// as text.
    fn rewrite(&self, _path: &str, text: &str, rewrite: &Rewrite) -> String {
        let Ok(mut doc) = serde_json::from_str::<Value>(text) else {
            return rewrite.apply(text);
        };
        repoint(&mut doc, rewrite);
        serde_json::to_string(&doc).unwrap_or_else(|_| text.to_string())
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

impl Digests for Galaxy {
    fn artifact_key(&self, path: &str) -> Option<String> {
        matches!(classify(path), GalaxyPath::Tarball { .. }).then(|| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        matches!(classify(path), GalaxyPath::Version { .. })
    }

    /// A version's `artifact.sha256` (and `artifact.size`), for the
    /// tarball its `download_url` names.
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        let Ok(doc) = serde_json::from_slice::<Value>(body) else {
            return Vec::new();
        };
        let declared = doc["artifact"]["sha256"]
            .as_str()
            .and_then(|hex| Declared::from_hex(Algo::Sha256, hex))
            .map(|d| d.with_size(doc["artifact"]["size"].as_u64()));
        let key = doc["download_url"]
            .as_str()
            .and_then(|url| document.path_of(url));
        key.zip(declared).into_iter().collect()
    }
}

impl Packages for Galaxy {
    /// Galaxy names are lower case.
    fn normalise(&self, name: &str) -> String {
        name.to_ascii_lowercase()
    }

    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        specifier::Specifier::parse(text).map(VersionSpec::new)
    }

    /// `{namespace}-{name}-{version}.tar.gz`: `namespace.name`.
    fn artifact(&self, path: &str) -> Option<Artifact> {
        let GalaxyPath::Tarball {
            namespace,
            name,
            version,
        } = classify(path)
        else {
            return None;
        };
        Some(Artifact {
            name: format!("{namespace}.{name}"),
            version: version.to_string(),
            file: file_name(path)?,
        })
    }

    /// A collection, its `versions/` pages and each version's detail.
    fn document(&self, path: &str) -> Option<String> {
        match classify(path) {
            GalaxyPath::Collection { namespace, name }
            | GalaxyPath::Versions { namespace, name }
            | GalaxyPath::Version {
                namespace, name, ..
            } => Some(format!("{namespace}.{name}")),
            _ => None,
        }
    }

    /// `created_at` of each version a `versions/` page lists, or of the
    /// version a detail describes.
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
            return HashMap::new();
        };
        let dated = |release: &Value| {
            Some((
                release["version"].as_str()?.to_string(),
                created_at(release)?,
            ))
        };
        if let Some(list) = listed(&mut doc) {
            return list.iter().filter_map(dated).collect();
        }
        dated(&doc).into_iter().collect()
    }

    /// A tarball's version is dated by its detail, where `ansible-galaxy`
    /// finds its `download_url` (`api/v3/collections/…` on a mirror at
    /// the Galaxy's root).
    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        let (namespace, name) = artifact.name.split_once('.')?;
        Some(TimeSource {
            document: format!(
                "api/v3/collections/{namespace}/{name}/versions/{}/",
                artifact.version
            ),
            suffix: "",
            key: TimeKey::Listed(artifact.version.clone()),
        })
    }

    /// A `versions/` page loses the refused versions (its `meta.count`
    /// follows); a refused version's detail, and a collection refused
    /// whole, are the refusal.
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
        if let Some(list) = listed(&mut doc) {
            let before = list.len();
            list.retain(|release| {
                let version = release["version"].as_str().unwrap_or("");
                judge.refusal(name, version, created_at(release)).is_none()
            });
            let removed = before - list.len();
            if removed == 0 {
                return Filtered::Unchanged;
            }
            if let Some(count) = doc["meta"]["count"].as_u64() {
                doc["meta"]["count"] = Value::from(count.saturating_sub(removed as u64));
            }
            return match serde_json::to_vec(&doc) {
                Ok(out) => Filtered::Changed(out),
                Err(_) => Filtered::Unchanged,
            };
        }
        if let (Some(version), true) = (doc["version"].as_str(), doc.get("download_url").is_some())
        {
            return match judge.refusal(name, version, created_at(&doc)) {
                Some(reason) => Filtered::Refused(reason),
                None => Filtered::Unchanged,
            };
        }
        if judge.standing(name) != Standing::Refused {
            return Filtered::Unchanged;
        }
        let highest = doc["highest_version"]["version"].as_str().unwrap_or("*");
        match judge.refusal(name, highest, None) {
            Some(reason) => Filtered::Refused(reason),
            None => Filtered::Unchanged,
        }
    }
}

#[cfg(test)]
mod tests;
