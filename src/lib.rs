//! mirrorcache: a multi-mirror artifact caching reverse proxy.
//!
//! The top-level modules are rooms along a request's path (ARCHITECTURE.md
//! has the map, and `.ci/modcheck.py` keeps the arrows pointing one way):
//! - [`http`] accepts connections ([`http::server`]), routes, and answers: a
//!   hit straight from [`cache`], a miss by joining a [`fill`].
//! - [`fill`] runs one upstream fetch per cold key and streams it to every
//!   waiting client while writing it to the cache.
//! - [`upstream`] is the remotes' runtime: mirror selection, health, the
//!   fetch with failover, probes.
//! - [`cache`] is the thin façade over the bytes and the rows, for the
//!   invariant that spans them (never a row without its blob): commit,
//!   release, purge, eviction's loop, verify.
//! - [`store`] holds the bytes: the content store on disk, blob backends
//!   (local, S3), the in-memory tier, the size budget, the digest table
//!   (each digest once: packed blobs' places, and the entry index's counts
//!   of the records naming it); it imports neither `meta` nor `cache`.
//! - [`meta`] holds the rows: the metadata database (SQLite, Postgres), the
//!   entry index (naming digests by number in the store's digest table),
//!   purge generations, declared digests and pins, Redis coordination; it
//!   takes `Digest`, the place rows and the digest table from `store`.
//! - [`kind`] holds the package managers' rules: immutable paths, documents,
//!   variants, URL rewriting, the cache policy.
//! - [`access`] says who is asking: credentials checked against the
//!   htpasswd users and the token table, cached, failures limited per peer;
//!   `http::access` is the one place a request is let through or refused.
//! - [`proxy`] wires the rooms together from a validated [`config`];
//!   [`metrics`], [`error`], [`path`], [`clock`] and [`dense`] (the
//!   record table of the entry index and the packs' places) are leaves
//!   every room may use,
//!   and [`history`] the dashboard's per-minute rings the proxy samples into;
//!   [`logline`] is the request log line (written straight to the
//!   buffer in the text format), and [`logbuf`] the buffer the server's
//!   log lines wait in; [`documents`] the tier of index documents built
//!   once (filtered and rewritten) that the front end serves them from.
//! - [`ops`] holds the operators' commands beside the server (`ls`, `warm`,
//!   `token`, bundles and their rows, the progress display of `verify`);
//!   only `main` imports it.
//! - [`advisories`] keeps the OSV feeds the remotes' `quarantine` judges
//!   by: fetched, saved under the storage path, swapped in whole.

pub mod access;
pub mod advisories;
pub mod cache;
pub mod clock;
pub mod config;
pub mod dense;
pub mod documents;
pub mod error;
pub mod fill;
pub mod history;
pub mod http;
pub mod kind;
pub mod logbuf;
pub mod logline;
pub mod meta;
pub mod metrics;
pub mod ops;
pub mod path;
pub mod proxy;
pub mod store;
pub mod upstream;

/// The unit tests' repeatable random numbers.
#[cfg(test)]
mod test_rng;
