//! The package ecosystems: everything a `kind = "…"` means to the proxy, one
//! module per ecosystem ([`pypi`], [`npm`], [`cargo`], [`apt`], [`go`], [`oci`],
//! [`maven`], [`rpm`], [`rubygems`], [`composer`], [`huggingface`], [`helm`], [`nuget`], [`nix`], [`galaxy`], [`lfs`], [`cran`], [`hex`], [`conda`], [`terraform`], [`conan`], [`generic`]), each implementing [`Ecosystem`] (and, where it has them, the
//! facets [`Digests`] and [`Packages`]); [`Kind`] is the handle the rest of the
//! proxy holds, found by name in the registry below. The rest of the code asks
//! a remote's `Kind` and never matches on which one it is. What a path is
//! comes back as one value, the [`Plan`] (the front end asks once per
//! request), as what a body's digest is does, the [`DigestRole`] (the fill
//! asks once).
//!
//! Shared mechanisms the ecosystems call: [`rewrite`] (re-points a document's
//! URLs at the proxy), [`declared`] (digest values, hashing, link location),
//! [`guard`] (the supply-chain rules and their verdicts), [`package`] (an
//! artifact's identity), [`policy`] (the operator's immutable patterns on top
//! of the ecosystem's).
//!
//! **Invariant:** this room imports nothing else of the crate: it is rules over
//! paths, headers and text, with no state. `config` asks it for defaults and
//! allowed keys; the fill, the cache and the front end ask it about paths and
//! documents.

pub mod advisory;
pub mod apt;
pub mod cargo;
pub mod composer;
pub mod conan;
pub mod conda;
pub mod cran;
pub mod declared;
mod facets;
pub mod galaxy;
pub mod generic;
pub mod go;
pub mod guard;
pub mod helm;
pub mod hex;
pub mod huggingface;
mod interval;
pub mod lfs;
pub mod maven;
pub mod nix;
pub mod npm;
pub mod nuget;
pub mod oci;
pub mod package;
mod plan;
pub mod policy;
pub mod pypi;
pub mod rewrite;
pub mod rpm;
pub mod rubygems;
pub mod terraform;
pub mod unpack;
mod values;

#[cfg(test)]
mod conformance;

use std::fmt;

use axum::http::HeaderMap;

pub use facets::{Digests, Packages};
pub use plan::{AnsweredHere, Etag, Plan, Respelling, Rewritten};
pub use values::{
    keep_headers, kept_headers, variant_by_accept, CachedAt, DigestRole, PassThrough, TimeKey,
    TimeSource, TimesFrom, Variant, VersionPolicy,
};

/// Paths under this prefix are served by the remote's `files` mirrors
/// (`/{remote}/~files/{path}` → `{files_mirror}/{path}`).
pub const FILES_PREFIX: &str = "~files/";

