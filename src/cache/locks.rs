//! [`Locks`]: the striped locks "never a row without its blob" rests on (a
//! commit holds its paths' and digests' from reading the rows it replaces to
//! writing its own; a release holds the digest's across the reference check
//! and the deletion), and the size accounting's. Every holder of several
//! takes them in one order: `accounting`, then paths, then digests, each
//! set in ascending stripe order.

use tokio::sync::{Mutex, MutexGuard, RwLock};

use crate::path::ArtifactPath;
use crate::store::Digest;

/// Stripes of the path lock: enough that unrelated commits rarely wait on
/// each other, few enough to cost nothing.
const PATH_STRIPES: usize = 64;
/// Stripes of the digest lock, one per value of a digest's first two
/// bytes: the blobs of one batch are committed while the previous batch
/// holds the locks of its digests (`commit`), and two batches of 128
/// digests share a stripe one time in five (with 64 stripes, always).
/// About 3 MiB.
const DIGEST_STRIPES: usize = 1 << 16;

pub(crate) struct Locks {
    /// One lock per stripe of digests, held across a commit and its row, and
    /// across a reference check and the deletion. Tokio mutexes: they are
    /// held across awaits (the upload, the queries).
    digests: Box<[Mutex<()>]>,
    /// One lock per stripe of paths, held by a commit from reading the row
    /// it replaces to writing its own, so two commits of one path cannot
    /// both miss the other's digest (and leave it unreleased). Taken before
    /// the digest's lock.
    paths: Box<[Mutex<()>]>,
    /// Held shared by every change of the committed count, exclusively while
    /// it is re-derived from the database, so no change is lost or counted
    /// twice by a re-derivation.
    pub(crate) accounting: RwLock<()>,
}

impl Default for Locks {
    fn default() -> Locks {
        Locks {
            digests: (0..DIGEST_STRIPES).map(|_| Mutex::new(())).collect(),
            paths: (0..PATH_STRIPES).map(|_| Mutex::new(())).collect(),
            accounting: RwLock::new(()),
        }
    }
}

impl Locks {
    pub(crate) fn path_stripe(&self, path: &ArtifactPath) -> usize {
        self.key_stripe(path.key())
    }

    pub(crate) fn key_stripe(&self, key: &str) -> usize {
        // FNV-1a: any spread will do.
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        hash as usize % self.paths.len()
    }

    fn digest_stripe(&self, digest: &Digest) -> usize {
        u16::from_le_bytes([digest.0[0], digest.0[1]]) as usize % self.digests.len()
    }

    pub(crate) fn digest(&self, digest: &Digest) -> &Mutex<()> {
        &self.digests[self.digest_stripe(digest)]
    }

    /// The paths' locks of `stripes` ([`Locks::path_stripe`]), in the one
    /// order every holder of several takes them (see [`lock_stripes`]).
    pub(crate) async fn lock_paths(&self, stripes: Vec<usize>) -> Vec<MutexGuard<'_, ()>> {
        lock_stripes(&self.paths, stripes).await
    }

    /// The digests' locks of `digests`, in the one order (see [`lock_stripes`]).
    pub(crate) async fn lock_digests<'d>(
        &self,
        digests: impl IntoIterator<Item = &'d Digest>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let stripes = digests.into_iter().map(|d| self.digest_stripe(d)).collect();
        lock_stripes(&self.digests, stripes).await
    }

    /// How many stripes the paths' locks have (a purge of more than a key
    /// takes them all).
    pub(crate) fn path_stripes(&self) -> usize {
        self.paths.len()
    }
}

/// The locks of `stripes` in `locks`, each once, in ascending order: the one
/// order every holder of several takes them in, so no two deadlock.
async fn lock_stripes(locks: &[Mutex<()>], mut stripes: Vec<usize>) -> Vec<MutexGuard<'_, ()>> {
    stripes.sort_unstable();
    stripes.dedup();
    let mut guards = Vec::with_capacity(stripes.len());
    for stripe in stripes {
        guards.push(locks[stripe].lock().await);
    }
    guards
}
