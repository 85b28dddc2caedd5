//! [`Digest`]: a blob's identity, the sha256 of its bytes (what every room
//! holds instead of a path).

use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use sha2::{Digest as _, Sha256};

/// A blob's identity: the sha256 of its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn from_hex(text: &str) -> Option<Digest> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(Digest(out))
    }
}

/// The hasher of maps keyed by [`Digest`]: a digest is a hash already, so
/// its first 8 bytes are the hash (SipHash of the 32 bytes cost each hit on
/// the in-memory tier about 270 instructions). Each `write` sets the hash to
/// its first 8 bytes (zero-padded): the digest's bytes, written after the
/// array's length, are the last.
#[derive(Default, Clone, Copy)]
pub struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut first = [0u8; 8];
        let n = bytes.len().min(8);
        first[..n].copy_from_slice(&bytes[..n]);
        self.0 = u64::from_le_bytes(first);
    }
}

/// Builds [`DigestHasher`]s.
pub type BuildDigestHasher = BuildHasherDefault<DigestHasher>;

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// A digest's hash is its first 8 bytes, whatever the hasher was
    /// given before them (the array's length).
    #[test]
    fn a_digest_hashes_to_its_first_eight_bytes() {
        let digest = Digest::of(b"x");
        let first = u64::from_le_bytes(digest.0[..8].try_into().unwrap());
        assert_eq!(BuildDigestHasher::default().hash_one(digest), first);
    }
}