/// One package ecosystem, as the proxy needs to know it. Every method but
/// [`name`](Ecosystem::name) has a default that means "nothing special": no
/// immutable paths, no documents, no variants, no API routes, no extra mirror
/// sets, every common per-remote key accepted, plain HTTP mirrors, and neither
/// declared digests nor packages. Methods take paths below the remote
/// (`simple/six/`, `~files/…`), already normalised by `path`.
pub trait Ecosystem: Send + Sync + 'static {
    /// The `kind = "…"` name.
    fn name(&self) -> &'static str;

    /// What `path` is, in one answer: the front end asks once per request
    /// and reads everything it needs to serve the path from the [`Plan`]
    /// (the key it is cached under, how long it stays, whether it is
    /// rewritten, its variants and the one `request` asks for, its
    /// validator, an API route, a checksum of another path, its snapshot or
    /// release version, the checksum database). `request`: the request's
    /// headers, for the variant (empty when another step asks). Default:
    /// [`Plan::default`], nothing special. Every ecosystem answers from its
    /// own rules; [`Kind::plan`] adds what every ecosystem shares (`~files/`
    /// is immutable, the variant by `Accept`).
    fn plan<'p>(&self, _path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan::default()
    }

    /// The document `text` at `path` as clients get it: its URLs on the
    /// remote's hosts re-pointed at the proxy. Default: [`Rewrite::apply`]
    /// over the text; an ecosystem whose documents need reading first
    /// (Composer's minified JSON, root-relative templates) does its own.
    ///
    /// [`Rewrite::apply`]: rewrite::Rewrite::apply
    fn rewrite(&self, _path: &str, text: &str, rewrite: &rewrite::Rewrite) -> String {
        rewrite.apply(text)
    }

    /// Other paths of the remote whose stored bytes the rewrite of the
    /// document at `path` (`body`, as stored) needs: the proxy reads them
    /// through its cache and hands them to [`rewrite_body`]. Default: none.
    ///
    /// [`rewrite_body`]: Ecosystem::rewrite_body
    fn rewritten_with(&self, _path: &str, _body: &[u8]) -> Vec<String> {
        Vec::new()
    }

    /// The document `body` at `path` as clients get it, given `others` (each
    /// path [`rewritten_with`] named that could be read, with its stored
    /// bytes). Default: a UTF-8 body through [`rewrite`], any other as it is.
    ///
    /// [`rewritten_with`]: Ecosystem::rewritten_with
    /// [`rewrite`]: Ecosystem::rewrite
    fn rewrite_body(
        &self,
        path: &str,
        body: Vec<u8>,
        rewrite: &rewrite::Rewrite,
        _others: &[(String, Vec<u8>)],
    ) -> Vec<u8> {
        match String::from_utf8(body) {
            Ok(text) => self.rewrite(path, &text, rewrite).into_bytes(),
            Err(e) => e.into_bytes(),
        }
    }

    /// Whether `GET`/`HEAD /{remote}/` (no path below the remote) answers an
    /// empty 200 from the proxy itself (gem 3.3 probes the source's root and
    /// uses the compact index only when it answers). Default: no (a 400).
    fn answers_root(&self) -> bool {
        false
    }

    /// The document at `path`, of a remote that needs credentials, as the
    /// client must see it to send them with every request (cargo:
    /// `"auth-required": true` in `config.json`). Default: unchanged.
    fn mark_private(&self, _path: &str, body: Vec<u8>) -> Vec<u8> {
        body
    }

    /// The response headers of the mirror's answer for `path` that are kept
    /// with the cached entry and sent with every answer for it (GET and
    /// HEAD, miss, hit and stale), lower-case names. Absolute URLs on the
    /// remote's hosts in them are re-pointed at the proxy (a `Link` to the
    /// next page). When the mirror redirects to a `files` host
    /// ([`Protocol::SignedRedirects`]) they are taken from the mirror's own
    /// answers, not the files host's: they describe the file, not a CDN's
    /// copy of it. A kept `etag` replaces the proxy's own. Default: none.
    fn kept_headers(&self, _path: &str) -> &'static [&'static str] {
        &[]
    }

    /// The public registry's separate download host(s), the default of `files`.
    fn default_files(&self) -> &'static [&'static str] {
        &[]
    }

    /// The registry hostnames a remote serves by default (the `hostnames`
    /// key): the first segment of a path whose plan names a
    /// [`registry_host`](Plan::registry_host). Default: none.
    fn default_hostnames(&self) -> &'static [&'static str] {
        &[]
    }

    /// The path the remote's index mirrors are asked for when the body
    /// served at `path` is made from another upstream document (terraform's
    /// network mirror documents, made from the registry's version list),
    /// stored under `path` as fetched and made into its answer by
    /// [`rewrite_body`](Ecosystem::rewrite_body). Default: `None`, the path
    /// itself.
    fn upstream_path(&self, _path: &str) -> Option<String> {
        None
    }

    /// The default `sumdb` mirrors (only go has a checksum database).
    fn default_sumdb(&self) -> &'static [&'static str] {
        &[]
    }

    /// Why this ecosystem refuses the per-remote key `key` when it is set
    /// (the message `check` prints), or `None` when it takes it. Default:
    /// [`standard_refusal`]: `sumdb` and `registry` belong to go and oci,
    /// `require_declared_hash` needs [`Digests`] that declare, `deny` and
    /// `allow` need [`Packages`].
    fn refuses_key(&self, key: &str) -> Option<String> {
        standard_refusal(self.name(), self.digests(), self.packages(), key)
    }

    /// How the remote's mirrors are spoken to. Default: plain HTTP.
    fn protocol(&self) -> Protocol {
        Protocol::Plain
    }

    /// The digests this ecosystem declares for its artifacts, if any.
    fn digests(&self) -> Option<&dyn Digests> {
        None
    }

    /// How this ecosystem names packages and versions, if it does (the
    /// supply-chain guard's `deny`, `allow` and `min_release_age` need it).
    fn packages(&self) -> Option<&dyn Packages> {
        None
    }

    /// The rows every ecosystem's conformance test checks.
    #[cfg(test)]
    fn conformance(&self) -> conformance::Rows;
}

