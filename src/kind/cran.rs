//! cran: an R package repository in CRAN's layout. Source packages
//! (`src/contrib/<pkg>_<version>.tar.gz`), their archived versions
//! (`src/contrib/Archive/<pkg>/<pkg>_<version>.tar.gz`) and binaries
//! (`bin/<platform>/contrib/<r-version>/<pkg>_<version>.zip` or `.tgz`) are
//! immutable; the indexes beside them (`PACKAGES`, `PACKAGES.gz`,
//! `PACKAGES.rds`) and everything else are revalidated, none rewritten (they
//! hold no URLs). A package's `MD5sum` in `PACKAGES` (plain or `.gz`) is the
//! declared digest of its file in that directory; R reads `PACKAGES.rds`, an
//! R object the proxy does not parse, so the first fill of a file nothing
//! declares yet has the proxy read `PACKAGES.gz` of its directory itself
//! (`declared_by`); a file no index lists (an archived version) is pinned on
//! first use. Packages are named as spelt (R's names are case-sensitive),
//! rules in R's constraint syntax (`2.1-3`, `>= 1.0, < 2.0`;
//! `cran/version.rs`), publish times each entry's `Date/Publication` where
//! the index carries it (CRAN's own does not; `write_PACKAGES(fields =
//! "Date/Publication")` writes it). The index is not filtered: it lists one
//! version of each package, so a refused one has no older version to fall
//! back to; its file is refused instead, with the reason in the status line
//! (R's `wget` download method prints it, the default `libcurl` one only the
//! status code).

mod version;

use std::collections::HashMap;

use axum::http::HeaderMap;

use super::declared::{canonical, Algo, Declared, Document};
use super::guard::{parse_time, VersionSpec};
use super::package::{self, Artifact};
use super::unpack::{Stopped, Unpacked};
use super::{Digests, Ecosystem, Packages, Plan, TimeKey, TimeSource};

pub struct Cran;

/// A package file's directory and name: `src/contrib/<file>.tar.gz`,
/// `src/contrib/Archive/<pkg>/<file>.tar.gz`, or
/// `bin/<platform…>/contrib/<r-version>/<file>.zip|.tgz`.
fn package_file(path: &str) -> Option<(&str, &str)> {
    let (dir, file) = path.rsplit_once('/')?;
    let (_, version) = file.rsplit_once('_')?;
    if version.starts_with('.') || file.starts_with('_') {
        return None;
    }
    let source = file.ends_with(".tar.gz")
        && (dir == "src/contrib"
            || dir
                .strip_prefix("src/contrib/Archive/")
                .is_some_and(|pkg| !pkg.is_empty() && !pkg.contains('/')));
    let binary = (file.ends_with(".zip") || file.ends_with(".tgz"))
        && dir.starts_with("bin/")
        && dir
            .rsplit_once("/contrib/")
            .is_some_and(|(_, r)| !r.is_empty() && !r.contains('/'));
    (source || binary).then_some((dir, file))
}

/// Whether `path` is a directory's index that declares digests (the
/// `.rds` is an R object the proxy does not read).
fn is_dcf_index(path: &str) -> bool {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    matches!(name, "PACKAGES" | "PACKAGES.gz")
        && (dir == "src/contrib" || (dir.starts_with("bin/") && dir.contains("/contrib/")))
}

/// The extension of a package file in directory `dir`: source tarballs
/// under `src/`, Windows zips, macOS tarballs.
fn extension(dir: &str) -> &'static str {
    if dir.starts_with("bin/windows/") {
        ".zip"
    } else if dir.starts_with("bin/") {
        ".tgz"
    } else {
        ".tar.gz"
    }
}

impl Ecosystem for Cran {
    fn name(&self) -> &'static str {
        "cran"
    }

    /// Package files immutable; indexes and the rest revalidated.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: package_file(path).is_some(),
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

impl Digests for Cran {
    fn artifact_key(&self, path: &str) -> Option<String> {
        package_file(path).map(|_| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        is_dcf_index(path)
    }

    /// A file listed in its directory's index: `PACKAGES.gz` there, read
    /// through the cache (R itself reads the `.rds`).
    fn declared_by(&self, path: &str) -> Vec<String> {
        match package_file(path) {
            Some((dir, _)) if !dir.contains("/Archive/") => vec![format!("{dir}/PACKAGES.gz")],
            _ => Vec::new(),
        }
    }

    /// Each entry's `MD5sum`, for `<Package>_<Version>` with the directory's
    /// extension (or its `File:`), under its `Path:` when it has one.
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        let dir = document.path.rsplit_once('/').map_or("", |(dir, _)| dir);
        let mut out = Vec::new();
        let read = entries(body, document.max_unpacked, |entry| {
            let (Some(md5), Some(file)) = (entry.get("MD5sum"), entry_file(dir, entry)) else {
                return;
            };
            if let Some(declared) = Declared::from_hex(Algo::Md5, md5) {
                let within = entry.get("Path").map_or(String::new(), |p| format!("{p}/"));
                out.push((canonical(&format!("{dir}/{within}{file}")), declared));
            }
        });
        if let Err(stop) = read {
            tracing::warn!(document = document.path, %stop, learned = out.len(),
                "stopped learning the digests this document declares; it is served as sent");
        }
        out
    }
}

