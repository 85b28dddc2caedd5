//! What one path is to its ecosystem, in one value: the [`Plan`] the front
//! end asks for once per request ([`Kind::plan`](super::Kind::plan)), the
//! way the fill asks for a [`DigestRole`](super::DigestRole) once.

use super::declared::Algo;
use super::{PassThrough, Variant};

/// Everything the front end needs to know about a path before it looks in
/// the cache: the key it is cached under, how long it stays, whether it is rewritten, which variant the
/// request asks for, how its validator is made, and whether it is served
/// through the cache at all (an API route, a checksum of another path, the
/// checksum database's `supported`). Borrows the path; `Copy` and small, so
/// a hit computes it once and allocates nothing for it.
///
/// [`Plan::default`] means "nothing special": a mutable artifact, served as
/// stored, not content-negotiated, validated by its sha256, cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan<'p> {
    /// Never changes once published: cached forever, never revalidated.
    /// (`~files/` paths are immutable for every kind: [`Kind::plan`] says
    /// so on top of the ecosystem's answer.)
    ///
    /// [`Kind::plan`]: super::Kind::plan
    pub immutable: bool,
    /// Whether the body is a document whose absolute URLs are re-pointed at
    /// the proxy.
    pub document: Rewritten,
    /// Every variant the path is cached as, the default first; empty when it
    /// is not content-negotiated. Such answers carry `Vary: Accept`.
    pub variants: &'static [Variant],
    /// The variant the request asks for. An ecosystem that leaves it `None`
    /// gets [`variant_by_accept`](super::variant_by_accept) over `variants`
    /// from [`Kind::plan`](super::Kind::plan).
    pub variant: Option<Variant>,
    /// How the answer's validator is made.
    pub etag: Etag,
    /// The API endpoint the path is, if it is one: forwarded uncached with
    /// its query string (searches, audits).
    pub pass_through: Option<PassThrough>,
    /// For a checksum file of another path (Maven's `x.jar.sha1`): that path
    /// and the function. The proxy answers it from the other path's bytes as
    /// it serves them (filtered, for a document), so a file and its checksum
    /// never disagree, and a checksum the mirror lacks is still answered.
    pub checksum_of: Option<(&'p str, Algo)>,
    /// Whether the path belongs to a snapshot (`Some(true)`) or a release
    /// (`Some(false)`) version, for the remote's `version_policy`; `None`
    /// when it belongs to neither (an index of all versions).
    pub snapshot: Option<bool>,
    /// For paths served by the remote's `sumdb` mirrors: the database's name
    /// and the path within it.
    pub sumdb: Option<(&'p str, &'p str)>,
    /// The one spelling the path is cached and fetched under, when the
    /// ecosystem has two for the same thing that the path normalisation
    /// keeps apart (npm: `@scope/name` is `@scope%2Fname`). The plan of the
    /// respelled path is this plan, less the respelling.
    pub respelled: Option<Respelling>,
    /// Whether the request's query string is forwarded to the mirror and is
    /// part of the cache key (an API document whose query selects what it
    /// lists). The plan of the path with its query is this plan.
    pub query_in_key: bool,
    /// The registry host the path names as its first segment (terraform's
    /// network mirror protocol: `{hostname}/{namespace}/{type}/…`): a host
    /// not among the remote's `hostnames` is 404 without asking upstream.
    pub registry_host: Option<&'p str>,
    /// A path the proxy answers itself and never asks a mirror for: a
    /// login, which a mirror would answer for the remote's own credentials,
    /// or an API the kind does not serve (conan 1's, whose download URLs
    /// point at the mirror).
    pub answered_here: Option<AnsweredHere>,
}

/// What the proxy answers itself for a login path ([`Plan::answered_here`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnsweredHere {
    /// Nothing there: 404.
    NotFound,
    /// A login that trades Basic credentials for a bearer token (conan's
    /// `v2/users/authenticate`): a caller whose password is one of this
    /// proxy's tokens gets it back as the token to send, which the proxy
    /// takes as `Bearer`; a caller with a password is refused (403, saying
    /// to log in with a token); an anonymous one gets 404.
    TokenLogin,
    /// Whether the credentials sent hold (conan's
    /// `v2/users/check_credentials`): the user's name, else 401.
    Whoami,
}

/// Another spelling of a path: its `len` bytes at `at` replaced by `with`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Respelling {
    pub at: usize,
    pub len: usize,
    pub with: &'static str,
}

impl Respelling {
    /// `path` as respelled.
    pub fn apply(self, path: &str) -> String {
        let mut respelled = String::with_capacity(path.len() - self.len + self.with.len());
        respelled.push_str(&path[..self.at]);
        respelled.push_str(self.with);
        respelled.push_str(&path[self.at + self.len..]);
        respelled
    }
}

/// Whether a path's body is rewritten on the way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rewritten {
    /// Served as stored.
    #[default]
    Never,
    /// An index document: its URLs on the remote's hosts re-pointed at the
    /// proxy, on every remote.
    Always,
    /// A document on a remote that has `files` mirrors, served as stored on
    /// one that has none: rpm's `primary.xml`, whose `xml:base` locations are
    /// re-pointed at the proxy, and `repomd.xml`, which then restates that
    /// file's checksum and size.
    WithFiles,
}

impl Rewritten {
    /// An index document ([`Rewritten::Always`]) when `document`, else
    /// served as stored.
    pub fn when(document: bool) -> Rewritten {
        if document {
            Rewritten::Always
        } else {
            Rewritten::Never
        }
    }
}

/// How the validator (`ETag`) of a path's answer is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Etag {
    /// The quoted sha256 of the blob (qualified by the body served, for a
    /// rewritten or filtered one).
    #[default]
    Sha256,
    /// The quoted MD5 of the whole body served (after any filter), with byte
    /// ranges cut from that whole body and carrying the same ETag: Bundler
    /// appends to its copy of the compact index with `Range: bytes=<size-1>-`
    /// and keeps the result only when its MD5 is the ETag. Such a body is
    /// read whole before it is served.
    WholeMd5,
}

impl Plan<'_> {
    /// Whether the body is rewritten on a remote that has (`with_files`) or
    /// has no `files` mirrors.
    pub fn is_document(&self, with_files: bool) -> bool {
        match self.document {
            Rewritten::Never => false,
            Rewritten::Always => true,
            Rewritten::WithFiles => with_files,
        }
    }

    /// Whether the path is the GOPROXY protocol's `sumdb/{db}/supported`,
    /// which a proxy that serves the checksum database answers 200 itself.
    pub fn is_sumdb_supported(&self) -> bool {
        self.sumdb.is_some_and(|(_, rest)| rest == "supported")
    }
}