/// How a remote's mirrors are spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Plain GETs with the remote's credentials; redirects followed only to
    /// the remote's own hosts.
    Plain,
    /// An OCI distribution registry: also served at `/v2/…`; credentials go
    /// to the registry's token service, and blob redirects to storage hosts
    /// (a CDN, S3) are followed anywhere, without credentials.
    Registry,
    /// Plain GETs, but a mirror's redirect is followed by the proxy itself,
    /// hop by hop: to the remote's mirrors with its credentials, to its
    /// `files` hosts without (the signed URL, query and all, is the
    /// authority there), nowhere else. The [`kept_headers`] come from the
    /// mirror's answers; a revalidation whose redirect carries the cached
    /// copy's `ETag` is a 304 without following it.
    ///
    /// [`kept_headers`]: Ecosystem::kept_headers
    SignedRedirects,
    /// Git LFS: an object is fetched from the download action the batch
    /// answer named for it (`upstream::lfs::Actions`), with that action's
    /// headers and none of the remote's credentials, to wherever a
    /// registry's blob redirect may go (`LeaveFor`); there is no object URL
    /// on the mirrors.
    LfsActions,
}

/// The default [`Ecosystem::refuses_key`].
pub fn standard_refusal(
    kind: &str,
    digests: Option<&dyn Digests>,
    packages: Option<&dyn Packages>,
    key: &str,
) -> Option<String> {
    match key {
        "sumdb" => Some("only a go remote has a checksum database".to_string()),
        "registry" => Some("only an oci remote answers for a registry host".to_string()),
        "hostnames" => Some(format!("{kind} remotes serve no registry hostnames")),
        "lfs_uploads" | "lfs_grant_ttl" => {
            Some("only an lfs remote answers LFS batches".to_string())
        }
        "version_policy" => Some(format!(
            "{kind} remotes do not tell snapshots from releases"
        )),
        "require_declared_hash" if digests.is_none() => Some(format!(
            "{kind} remotes have no index that declares digests"
        )),
        "deny" | "allow" if packages.is_none() => {
            let with: Vec<&str> = Kind::all()
                .filter(|k| k.packages().is_some())
                .map(Kind::name)
                .collect();
            Some(format!(
                "a {kind} remote cannot tell packages apart; `deny` and `allow` take {} remotes",
                english_list(&with)
            ))
        }
        "quarantine" | "quarantine_allow" | "quarantine_since" if packages.is_none() => {
            Some(no_packages(kind, key))
        }
        _ => None,
    }
}

/// Why a kind without [`Packages`] refuses the quarantine keys.
fn no_packages(kind: &str, key: &str) -> String {
    let with: Vec<&str> = Kind::all()
        .filter(|k| k.packages().is_some())
        .map(Kind::name)
        .collect();
    format!(
        "a {kind} remote cannot tell packages apart; `{key}` takes {} remotes",
        english_list(&with)
    )
}

/// `a, b and c`.
fn english_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The registry: every ecosystem, in the order `check` lists them.
static ECOSYSTEMS: [&dyn Ecosystem; 22] = [
    &generic::Generic,
    &pypi::Pypi,
    &npm::Npm,
    &cargo::Cargo,
    &apt::Apt,
    &go::Go,
    &oci::Oci,
    &maven::Maven,
    &rpm::Rpm,
    &rubygems::Rubygems,
    &composer::Composer,
    &huggingface::Huggingface,
    &helm::Helm,
    &nuget::Nuget,
    &nix::Nix,
    &galaxy::Galaxy,
    &cran::Cran,
    &hex::Hex,
    &conda::Conda,
    &terraform::Terraform,
    &lfs::Lfs,
    &conan::Conan,
];

