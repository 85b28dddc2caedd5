//! The operators' room: the commands an operator runs beside the server,
//! each a library function that `main` calls and the tests call too.
//!
//! - [`ls`]: what is cached, with size, age, last access and hits.
//! - [`bundle`]: `export` and `import`, a signed bundle of cached entries
//!   carried to another cache (an offline one).
//! - [`token`]: access tokens (`token add|list|revoke`).
//! - [`progress`]: the progress display of long work (`verify`, `warm`): an
//!   indicatif bar on a terminal, plain lines otherwise (CI logs).
//! - [`warm`]: fetches every artifact that lockfiles name through a running
//!   server.
//!
//! The room sits above `cache` and `config` and is imported by nothing but
//! `main`; the dashboard (`/-/`) is a handler and lives in `http`.

pub mod bundle;
pub mod ls;
pub mod progress;
pub mod token;
pub mod warm;
