//! The two facets an ecosystem may have besides [`Ecosystem`](super::Ecosystem):
//! [`Digests`] (which indexes declare which artifacts' digests) and
//! [`Packages`] (names, versions and publish times, for the supply-chain
//! guard). Re-exported from [`kind`](super).

use std::collections::HashMap;

use axum::http::HeaderMap;

use super::declared::{Declared, Document};
use super::guard::{Filtered, Judge, VersionSpec};
use super::package::Artifact;
use super::{CachedAt, TimeSource, TimesFrom};

/// Declared digests: which artifacts an index declares a digest for, and
/// which documents declare them. All default to "none".
pub trait Digests: Send + Sync {
    /// A digest the artifact's own path declares (apt's `by-hash`, an OCI digest).
    fn in_path(&self, _path: &str) -> Option<Declared> {
        None
    }

    /// The name an index declares the digest of the artifact at `path`
    /// under, or `None` when none does (documents, what is not checked).
    /// Usually [`declared::canonical`](super::declared::canonical) of the path.
    fn artifact_key(&self, _path: &str) -> Option<String> {
        None
    }

    /// A digest the mirror's answer head declares for the body at `path`
    /// (the hub's `X-Linked-Etag`), checked like one from an index. Asked
    /// only when nothing else declares one. Default: none.
    fn in_head(&self, _path: &str, _head: &HeaderMap) -> Option<Declared> {
        None
    }

    /// Whether the body at `path` is a document that declares digests.
    fn declares(&self, _path: &str) -> bool {
        false
    }

    /// Every (artifact key, digest) `body`, the document at `document.path`,
    /// declares. Links are located with `document` (kept only on the remote's
    /// own hosts); keys are paths below the remote, not yet normalised.
    fn learn(&self, _document: &Document<'_>, _body: &[u8]) -> Vec<(String, Declared)> {
        Vec::new()
    }

    /// Documents that declare the digest of the artifact at `path` and that
    /// the proxy fetches itself, in the order to ask for them, before the artifact's fill
    /// checks its body, when nothing is declared for it yet (Maven's
    /// sidecars, which clients read only after the file). The first two are
    /// asked for at once, the rest only when neither is there; the strongest
    /// found is kept. Default: none.
    fn declared_by(&self, _path: &str) -> Vec<String> {
        Vec::new()
    }

    /// Whether the immutable artifact at `path`, when nothing declares its
    /// digest, is pinned on first use: the sha256 of its first complete
    /// download is recorded as its declared digest (under its
    /// [`artifact_key`], or its path when it has none), so a later fetch
    /// with other bytes (after eviction, from another mirror) is refused.
    /// Asked only for immutable paths that are not documents and declare
    /// nothing in their address, on remotes with `pin_on_first_use`.
    /// Default: yes. An ecosystem without `Digests` pins too.
    ///
    /// [`artifact_key`]: Digests::artifact_key
    fn pins_on_first_use(&self, _path: &str) -> bool {
        true
    }

    /// Where cached rows of the artifact `artifact` (a key [`artifact_key`]
    /// gave) may be. Default: at the key itself.
    ///
    /// [`artifact_key`]: Digests::artifact_key
    fn cached_at(&self, _artifact: &str) -> CachedAt {
        CachedAt::Path
    }
}

/// Packages and versions: what the supply-chain guard needs to know.
pub trait Packages: Send + Sync {
    /// A name as the ecosystem compares names. Default: as spelt.
    fn normalise(&self, name: &str) -> String {
        name.to_string()
    }

    /// The name a refusal shows for `spelt` (normalised as `normalised`).
    /// Default: as the path spelt it.
    fn shown_name<'a>(&self, spelt: &'a str, _normalised: &'a str) -> &'a str {
        spelt
    }

    /// A version or range in the ecosystem's syntax (after `@` in a rule).
    /// Default: refused, naming the kind.
    fn parse_versions(&self, _text: &str) -> Result<VersionSpec, String> {
        Err("this kind takes package rules without versions only".to_string())
    }

