//! The values the ecosystem trait's methods answer with (`kind/mod.rs` has
//! the trait, the registry and `Kind`): variants and API routes, where
//! publish times and cached rows are, what a path's digest is, and which
//! versions a remote serves.

use axum::http::{header, HeaderMap, Method};

use super::declared::Declared;

/// Where the cached rows of an artifact key may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CachedAt {
    /// The key is the path.
    Path,
    /// Any path matching one of these SQL `LIKE` patterns (lower case),
    /// `group` naming what they share, so that one query serves all keys of
    /// a group (cargo: every version of a crate).
    Like {
        group: String,
        patterns: Vec<String>,
    },
}

/// Where an artifact's publish time is read: a document of the same remote
/// (in one variant), and where in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeSource {
    pub document: String,
    pub suffix: &'static str,
    pub key: TimeKey,
}

/// Where a document that may lack publish times has them
/// ([`Packages::times_from`](super::Packages::times_from)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimesFrom {
    /// The variant of the same path with this suffix.
    Variant(&'static str),
    /// Another document of the remote, at this path.
    Document(String),
}

/// Where a document gives an artifact's publish time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeKey {
    /// Under this key of its [`Packages::publish_times`](super::Packages::publish_times).
    Listed(String),
    /// The `Last-Modified` the mirror sent with it (Maven's `.pom`).
    LastModified,
}

/// Which versions a remote serves (`version_policy`), for ecosystems that
/// tell snapshots from releases ([`Plan::snapshot`](super::Plan::snapshot)); the other
/// kind is 404 without asking upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VersionPolicy {
    Releases,
    Snapshots,
    #[default]
    Both,
}

impl VersionPolicy {
    pub fn parse(text: &str) -> Result<VersionPolicy, String> {
        match text {
            "releases" => Ok(VersionPolicy::Releases),
            "snapshots" => Ok(VersionPolicy::Snapshots),
            "both" => Ok(VersionPolicy::Both),
            _ => Err(format!(
                "{text:?} is not a version policy: \"releases\", \"snapshots\" or \"both\""
            )),
        }
    }

    /// Whether a path of a snapshot (`Some(true)`), of a release, or of
    /// neither (`None`) is served.
    pub fn allows(self, snapshot: Option<bool>) -> bool {
        !matches!(
            (self, snapshot),
            (VersionPolicy::Releases, Some(true)) | (VersionPolicy::Snapshots, Some(false))
        )
    }
}

/// What the ecosystem says about the digest of one path's body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DigestRole {
    /// The digest the path itself declares.
    pub in_path: Option<Declared>,
    /// The name indexes declare its digest under.
    pub artifact_key: Option<String>,
    /// Whether the body declares digests of other artifacts.
    pub declares: bool,
    /// Whether the artifact, when immutable and nothing declares its
    /// digest, is pinned on first use (`Digests::pins_on_first_use`; yes
    /// without `Digests`).
    pub pins_on_first_use: bool,
}

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

/// One variant of a content-negotiated document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// Cache-key suffix (`path?suffix`).
    pub suffix: &'static str,
    /// The `Accept` header the mirror is asked with.
    pub accept: &'static str,
}

/// The variant of `variants` whose (first) media type `Accept` names, else
/// the first; `None` when there are none.
pub fn variant_by_accept(variants: &'static [Variant], request: &HeaderMap) -> Option<Variant> {
    let accept = request
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (default, others) = variants.split_first()?;
    let asked = others
        .iter()
        .find(|v| accept.contains(v.accept.split(',').next().unwrap_or(v.accept)));
    Some(*asked.unwrap_or(default))
}

/// The headers of `head` that `names` ([`Ecosystem::kept_headers`]) lists,
/// as the metadata keeps them: one `name: value` line each, in the order of
/// `names`; `None` when none is there or a value is not text.
///
/// [`Ecosystem::kept_headers`]: super::Ecosystem::kept_headers
pub fn keep_headers(names: &[&str], head: &HeaderMap) -> Option<String> {
    let mut text = String::new();
    for name in names {
        for value in head.get_all(*name) {
            let value = value.to_str().ok()?;
            text.push_str(name);
            text.push_str(": ");
            text.push_str(value);
            text.push('\n');
        }
    }
    (!text.is_empty()).then_some(text)
}

/// The (name, value) pairs [`keep_headers`] wrote.
pub fn kept_headers(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines().filter_map(|line| line.split_once(": "))
}
