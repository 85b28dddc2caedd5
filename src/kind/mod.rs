//! Per-kind rules: which paths of a pypi, npm, cargo, apt or go remote are
//! immutable artifacts (cached forever), which are index documents whose
//! absolute URLs are rewritten to point through the proxy, and which are
//! content-negotiated (cached once per variant). Everything a kind knows about
//! its ecosystem lives here; [`policy`] adds the operator's patterns on top, and
//! [`rewrite`] re-points a document's URLs at the proxy, and [`declared`] reads
//! the digests documents declare for the artifacts they list.
//!
//! **Invariant:** this room imports only `config`: it is rules over paths,
//! headers and text, with no state.

pub mod declared;
pub mod filter;
pub mod guard;
pub mod oci;
pub mod package;
pub mod policy;
pub mod rewrite;

use axum::http::{header, HeaderMap, Method};

use crate::config::RemoteKind;

/// Paths under this prefix are served by the remote's `files` mirrors
/// (`/{remote}/~files/{path}` → `{files_mirror}/{path}`).
pub const FILES_PREFIX: &str = "~files/";

/// An API endpoint proxied to the remote's mirrors and never cached: each
/// answer is computed for the request (an audit of the client's lockfile, a
/// search), so a cached copy would be wrong for the next client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassThrough {
    /// Whether the endpoint takes POST (with a body) besides GET and HEAD.
    pub post: bool,
}

impl PassThrough {
    pub fn allows(self, method: &Method) -> bool {
        method == Method::GET || method == Method::HEAD || (self.post && method == Method::POST)
    }
}

/// npm's audit endpoints: POSTs of the client's dependency tree.
const NPM_AUDIT: [&str; 3] = [
    "-/npm/v1/security/advisories/bulk",
    "-/npm/v1/security/audits",
    "-/npm/v1/security/audits/quick",
];

/// Paths under this prefix of a go remote are its checksum database's
/// (`/{remote}/sumdb/{db}/{rest}` → `{sumdb_mirror}/{rest}`), as the GOPROXY
/// protocol lets a proxy serve `GOSUMDB`.
pub const SUMDB_PREFIX: &str = "sumdb/";

/// For a go remote, `sumdb/{db}/{rest}` split into the database's name and
/// the path within it.
pub fn sumdb_path(kind: RemoteKind, path: &str) -> Option<(&str, &str)> {
    if kind != RemoteKind::Go {
        return None;
    }
    let (db, rest) = path.strip_prefix(SUMDB_PREFIX)?.split_once('/')?;
    (!db.is_empty() && !rest.is_empty()).then_some((db, rest))
}

/// Whether `path` is under a cargo registry's web API, `api/v1/crates`,
/// which a registry may serve below a prefix of its own (`config.json`'s
/// `api`, e.g. `artifactory/api/cargo/{repo}`).
fn is_cargo_api(path: &str) -> bool {
    const API: &str = "api/v1/crates";
    path.match_indices(API).any(|(at, _)| {
        (at == 0 || path[..at].ends_with('/'))
            && matches!(path[at + API.len()..].chars().next(), None | Some('/'))
    })
}

/// One variant of a content-negotiated document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// Cache-key suffix (`path?suffix`).
    pub suffix: &'static str,
    /// The `Accept` header the mirror is asked with.
    pub accept: &'static str,
}

const PYPI_HTML: Variant = Variant {
    suffix: "html",
    accept: "application/vnd.pypi.simple.v1+html, text/html;q=0.9",
};
const PYPI_JSON: Variant = Variant {
    suffix: "json",
    accept: "application/vnd.pypi.simple.v1+json",
};
const NPM_FULL: Variant = Variant {
    suffix: "full",
    accept: "application/json",
};
const NPM_ABBREVIATED: Variant = Variant {
    suffix: "abbreviated",
    accept: "application/vnd.npm.install-v1+json",
};

impl RemoteKind {
    /// Whether `path` names an artifact that never changes once published.
    pub fn is_immutable(self, path: &str) -> bool {
        if path.starts_with(FILES_PREFIX) {
            // The files hosts of pypi and crates.io serve content-addressed
            // or versioned files only.
            return true;
        }
        match self {
            RemoteKind::Generic => false,
            RemoteKind::Pypi => {
                path.starts_with("packages/")
                    || [".whl", ".tar.gz", ".zip", ".tar.bz2", ".egg", ".metadata"]
                        .iter()
                        .any(|ext| path.ends_with(ext))
            }
            RemoteKind::Npm => path.contains("/-/") && path.ends_with(".tgz"),
            RemoteKind::Cargo => path.ends_with(".crate") || path.ends_with("/download"),
            RemoteKind::Apt => {
                path.starts_with("pool/")
                    || (path.starts_with("dists/") && path.contains("/by-hash/"))
            }
            // Checksum database: lookups and tiles never change once
            // published (the tree only grows); `latest` does.
            RemoteKind::Go => match sumdb_path(self, path) {
                Some((_, rest)) => rest.starts_with("lookup/") || rest.starts_with("tile/"),
                None => [".info", ".mod", ".zip"]
                    .iter()
                    .any(|ext| path.ends_with(ext)),
            },
            RemoteKind::Oci => oci::is_immutable(path),
        }
    }

