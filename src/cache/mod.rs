//! The cache room: the thin façade over the bytes ([`crate::store`]) and the
//! rows ([`crate::meta`]), for the one invariant that spans them.
//!
//! [`Cache`] ([`facade`]) holds the content store, the blob backend, the
//! in-memory tier, the metadata store and the striped locks; [`open`] opens
//! them and starts the background tasks. A fill's commit goes through the
//! group commit ([`commit_queue`], [`spool`], [`commit`]); a row is forgotten
//! and its blob released by [`release`]; a purge's rows and blobs are
//! [`purge`]'s; eviction's policy loop (least recently used rows, then their
//! blobs) is [`evict`]'s, its shared state [`evictor`]'s. What documents
//! declare is checked against cached bytes by [`learn`] and pruned by
//! [`prune`] (which re-parses cached documents with `kind`, from above the
//! rows); [`alias`] adds a second row for a stored blob; [`verify`] re-hashes
//! the store offline. The rest of the proxy asks the `Cache` to open,
//! commit and release blobs and never sees a file path.
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

mod alias;
pub mod commit;
mod commit_queue;
pub mod evict;
mod evictor;
mod facade;
pub mod learn;
mod open;
pub mod prune;
pub mod purge;
mod release;
mod spool;
pub mod verify;

pub use commit_queue::{CommitSlot, Committing, FillBody};
pub use evictor::Evictor;
pub use facade::Cache;
pub use learn::Learned;
pub use open::redact_url;
// The types the façade's callers handle, where they live.
pub use crate::meta::{Entry, MetadataStore, Prepared, Scope, Ticket};
pub use crate::store::{Blob, ContentStore, Digest, TempBlob};

#[cfg(test)]
mod tests;
