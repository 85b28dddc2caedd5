//! The registry protocol's JSON as the terraform kind reads it (the version
//! list, a platform's download answer, the services a host discovers) and
//! the network mirror protocol's documents made from it.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::kind::rewrite::Rewrite;

/// `v1/providers/{ns}/{type}/versions`, as far as it is read here.
#[derive(Deserialize)]
struct VersionList {
    #[serde(default)]
    versions: Vec<ListedVersion>,
}

#[derive(Deserialize)]
struct ListedVersion {
    version: String,
    #[serde(default)]
    platforms: Vec<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    os: String,
    arch: String,
}

/// `…/{version}/download/{os}/{arch}`: where one platform's archive is and
/// its sha256 (`packages`: hashes by platform, as OpenTofu's registry adds).
#[derive(Deserialize)]
pub(super) struct Download {
    pub(super) os: String,
    pub(super) arch: String,
    pub(super) download_url: String,
    pub(super) shasum: String,
    #[serde(default)]
    packages: BTreeMap<String, Hashes>,
}

#[derive(Deserialize)]
struct Hashes {
    #[serde(default)]
    hashes: Vec<String>,
}

pub(super) fn download(body: &[u8]) -> Option<Download> {
    serde_json::from_slice(body).ok()
}

/// The platforms `(os, arch)` the version list gives for `version`.
pub(super) fn platforms(body: &[u8], version: &str) -> Vec<(String, String)> {
    let Ok(list) = serde_json::from_slice::<VersionList>(body) else {
        return Vec::new();
    };
    list.versions
        .into_iter()
        .find(|v| v.version == version)
        .map(|v| v.platforms.into_iter().map(|p| (p.os, p.arch)).collect())
        .unwrap_or_default()
}

/// The mirror's `index.json`: `{"versions": {"1.2.0": {}, …}}`.
pub(super) fn mirror_index(body: &[u8]) -> Vec<u8> {
    let versions: BTreeMap<String, Value> = serde_json::from_slice::<VersionList>(body)
        .map(|list| list.versions)
        .unwrap_or_default()
        .into_iter()
        .map(|v| (v.version, json!({})))
        .collect();
    json!({ "versions": versions }).to_string().into_bytes()
}

/// The mirror's `{version}.json` from the version's download answers
/// (`others`): each platform's archive at its URL re-pointed, with its
/// `zh:` hash and any others the registry lists for the platform.
pub(super) fn mirror_version(others: &[(String, Vec<u8>)], rewrite: &Rewrite) -> Vec<u8> {
    let mut archives = BTreeMap::new();
    for (_, body) in others {
        let Some(mut download) = download(body) else {
            continue;
        };
        let platform = format!("{}_{}", download.os, download.arch);
        let mut hashes = vec![format!("zh:{}", download.shasum.to_ascii_lowercase())];
        if let Some(listed) = download.packages.remove(&platform) {
            for hash in listed.hashes {
                if !hashes.contains(&hash) {
                    hashes.push(hash);
                }
            }
        }
        let url = relocated(&download.download_url, rewrite);
        archives.insert(platform, json!({ "url": url, "hashes": hashes }));
    }
    json!({ "archives": archives }).to_string().into_bytes()
}

/// `link` as the proxy serves it: an absolute URL on the remote's hosts
/// re-pointed, a root-relative one put below the remote.
fn relocated(link: &str, rewrite: &Rewrite) -> String {
    rewrite
        .root_relative(link)
        .unwrap_or_else(|| rewrite.apply(link))
}

/// The services document with each service URL re-pointed: absolute ones
/// on the remote's hosts, root-relative ones (`/v1/providers/`) below the
/// remote. `None` when it is not a JSON object.
pub(super) fn services(text: &str, rewrite: &Rewrite) -> Option<String> {
    let mut services: serde_json::Map<String, Value> = serde_json::from_str(text).ok()?;
    for value in services.values_mut() {
        if let Value::String(url) = value {
            *url = relocated(url, rewrite);
        }
    }
    Some(Value::Object(services).to_string())
}

/// The version list without the versions `refused` names, and how many are
/// left; `None` when none is refused (or it is not a version list).
pub(super) fn without_versions(
    body: &[u8],
    mut refused: impl FnMut(&str) -> bool,
) -> Option<(Vec<u8>, usize)> {
    let mut document: Value = serde_json::from_slice(body).ok()?;
    let versions = document.get_mut("versions")?.as_array_mut()?;
    let before = versions.len();
    versions.retain(|v| {
        !v.get("version")
            .and_then(Value::as_str)
            .is_some_and(&mut refused)
    });
    let left = versions.len();
    (left < before).then(|| (document.to_string().into_bytes(), left))
}