    /// The API endpoint `path` is, if it is one: proxied uncached, with the
    /// query string. npm's audits and search; cargo's web API (`cargo search`,
    /// `cargo info`), read-only, except crate downloads, which are artifacts.
    pub fn pass_through(self, path: &str) -> Option<PassThrough> {
        match self {
            RemoteKind::Npm if NPM_AUDIT.contains(&path) => Some(PassThrough { post: true }),
            RemoteKind::Npm if path == "-/v1/search" => Some(PassThrough { post: false }),
            RemoteKind::Cargo if is_cargo_api(path) && !path.ends_with("/download") => {
                Some(PassThrough { post: false })
            }
            _ => None,
        }
    }

    /// Whether `path` is the GOPROXY protocol's `sumdb/{db}/supported`, which
    /// a proxy that serves the checksum database answers 200 itself.
    pub fn is_sumdb_supported(self, path: &str) -> bool {
        sumdb_path(self, path).is_some_and(|(_, rest)| rest == "supported")
    }

    /// Whether `path` is an index document whose absolute URLs are rewritten.
    pub fn is_document(self, path: &str) -> bool {
        match self {
            // The simple pages, and the JSON API (`pypi/{project}/json`,
            // `pypi/{project}/{version}/json`), whose `urls` name the files host.
            RemoteKind::Pypi => {
                path == "simple/"
                    || path.starts_with("simple/")
                    || (path.starts_with("pypi/") && path.ends_with("/json"))
            }
            // Packuments: `/{name}`, `/@scope%2f{name}`, `/@scope/{name}`;
            // not tarballs (`/-/`) nor registry endpoints (`-/…`).
            RemoteKind::Npm => {
                !path.starts_with("-/") && !path.contains("/-/") && !path.starts_with(FILES_PREFIX)
            }
            RemoteKind::Cargo => path == "config.json",
            RemoteKind::Generic | RemoteKind::Apt | RemoteKind::Go | RemoteKind::Oci => false,
        }
    }