/// The file an index entry names in directory `dir`.
fn entry_file(dir: &str, entry: &HashMap<String, String>) -> Option<String> {
    if let Some(file) = entry.get("File") {
        return Some(file.clone());
    }
    let (name, version) = (entry.get("Package")?, entry.get("Version")?);
    Some(format!("{name}_{version}{}", extension(dir)))
}

/// Calls `each` with every entry (field → value, continuation lines
/// joined) of a `PACKAGES` index, plain or gzipped, read as a bounded
/// stream (`kind::unpack`).
fn entries(
    body: &[u8],
    max: u64,
    mut each: impl FnMut(&HashMap<String, String>),
) -> Result<(), Stopped> {
    let mut unpacked = Unpacked::new(body, max)?;
    let (mut line, mut entry) = (Vec::new(), HashMap::new());
    let mut last: Option<String> = None;
    loop {
        let more = unpacked.line(&mut line)?;
        let text = String::from_utf8_lossy(&line);
        if more && !text.trim().is_empty() {
            field(&text, &mut entry, &mut last);
            continue;
        }
        // A blank line, or the end: the entry is complete.
        if !entry.is_empty() {
            each(&entry);
            entry.clear();
        }
        last = None;
        if !more {
            return Ok(());
        }
    }
}

/// One line of an entry: `Field: value`, or a continuation of the last.
fn field(line: &str, entry: &mut HashMap<String, String>, last: &mut Option<String>) {
    if line.starts_with([' ', '\t']) {
        if let Some(value) = last.as_ref().and_then(|key| entry.get_mut(key)) {
            value.push(' ');
            value.push_str(line.trim());
        }
    } else if let Some((key, value)) = line.split_once(':') {
        entry.insert(key.to_string(), value.trim().to_string());
        *last = Some(key.to_string());
    }
}

/// `Date/Publication` (`2024-01-15 10:20:03 UTC`, or RFC 3339) in unix ms.
fn publication(text: &str) -> Option<i64> {
    parse_time(text.trim().trim_end_matches(" UTC"))
}

impl Packages for Cran {
    fn osv_ecosystem(&self) -> Option<&'static str> {
        Some("CRAN")
    }

    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        version::Constraints::parse(text).map(VersionSpec::new)
    }

    /// `<pkg>_<version><extension>`: the version after the last `_`; its
    /// `file` is the path itself, which says whose index dates it.
    fn artifact(&self, path: &str) -> Option<Artifact> {
        let (dir, _) = package_file(path)?;
        let file = package::file_name(path)?;
        let (name, version) = file.strip_suffix(extension(dir))?.rsplit_once('_')?;
        Some(Artifact {
            name: name.to_string(),
            version: version.to_string(),
            file: path.to_string(),
        })
    }

    /// No document is a package's own: the index lists every package.
    fn document(&self, _path: &str) -> Option<String> {
        None
    }

    /// By `<pkg>_<version>`: each entry's `Date/Publication`.
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        let mut times = HashMap::new();
        let _ = entries(body, super::unpack::DEFAULT_MAX_UNPACKED, |entry| {
            let (Some(name), Some(version)) = (entry.get("Package"), entry.get("Version")) else {
                return;
            };
            if let Some(at) = entry.get("Date/Publication").and_then(|d| publication(d)) {
                times.insert(format!("{name}_{version}"), at);
            }
        });
        times
    }

    /// The `PACKAGES.gz` of the file's directory (an archived version's
    /// is the current one's, which does not list it: no time, so it passes).
    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        let (dir, _) = package_file(&artifact.file)?;
        let dir = dir.split("/Archive/").next()?;
        Some(TimeSource {
            document: format!("{dir}/PACKAGES.gz"),
            suffix: "",
            key: TimeKey::Listed(format!("{}_{}", artifact.name, artifact.version)),
        })
    }

    /// R's `wget` download method prints the status line, not the body.
    fn reason_in_status_line(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
