//! The store room: the bytes, and nothing about what they are.
//!
//! A blob is known by its [`Digest`]. [`ContentStore`] keeps blobs on local
//! disk ([`content`]: temp files of fills in progress, whose owner dies with
//! its process, [`owner`]; committed blobs at a path read off the tree,
//! [`layout`]; a batch of them made durable at once, the group commit's
//! side). [`BlobStore`] is where committed blobs live: [`LocalBlobs`] (the
//! content store itself) or [`S3Blobs`]; either opens a [`Blob`] to stream.
//! Small blobs are packed together (`content::pack`): a range of a shared file,
//! its place kept in the metadata database for the store ([`PlaceRow`]).
//! [`DigestTable`] holds each digest the process knows once: its size, the
//! packed blob's place, and how many of the entry index's records name it.
//! [`HotBlobs`] keeps small hot blobs in memory, [`HeldFiles`] blob files
//! open for the next hits, `CheckedRanges` where packed blobs were hashed.
//! [`Budget`] counts committed and in-progress bytes against
//! `storage.max_size` and wakes the evictor.
//!
//! **Invariant:** nothing outside this room knows a blob's path; everyone
//! else holds a digest or an open handle. This room imports neither the
//! rows ([`crate::meta`]) nor the façade ([`crate::cache`]): whether a blob
//! may go is decided above it, under the digest's lock.

mod blob;
pub mod blobs;
pub mod budget;
mod content;
mod digest;
mod digest_table;
mod held;
mod hot;
mod layout;
mod owner;
mod s3;

pub use blob::Blob;
pub use blobs::{BlobStore, LocalBlobs};
pub use budget::Budget;
pub use content::batch::BatchBody;
pub use content::pack::{PlaceRow, PlaceRows};
pub use content::{read_at, CommitLock, ContentStore, TempBlob};
pub use digest::Digest;
pub use digest_table::DigestTable;
pub use held::{descriptors_for, HeldFiles, HELD_FOR, LINK_CHECKED_EVERY, RANGES_CHECKED_FROM};
pub use hot::{HotBlobs, ADMIT_WITHIN_MS};
pub use s3::S3Blobs;
