//! conda: channels in anaconda.org's layout, `<channel>/<subdir>/…` below
//! the remote (several channels behind one remote: `conda-forge/…`,
//! `bioconda/…`). Packages (`<name>-<version>-<build>.conda` and
//! `.tar.bz2`) and CEP 16 shards (`…/shards/<sha256>.msgpack.zst`) are
//! immutable; `repodata.json` (and its `.zst` and `.bz2` forms),
//! `current_repodata.json`, the shard index and `channeldata.json` are
//! revalidated. Each record's `sha256` in `repodata.json` (plain or `.zst`)
//! is the declared digest of the package file beside it. Packages are
//! named in lower case, rules in conda's version spec syntax (`>=1.0,<2`,
//! `1.2.*`, `1.0|1.2`; `conda/version.rs`), publish times each record's
//! `timestamp`; `repodata.json` (and `current_repodata.json`, and the
//! `.zst` form, recompressed) is served without the refused records, except
//! a package whose every record is refused: it stays listed, so the solver
//! picks it and the download's 403 carries the reason in its status line
//! (rattler prints it). The sharded index is served as sent.

mod version;

use std::collections::{HashMap, HashSet};
use std::io::Read;

use axum::http::HeaderMap;
use serde_json::{Map, Value};

use super::declared::{canonical, Algo, Declared, Document};
use super::guard::{Filtered, Judge, VersionSpec};
use super::package::{self, Artifact};
use super::unpack::{Stopped, Unpacked};
use super::{Digests, Ecosystem, Packages, Plan, TimeKey, TimeSource};

pub struct Conda;

/// The repodata documents a subdir has, as JSON (plain or zstd).
const REPODATA: [&str; 4] = [
    "repodata.json",
    "repodata.json.zst",
    "current_repodata.json",
    "repodata_from_packages.json",
];

/// The two maps of records in a repodata document.
const RECORDS: [&str; 2] = ["packages", "packages.conda"];

/// `<channel>/<subdir>` and the file in it.
fn in_subdir(path: &str) -> Option<(&str, &str)> {
    let (dir, file) = path.rsplit_once('/')?;
    (dir.contains('/') && !file.is_empty()).then_some((dir, file))
}

/// A package file's stem (`<name>-<version>-<build>`).
fn package_stem(path: &str) -> Option<&str> {
    let (dir, file) = in_subdir(path)?;
    let stem = file
        .strip_suffix(".conda")
        .or_else(|| file.strip_suffix(".tar.bz2"))?;
    (!dir.ends_with("/shards") && stem.splitn(3, '-').count() == 3).then_some(stem)
}

fn is_shard(path: &str) -> bool {
    in_subdir(path)
        .is_some_and(|(dir, file)| dir.ends_with("/shards") && file.ends_with(".msgpack.zst"))
}

fn is_repodata(path: &str) -> bool {
    in_subdir(path).is_some_and(|(_, file)| REPODATA.contains(&file))
}

/// A repodata document's JSON, decompressed (zstd) within `max` bytes.
fn repodata_json(body: &[u8], max: u64) -> Result<Value, Stopped> {
    let mut text = Vec::new();
    Unpacked::new(body, max)?
        .into_reader()
        .read_to_end(&mut text)
        .map_err(|e| super::unpack::stopped(&e))?;
    serde_json::from_slice(&text).map_err(|e| Stopped::Broken(e.to_string()))
}

/// Every (file name, record) of a repodata document.
fn records(doc: &Value) -> impl Iterator<Item = (&String, &Value)> {
    RECORDS
        .iter()
        .filter_map(|key| doc.get(*key)?.as_object())
        .flatten()
}

/// A `timestamp` in unix ms (old records have seconds).
fn unix_ms(at: f64) -> i64 {
    let at = at as i64;
    if at < 100_000_000_000 {
        at * 1000
    } else {
        at
    }
}

/// A record's `timestamp` in unix ms.
fn timestamp(record: &Value) -> Option<i64> {
    record.get("timestamp")?.as_f64().map(unix_ms)
}

/// What the learner and the cooldown read of a repodata document: each
/// file's `sha256` and `timestamp`, read as a stream into these fields only
/// (conda-forge's `repodata.json` is over 200 MB of JSON).
#[derive(serde::Deserialize)]
struct Listing {
    #[serde(default)]
    packages: HashMap<String, Listed>,
    #[serde(default, rename = "packages.conda")]
    conda: HashMap<String, Listed>,
}

#[derive(serde::Deserialize)]
struct Listed {
    sha256: Option<String>,
    timestamp: Option<f64>,
}

impl Listing {
    fn read(body: &[u8], max: u64) -> Result<Listing, Stopped> {
        let reader = Unpacked::new(body, max)?.into_reader();
        serde_json::from_reader(reader).map_err(|e| Stopped::Broken(e.to_string()))
    }