    /// The artifact (package, version, file) `path` downloads.
    fn artifact(&self, path: &str) -> Option<Artifact>;

    /// The package whose document `path` is.
    fn document(&self, path: &str) -> Option<String>;

    /// Publish times a document gives, keyed as [`TimeKey::Listed`](super::TimeKey::Listed) names
    /// them; empty when it gives none. Default: none.
    fn publish_times(&self, _body: &[u8]) -> HashMap<String, i64> {
        HashMap::new()
    }

    /// Where the publish time of `artifact` is read. Default: nowhere.
    fn time_source(&self, _artifact: &Artifact) -> Option<TimeSource> {
        None
    }

    /// For a document of package `name`, in variant `suffix`, that may
    /// lack publish times: where they are, read through the cache under a
    /// cooldown. Another variant of the same path (npm's full packument for
    /// the abbreviated one, pypi's JSON page for the HTML one), or another
    /// document of the remote (rubygems: the versions API). Default:
    /// nowhere.
    fn times_from(&self, _name: &str, _suffix: &str) -> Option<TimesFrom> {
        None
    }

    /// For a document (of package `name`) that has no publish times and no
    /// variant with them: the artifacts whose times date its versions,
    /// newest version first (the proxy reads them until it meets one old
    /// enough, and takes the older ones to be older still). Default: none.
    fn dated_versions(&self, _name: &str, _body: &[u8]) -> Vec<Artifact> {
        Vec::new()
    }

    /// `body`, the document (variant `suffix`) of package `name`, with the
    /// versions `judge` refuses taken out. `times`: publish times from
    /// where [`times_from`](Packages::times_from) says, when it is used. Default:
    /// unchanged.
    fn filter(
        &self,
        _judge: &Judge,
        _name: &str,
        _body: &[u8],
        _times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        Filtered::Unchanged
    }

    /// For an index that lists many packages with a digest of each one's
    /// document (rubygems' `versions`, which lists each gem's versions and
    /// the MD5 of its `info`): every (package, versions listed) in `body`,
    /// in the order listed; `None` when `path` is no such index (asked with
    /// an empty body to learn whether it is one). The proxy
    /// filters each package's document (at [`document_of`]) that the guard
    /// may change and has the index [`restate`]d to match. Default: none.
    ///
    /// [`document_of`]: Packages::document_of
    /// [`restate`]: Packages::restate_index
    fn index_listing(&self, _path: &str, _body: &[u8]) -> Option<Vec<(String, Vec<String>)>> {
        None
    }

    /// The path of the document of package `name`, the inverse of
    /// [`document`](Packages::document). Default: none.
    fn document_of(&self, _name: &str) -> Option<String> {
        None
    }

    /// The index `body` with each package in `restated` listing what its
    /// document as served (filtered) lists, with that document's digest as
    /// the index spells one (rubygems: the MD5 of the `info` served); a
    /// package given `None` (refused whole) is left out. Default: unchanged.
    fn restate_index(
        &self,
        body: Vec<u8>,
        _restated: &HashMap<String, Option<Vec<u8>>>,
    ) -> Vec<u8> {
        body
    }

    /// Whether the client shows a refusal's reason only from the status
    /// line (pip), not the body. Default: no.
    fn reason_in_status_line(&self) -> bool {
        false
    }

    /// The OSV ecosystem whose advisories name this kind's packages
    /// (`npm`, `PyPI`, `crates.io`), for the quarantine. Default: none
    /// (advisories of no ecosystem apply).
    fn osv_ecosystem(&self) -> Option<&'static str> {
        None
    }

    /// How version `a` orders against `b` in the ecosystem's syntax, for
    /// the ranges of advisories; `None` when either does not parse.
    /// Default: cannot compare (only the versions an advisory lists apply).
    fn compare_versions(&self, _a: &str, _b: &str) -> Option<std::cmp::Ordering> {
        None
    }
}
