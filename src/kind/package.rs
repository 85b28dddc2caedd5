//! Which package (and version) a path of an npm, pypi or cargo remote is
//! about: artifacts (tarballs, wheels and sdists, crates) name a package and
//! a version, documents (packuments, simple pages, sparse index files) name
//! a package. Pure functions over paths; the guard uses them, and so may
//! anything else that needs a package's identity.

use percent_encoding::percent_decode_str;

use crate::config::RemoteKind;

/// A downloadable file of one version of one package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The name as the path spells it (`@scope/name`, `Foo_Bar`, `serde`).
    pub name: String,
    pub version: String,
    /// The file name (pypi: the key of its upload time in the JSON page).
    pub file: String,
}

/// The artifact `path` (below the remote, `~files/` included) downloads.
pub fn artifact(kind: RemoteKind, path: &str) -> Option<Artifact> {
    let last = path.rsplit('/').next()?;
    let file = percent_decode_str(last).decode_utf8().ok()?.into_owned();
    match kind {
        RemoteKind::Npm => npm_tarball(path, file),
        RemoteKind::Pypi => pypi_file(file),
        RemoteKind::Cargo => cargo_crate(path, file),
        _ => None,
    }
}

/// The package whose document (packument, simple page, sparse index file)
/// `path` is.
pub fn document(kind: RemoteKind, path: &str) -> Option<String> {
    match kind {
        RemoteKind::Npm => {
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
        RemoteKind::Pypi => {
            let project = path.strip_prefix("simple/")?.strip_suffix('/')?;
            (!project.is_empty() && !project.contains('/')).then(|| project.to_string())
        }
        RemoteKind::Cargo => {
            let name = path.rsplit('/').next()?;
            (!name.is_empty() && cargo_index_path(name) == path.to_ascii_lowercase())
                .then(|| name.to_string())
        }
        _ => None,
    }
}

/// An npm package's packument path, as npm spells it (`@scope%2Fname`,
/// normalised as the proxy normalises request paths).
pub fn npm_packument_path(name: &str) -> String {
    name.replacen('/', "%2F", 1)
}

/// A pypi project's simple page (PEP 503 name).
pub fn pypi_page_path(normalised_name: &str) -> String {
    format!("simple/{normalised_name}/")
}

/// A crate's sparse index file: `1/a`, `2/ab`, `3/a/abc`, `se/rd/serde`.
pub fn cargo_index_path(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    match lower.len() {
        1 => format!("1/{lower}"),
        2 => format!("2/{lower}"),
        3 => format!("3/{}/{lower}", &lower[..1]),
        _ => format!("{}/{}/{lower}", &lower[..2], &lower[2..4]),
    }
}

/// `name/-/name-1.2.3.tgz`, `@scope/name/-/name-1.2.3.tgz` (or `@scope%2F…`).
fn npm_tarball(path: &str, file: String) -> Option<Artifact> {
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

/// Wheels (`{name}-{version}(-{build})?-{py}-{abi}-{platform}.whl`) and
/// sdists (`{name}-{version}.tar.gz`, `.zip`, …). Not `.metadata` files:
/// those describe a file, and pip reads them before choosing it.
fn pypi_file(file: String) -> Option<Artifact> {
    if let Some(stem) = file.strip_suffix(".whl") {
        let mut parts = stem.split('-');
        let (name, version) = (parts.next()?, parts.next()?);
        return (parts.count() >= 3).then(|| Artifact {
            name: name.to_string(),
            version: version.to_string(),
            file: file.clone(),
        });
    }
    let stem = [".tar.gz", ".zip", ".tar.bz2", ".tgz", ".egg"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))?;
    // The version is after the last `-` that a digit follows (old sdists
    // keep dashes in the name: `python-dateutil-2.8.2.tar.gz`).
    let at = stem
        .match_indices('-')
        .map(|(at, _)| at)
        .rfind(|&at| stem[at + 1..].starts_with(|c: char| c.is_ascii_digit()))?;
    Some(Artifact {
        name: stem[..at].to_string(),
        version: stem[at + 1..].to_string(),
        file: file.clone(),
    })
}

/// `{crate}/{version}/download` (crates.io's `dl`, the web API) and
/// `{crate}-{version}.crate` (static.crates.io's layout).
fn cargo_crate(path: &str, file: String) -> Option<Artifact> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn named(kind: RemoteKind, path: &str) -> Option<(String, String)> {
        artifact(kind, path).map(|a| (a.name, a.version))
    }

    #[test]
    fn artifacts_name_their_package_and_version() {
        use RemoteKind::*;
        let some = |n: &str, v: &str| Some((n.to_string(), v.to_string()));
        for (kind, path, expected) in [
            (
                Npm,
                "left-pad/-/left-pad-1.3.0.tgz",
                some("left-pad", "1.3.0"),
            ),
            (
                Npm,
                "@mc/c/-/c-1.0.0-beta.1.tgz",
                some("@mc/c", "1.0.0-beta.1"),
            ),
            (Npm, "@mc%2Fc/-/c-2.0.0.tgz", some("@mc/c", "2.0.0")),
            (Npm, "left-pad/-/other-1.0.0.tgz", None),
            (Npm, "left-pad", None),
            (
                Pypi,
                "~files/packages/ab/cd/Mc_Alpha-1.0-py3-none-any.whl",
                some("Mc_Alpha", "1.0"),
            ),
            (
                Pypi,
                "~files/packages/x/pkg-2.0-1-cp311-cp311-linux_x86_64.whl",
                some("pkg", "2.0"),
            ),
            (
                Pypi,
                "packages/python-dateutil-2.8.2.tar.gz",
                some("python-dateutil", "2.8.2"),
            ),
            (Pypi, "packages/mc_alpha-1.0.zip", some("mc_alpha", "1.0")),
            (
                Pypi,
                "packages/mc_alpha-1.0-py3-none-any.whl.metadata",
                None,
            ),
            (Pypi, "simple/mc-alpha/", None),
            (
                Cargo,
                "~files/mc_leaf/0.1.0/download",
                some("mc_leaf", "0.1.0"),
            ),
            (
                Cargo,
                "api/v1/crates/serde/1.0.0-rc.1/download",
                some("serde", "1.0.0-rc.1"),
            ),
            (
                Cargo,
                "~files/crates/foo-2d/foo-2d-1.0.0-alpha.crate",
                some("foo-2d", "1.0.0-alpha"),
            ),
            (Cargo, "se/rd/serde", None),
            (Apt, "pool/main/h/hello/hello_2.10-3_amd64.deb", None),
        ] {
            assert_eq!(named(kind, path), expected, "{kind:?} {path}");
        }
    }

    #[test]
    fn documents_name_their_package() {
        use RemoteKind::*;
        for (kind, path, expected) in [
            (Npm, "left-pad", Some("left-pad")),
            (Npm, "@mc%2Fc", Some("@mc/c")),
            (Npm, "@mc/c", Some("@mc/c")),
            (Npm, "-/v1/search", None),
            (Npm, "left-pad/-/left-pad-1.0.0.tgz", None),
            (Pypi, "simple/mc-alpha/", Some("mc-alpha")),
            (Pypi, "simple/", None),
            (Pypi, "pypi/six/json", None),
            (Cargo, "mc/_l/mc_leaf", Some("mc_leaf")),
            (Cargo, "3/s/syn", Some("syn")),
            (Cargo, "1/a", Some("a")),
            (Cargo, "config.json", None),
            (Cargo, "ab/cd/serde", None),
            (Go, "golang.org/x/text/@v/list", None),
        ] {
            assert_eq!(document(kind, path).as_deref(), expected, "{kind:?} {path}");
        }
        assert_eq!(npm_packument_path("@mc/c"), "@mc%2Fc");
        assert_eq!(cargo_index_path("Serde"), "se/rd/serde");
        assert_eq!(pypi_page_path("mc-alpha"), "simple/mc-alpha/");
    }
}