    fn files(self) -> impl Iterator<Item = (String, Listed)> {
        self.packages.into_iter().chain(self.conda)
    }
}

impl Ecosystem for Conda {
    fn name(&self) -> &'static str {
        "conda"
    }

    /// Packages and shards immutable; repodata and the rest revalidated.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: package_stem(path).is_some() || is_shard(path),
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

impl Digests for Conda {
    fn artifact_key(&self, path: &str) -> Option<String> {
        package_stem(path).map(|_| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        is_repodata(path)
    }

    /// Each record's `sha256`, for the file of its name in the same subdir.
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        let Some((dir, _)) = in_subdir(document.path) else {
            return Vec::new();
        };
        let listing = match Listing::read(body, document.max_unpacked) {
            Ok(listing) => listing,
            Err(stop) => {
                tracing::warn!(document = document.path, %stop,
                    "stopped learning the digests this document declares; it is served as sent");
                return Vec::new();
            }
        };
        listing
            .files()
            .filter_map(|(file, listed)| {
                let declared = Declared::from_hex(Algo::Sha256, &listed.sha256?)?;
                Some((canonical(&format!("{dir}/{file}")), declared))
            })
            .collect()
    }
}

impl Packages for Conda {
    /// conda's names are lower case.
    fn normalise(&self, name: &str) -> String {
        name.to_ascii_lowercase()
    }

    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        version::Spec::parse(text).map(VersionSpec::new)
    }

    /// `<name>-<version>-<build>`; its `file` is the path, which says whose
    /// repodata dates it.
    fn artifact(&self, path: &str) -> Option<Artifact> {
        package_stem(path)?;
        let file = package::file_name(path)?;
        let stem = file
            .strip_suffix(".conda")
            .or_else(|| file.strip_suffix(".tar.bz2"))?;
        let mut parts = stem.rsplitn(3, '-');
        let (_build, version, name) = (parts.next()?, parts.next()?, parts.next()?);
        Some(Artifact {
            name: name.to_string(),
            version: version.to_string(),
            file: path.to_string(),
        })
    }

    /// A repodata document lists every package of its subdir: it is its
    /// own name.
    fn document(&self, path: &str) -> Option<String> {
        is_repodata(path).then(|| path.to_string())
    }

    /// By file name: each record's `timestamp`.
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        let Ok(listing) = Listing::read(body, super::unpack::DEFAULT_MAX_UNPACKED) else {
            return HashMap::new();
        };
        listing
            .files()
            .filter_map(|(file, listed)| Some((file, unix_ms(listed.timestamp?))))
            .collect()
    }

    /// The subdir's `repodata.json`.
    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        let (dir, file) = in_subdir(&artifact.file)?;
        Some(TimeSource {
            document: format!("{dir}/repodata.json"),
            suffix: "",
            key: TimeKey::Listed(file.to_string()),
        })
    }

    /// The refused records go (dated by their own `timestamp`), but not a
    /// package's last ones: its files are refused with the reason instead.
    fn filter(
        &self,
        judge: &Judge,
        _name: &str,
        body: &[u8],
        _times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        let zstd = body.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]);
        let Ok(mut doc) = repodata_json(body, super::unpack::DEFAULT_MAX_UNPACKED) else {
            return Filtered::Unchanged;
        };
        let name_of = |record: &Value| record.get("name")?.as_str().map(str::to_string);
        let (mut refused, mut kept_names) = (HashSet::new(), HashSet::new());
        for (file, record) in records(&doc) {
            let (Some(name), Some(version)) = (
                name_of(record),
                record.get("version").and_then(Value::as_str),
            ) else {
                continue;
            };
            match judge.refusal(&name, version, timestamp(record)) {
                Some(_) => refused.insert((file.clone(), name)),
                None => kept_names.insert(name),
            };
        }
        let refused: HashSet<String> = refused
            .into_iter()
            .filter(|(_, name)| kept_names.contains(name))
            .map(|(file, _)| file)
            .collect();
        if refused.is_empty() {
            return Filtered::Unchanged;
        }
        for key in RECORDS {
            if let Some(map) = doc.get_mut(key).and_then(Value::as_object_mut) {
                let kept: Map<String, Value> = std::mem::take(map)
                    .into_iter()
                    .filter(|(file, _)| !refused.contains(file))
                    .collect();
                *map = kept;
            }
        }
        let Ok(json) = serde_json::to_vec(&doc) else {
            return Filtered::Unchanged;
        };
        if !zstd {
            return Filtered::Changed(json);
        }
        match zstd::stream::encode_all(&json[..], 3) {
            Ok(packed) => Filtered::Changed(packed),
            Err(_) => Filtered::Unchanged,
        }
    }

    /// rattler prints a failed download's status line.
    fn reason_in_status_line(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