    /// Every variant `path` is cached as, the default first; empty when the
    /// path is not content-negotiated. Its responses carry `Vary: Accept`.
    pub fn variants(self, path: &str) -> &'static [Variant] {
        match self {
            RemoteKind::Pypi if path.starts_with("simple/") => &[PYPI_HTML, PYPI_JSON],
            RemoteKind::Npm if self.is_document(path) => &[NPM_FULL, NPM_ABBREVIATED],
            RemoteKind::Oci => oci::variants(path),
            _ => &[],
        }
    }

    /// The variant a request asks for, for content-negotiated documents: the
    /// other variant when `Accept` names its media type, else the default.
    pub fn variant(self, path: &str, request: &HeaderMap) -> Option<Variant> {
        if self == RemoteKind::Oci {
            return oci::variant(path, request);
        }
        let accept = request
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let (default, others) = self.variants(path).split_first()?;
        let asked = others
            .iter()
            .find(|v| accept.contains(v.accept.split(',').next().unwrap_or(v.accept)));
        Some(*asked.unwrap_or(default))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immutable_and_document_paths_per_kind() {
        use RemoteKind::*;
        for (kind, path, immutable, document) in [
            (Pypi, "simple/six/", false, true),
            (
                Pypi,
                "~files/packages/ab/cd/six-1.16.0-py2.py3-none-any.whl",
                true,
                false,
            ),
            (Pypi, "~files/packages/ab/six.whl.metadata", true, false),
            (Pypi, "pypi/six/json", false, true),
            (Pypi, "pypi/six/1.16.0/json", false, true),
            (Npm, "left-pad", false, true),
            (Npm, "@scope%2fname", false, true),
            (Npm, "@scope/name", false, true),
            (Npm, "@scope/name/-/name-1.0.0.tgz", true, false),
            (Npm, "-/v1/search", false, false),
            (Cargo, "config.json", false, true),
            (Cargo, "3/s/syn", false, false),
            (Cargo, "~files/syn/2.0.0/download", true, false),
            (Cargo, "api/v1/crates/syn/2.0.0/download", true, false),
            (Apt, "dists/bookworm/InRelease", false, false),
            (
                Apt,
                "dists/bookworm/main/binary-amd64/by-hash/SHA256/abc",
                true,
                false,
            ),
            (Apt, "pool/main/h/hello/hello_2.10-3_amd64.deb", true, false),
            (Go, "golang.org/x/text/@v/list", false, false),
            (Go, "golang.org/x/text/@latest", false, false),
            (Go, "golang.org/x/text/@v/v0.3.0.zip", true, false),
            (Go, "golang.org/x/text/@v/v0.3.0.mod", true, false),
            (Go, "sumdb/sum.golang.org/latest", false, false),
            (
                Go,
                "sumdb/sum.golang.org/lookup/golang.org/x/text@v0.3.0",
                true,
                false,
            ),
            (Go, "sumdb/sum.golang.org/tile/8/0/x001/234", true, false),
            (Go, "sumdb/sum.golang.org/tile/8/1/000.p/5", true, false),
            (Go, "sumdb/sum.golang.org/supported", false, false),
            (Generic, "sumdb/sum.golang.org/tile/8/0/000", false, false),
        ] {
            assert_eq!(
                kind.is_immutable(path),
                immutable,
                "{kind:?} {path} immutable"
            );
            assert_eq!(kind.is_document(path), document, "{kind:?} {path} document");
        }
    }

    #[test]
    fn api_endpoints_pass_through_and_artifacts_do_not() {
        use RemoteKind::*;
        let (post, get) = (
            Some(PassThrough { post: true }),
            Some(PassThrough { post: false }),
        );
        for (kind, path, expected) in [
            (Npm, "-/npm/v1/security/advisories/bulk", post),
            (Npm, "-/npm/v1/security/audits", post),
            (Npm, "-/npm/v1/security/audits/quick", post),
            (Npm, "-/v1/search", get),
            (Npm, "-/v1/search/more", None),
            (Npm, "left-pad", None),
            (Npm, "-/npm/v1/security/audits/quick/x", None),
            (Cargo, "api/v1/crates", get),
            (Cargo, "api/v1/crates/serde", get),
            (Cargo, "api/v1/crates/serde/1.0.0/download", None),
            (Cargo, "api/v1/crates-and-more", None),
            (Cargo, "artifactory/api/cargo/crates-io/api/v1/crates", get),
            (
                Cargo,
                "artifactory/api/cargo/crates-io/v1/crates/itoa/1.0.19/download",
                None,
            ),
            (Cargo, "myapi/v1/crates", None),
            (Cargo, "config.json", None),
            (Pypi, "pypi/six/json", None),
            (Generic, "-/v1/search", None),
            (Go, "api/v1/crates", None),
        ] {
            assert_eq!(kind.pass_through(path), expected, "{kind:?} {path}");
        }
        assert!(get.unwrap().allows(&Method::HEAD));
        assert!(!get.unwrap().allows(&Method::POST));
        assert!(post.unwrap().allows(&Method::POST));
        assert!(!post.unwrap().allows(&Method::PUT));
    }

    #[test]
    fn sumdb_paths_of_go_remotes_only() {
        use RemoteKind::*;
        assert_eq!(
            sumdb_path(Go, "sumdb/sum.golang.org/lookup/m@v1.0.0"),
            Some(("sum.golang.org", "lookup/m@v1.0.0"))
        );
        assert_eq!(sumdb_path(Go, "sumdb/sum.golang.org/"), None);
        assert_eq!(sumdb_path(Go, "sumdb//latest"), None);
        assert_eq!(sumdb_path(Generic, "sumdb/sum.golang.org/latest"), None);
        assert!(Go.is_sumdb_supported("sumdb/sum.golang.org/supported"));
        assert!(!Go.is_sumdb_supported("sumdb/sum.golang.org/supported/x"));
        assert!(!Npm.is_sumdb_supported("sumdb/sum.golang.org/supported"));
    }

    #[test]
    fn accept_picks_the_variant_of_documents_only() {
        use RemoteKind::*;
        let accept = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, value.parse().unwrap());
            headers
        };
        for (kind, path, value, suffix) in [
            (Pypi, "simple/six/", "", Some("html")),
            (Pypi, "simple/six/", "text/html", Some("html")),
            (
                Pypi,
                "simple/six/",
                "application/vnd.pypi.simple.v1+json",
                Some("json"),
            ),
            (Npm, "left-pad", "application/json", Some("full")),
            (
                Npm,
                "left-pad",
                "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8",
                Some("abbreviated"),
            ),
            (Npm, "left-pad/-/left-pad-1.0.0.tgz", "", None),
            (Pypi, "~files/packages/six.whl", "", None),
            (Cargo, "config.json", "", None),
            (Pypi, "pypi/six/json", "application/json", None),
        ] {
            let variant = kind.variant(path, &accept(value)).map(|v| v.suffix);
            assert_eq!(variant, suffix, "{kind:?} {path} {value}");
            assert_eq!(kind.variants(path).is_empty(), suffix.is_none());
        }
    }
}
