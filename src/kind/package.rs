//! Which package (and version) a path is about, the shared part: an
//! [`Artifact`] names a package, a version and its file; each ecosystem's
//! `Packages` reads them from its own paths (tarballs, wheels and sdists,
//! crates; packuments, simple pages, sparse index files).

use percent_encoding::percent_decode_str;

/// A downloadable file of one version of one package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The name as the path spells it (`@scope/name`, `Foo_Bar`, `serde`).
    pub name: String,
    pub version: String,
    /// The file name (pypi: the key of its upload time in the JSON page).
    pub file: String,
}

/// The last segment of `path`, percent-decoded: the file an artifact path
/// downloads.
pub fn file_name(path: &str) -> Option<String> {
    let last = path.rsplit('/').next()?;
    Some(percent_decode_str(last).decode_utf8().ok()?.into_owned())
}