/// A remote's ecosystem: a handle on one registered [`Ecosystem`], with the
/// rules every ecosystem shares on top.
#[derive(Clone, Copy)]
pub struct Kind(&'static dyn Ecosystem);

impl Kind {
    /// The ecosystem a `kind = "…"` names.
    pub fn named(name: &str) -> Option<Kind> {
        Kind::all().find(|k| k.name() == name)
    }

    pub fn all() -> impl Iterator<Item = Kind> {
        ECOSYSTEMS.iter().map(|e| Kind(*e))
    }

    pub fn name(self) -> &'static str {
        self.0.name()
    }

    pub fn ecosystem(self) -> &'static dyn Ecosystem {
        self.0
    }

    /// What `path` is, for a request with headers `request`: the
    /// ecosystem's [`Ecosystem::plan`], with every `~files/` path immutable
    /// (the files hosts of pypi and crates.io serve content-addressed or
    /// versioned files only) and, when the ecosystem picks none, the variant
    /// whose media type `Accept` names ([`variant_by_accept`]).
    pub fn plan<'p>(self, path: &'p str, request: &HeaderMap) -> Plan<'p> {
        let mut plan = self.0.plan(path, request);
        plan.immutable |= path.starts_with(FILES_PREFIX);
        if plan.variant.is_none() {
            plan.variant = variant_by_accept(plan.variants, request);
        }
        plan
    }

    /// Whether `path` never changes once published ([`Plan::immutable`]),
    /// for a step that has no request (the fill, the cache policy).
    pub fn is_immutable(self, path: &str) -> bool {
        path.starts_with(FILES_PREFIX) || self.0.plan(path, &HeaderMap::new()).immutable
    }

    /// Every variant `path` is cached as ([`Plan::variants`]), for a step
    /// that has no request (a purge, the guard's sibling documents).
    pub fn variants(self, path: &str) -> &'static [Variant] {
        self.0.plan(path, &HeaderMap::new()).variants
    }

    /// For paths served by the remote's `sumdb` mirrors: the database's
    /// name and the path within it ([`Plan::sumdb`]), for the mirror choice.
    pub fn sumdb_path(self, path: &str) -> Option<(&str, &str)> {
        self.0.plan(path, &HeaderMap::new()).sumdb
    }

    pub fn packages(self) -> Option<&'static dyn Packages> {
        self.0.packages()
    }

    pub fn digests(self) -> Option<&'static dyn Digests> {
        self.0.digests()
    }

    /// What the remote's `guard` must check for `path` (its `plan`), in one
    /// answer: `None` when the guard refuses nothing or the ecosystem cannot
    /// tell packages apart.
    pub fn guard_checks(
        self,
        guard: &guard::GuardConfig,
        path: &str,
        plan: &Plan<'_>,
        now_ms: i64,
        advisories: &[std::sync::Arc<advisory::AdvisoryIndex>],
    ) -> Option<guard::Checks> {
        if !guard.is_active() {
            return None;
        }
        Some(guard::checks(
            guard,
            self.packages()?,
            path,
            plan,
            now_ms,
            advisories,
        ))
    }

    /// Everything the ecosystem says about the digest of the body at `path`,
    /// in one answer: what the fill asks once.
    pub fn digest_role(self, path: &str) -> DigestRole {
        match self.digests() {
            None => DigestRole {
                pins_on_first_use: true,
                ..DigestRole::default()
            },
            Some(digests) => DigestRole {
                in_path: digests.in_path(path),
                artifact_key: digests.artifact_key(path),
                declares: digests.declares(path),
                pins_on_first_use: digests.pins_on_first_use(path),
            },
        }
    }

    /// The name an index declares `path`'s digest under, if any.
    pub fn artifact_key(self, path: &str) -> Option<String> {
        self.digests()?.artifact_key(path)
    }
}

impl PartialEq for Kind {
    fn eq(&self, other: &Kind) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Kind {}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn every_kind_is_found_by_its_name_once() {
        let names: Vec<&str> = Kind::all().map(Kind::name).collect();
        assert_eq!(
            names,
            [
                "generic",
                "pypi",
                "npm",
                "cargo",
                "apt",
                "go",
                "oci",
                "maven",
                "rpm",
                "rubygems",
                "composer",
                "huggingface",
                "helm",
                "nuget",
                "nix",
                "galaxy",
                "cran",
                "hex",
                "conda",
                "terraform",
                "lfs",
                "conan"
            ]
        );
        for name in names {
            assert_eq!(Kind::named(name).map(Kind::name), Some(name));
        }
        assert!(Kind::named("maven2").is_none());
    }

    #[test]
    fn pass_through_methods() {
        let (post, get) = (PassThrough { post: true }, PassThrough { post: false });
        assert!(get.allows(&Method::HEAD));
        assert!(!get.allows(&Method::POST));
        assert!(post.allows(&Method::POST));
        assert!(!post.allows(&Method::PUT));
    }

    #[test]
    fn keys_of_other_kinds_are_refused_with_a_reason() {
        let refusal = |kind: &str, key: &str| Kind::named(kind).unwrap().0.refuses_key(key);
        assert_eq!(refusal("go", "sumdb"), None);
        assert!(refusal("npm", "sumdb")
            .unwrap()
            .contains("only a go remote"));
        assert_eq!(refusal("oci", "registry"), None);
        assert!(refusal("pypi", "registry").is_some());
        assert!(refusal("oci", "bearer_token").is_some());
        assert_eq!(refusal("npm", "bearer_token"), None);
        assert_eq!(
            refusal("apt", "deny").unwrap(),
            "a apt remote cannot tell packages apart; `deny` and `allow` take pypi, npm, cargo, go, maven, rubygems, composer, helm, nuget, galaxy, cran, hex, conda, terraform and conan remotes"
        );
        assert!(refusal("generic", "require_declared_hash").is_some());
        assert!(refusal("go", "require_declared_hash").is_some());
        assert_eq!(refusal("apt", "require_declared_hash"), None);
        assert_eq!(refusal("oci", "require_declared_hash"), None);
    }
}
