//! Where packed blobs lie: a blob's place (pack, start, length), the row
//! the metadata database keeps of it for the store, and the database's side
//! ([`PlaceRows`]). Memory keeps the places in the digest table
//! (`crate::store::DigestTable`).

use std::io;

use futures_util::future::BoxFuture;

use crate::store::digest::Digest;

/// Where a packed blob lies: a byte range of one pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub(crate) pack: u64,
    pub(crate) start: u64,
    pub(crate) len: u64,
}

/// A packed blob's place as the metadata database keeps it for the store:
/// numbers it stores and hands back, and never reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaceRow {
    pub digest: Digest,
    pub pack: i64,
    pub start: i64,
    pub length: i64,
}

impl PlaceRow {
    pub(super) fn of(digest: Digest, place: Place) -> PlaceRow {
        PlaceRow {
            digest,
            pack: place.pack as i64,
            start: place.start as i64,
            length: place.len as i64,
        }
    }

    pub(super) fn place(&self) -> Place {
        Place {
            pack: self.pack as u64,
            start: self.start as u64,
            len: self.length as u64,
        }
    }
}

/// Where the places of packed blobs are kept (the metadata database's
/// `blob_places`, keyed by place: see its migration), for what a group
/// commit does not write itself.
///
/// A digest has one row, but where two processes packed it (or it was
/// packed again once its pack was gone): then memory takes the newest
/// place, and the others' bytes count dead once loaded.
///
/// Contract: `forget` deletes the digest's row at `known` (the place
/// memory holds), or without one every row naming the digest (none where
/// memory holds every place, and no index finds a digest's), and returns
/// those it deleted; `moved` moves each row from its first place to its
/// second in one transaction, only where the row still names the first,
/// and says for each whether it did.
pub trait PlaceRows: Send + Sync {
    /// The next rows in the order of their places (pack, start, length) after
    /// `after`'s (from the first without), a page at a time; none past the
    /// last.
    fn page(&self, after: Option<PlaceRow>) -> BoxFuture<'_, io::Result<Vec<PlaceRow>>>;
    /// The newest row of `digest`: a place another process wrote, which
    /// memory does not hold (a scan of the table where the database keeps
    /// no index on digests: see `Database::index_digests`).
    fn lookup(&self, digest: Digest) -> BoxFuture<'_, io::Result<Option<PlaceRow>>>;
    fn in_pack(&self, pack: i64) -> BoxFuture<'_, io::Result<Vec<PlaceRow>>>;
    fn forget(
        &self,
        digest: Digest,
        known: Option<PlaceRow>,
    ) -> BoxFuture<'_, io::Result<Vec<PlaceRow>>>;
    fn moved(&self, moves: Vec<(PlaceRow, PlaceRow)>) -> BoxFuture<'_, io::Result<Vec<bool>>>;
}
