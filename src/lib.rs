//! mirrorcache: a multi-mirror artifact caching reverse proxy.
//!
//! The modules follow a request's path:
//! - [`server`] accepts connections and hands requests to [`http`], the axum
//!   router, whose artifact handler checks the path ([`path`]) and finds the
//!   remote.
//! - On a hit, [`meta`] (an in-memory cache over SQLite/Postgres) names the
//!   blob, [`policy`] says it is fresh, and [`store`] streams it from disk.
//! - On a miss, [`fill`] runs one upstream fetch per key: [`select`] orders the
//!   remote's mirrors, [`upstream`] fetches with failover, and the body is
//!   written to the store and streamed to every waiting client at once.
//! - [`cluster`] coordinates instances through Redis (artifact locks, shared
//!   entries, invalidations) when configured.
//! - [`health`] learns which mirrors are failing and ejects them for a while;
//!   [`evict`] keeps the store under its size limit; [`metrics`] counts.
//! - [`config`] reads and validates the TOML file; [`proxy`] holds the shared
//!   state built from it; [`remote`] is one remote's runtime; [`error`] holds
//!   the error types and the one mapping to HTTP statuses.

pub mod blobs;
pub mod cluster;
pub mod config;
pub mod error;
pub mod evict;
pub mod fill;
pub mod health;
pub mod http;
pub mod kind;
pub mod meta;
pub mod metrics;
pub mod path;
pub mod policy;
pub mod proxy;
pub mod remote;
pub mod rewrite;
pub mod select;
pub mod server;
pub mod store;
pub mod upstream;
pub mod verify;
