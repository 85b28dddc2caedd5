//! The cache room: the thin façade over the bytes ([`crate::store`]) and the
//! rows ([`crate::meta`]), for the one invariant that spans them.
//!
//! [`Cache`] ([`facade`]) holds the content store, the blob backend, the
//! in-memory tier, the metadata store and the striped [`locks`]; [`open`]
//! opens them and starts the background tasks. Its methods are the
//! invariant's primitives: a fill's commit through the group commit
//! ([`commit_queue`], [`spool`], [`commit`]), a row forgotten and its blob
//! released ([`release`]). What only composes those primitives is a
//! function of its own module taking the `Cache`: a purge's rows and blobs
//! ([`purge`]), eviction's policy loop (least recently used rows, then
//! their blobs: [`evict`], its shared state [`evictor`]), declared digests
//! checked against cached bytes ([`learn`]) and pruned ([`prune`], which
//! re-parses cached documents with `kind`, from above the rows), a second
//! row for a stored blob ([`alias`]). [`verify`] re-hashes the store
//! offline. The rest of the proxy asks the `Cache` to open, commit and
//! release blobs and never sees a file path.
//!
//! **Invariant:** this room knows nothing of HTTP requests, remotes' mirrors
//! or the fill; it imports `store`, `meta`, `kind` (declared digests and
//! where an artifact's rows may be), `config`, `error`, `path`, `clock` and
//! `metrics`.
//!
//! **Invariant: never a row without its blob.** A blob is committed and its
//! row recorded (a batch of them, [`commit`]), and a blob's references
//! checked and the blob deleted ([`Cache::release_blob`]), each under the
//! lock of the digest's stripe: a release cannot fall between a commit's
//! rename and its row. The same lock makes the size accounting exact
//! ([`crate::store::budget`]).

pub mod alias;
pub mod commit;
mod commit_queue;
mod evict;
mod evictor;
mod facade;
pub mod learn;
mod locks;
mod open;
pub mod prune;
pub mod purge;
mod release;
mod spool;
pub mod verify;

pub use commit_queue::{CommitSlot, Committing, FillBody};
pub use facade::Cache;
// The types the façade's callers handle, where they live.
pub use crate::meta::{Entry, MetadataStore, Prepared, Scope, Ticket};
pub use crate::store::{Blob, ContentStore, Digest, TempBlob};

#[cfg(test)]
mod tests;
