//! [`Digest`]: a blob's identity, the sha256 of its bytes (what every room
//! holds instead of a path).

use std::fmt;
use std::hash::{BuildHasher, Hasher};

use sha2::{Digest as _, Sha256};

/// A blob's identity: the sha256 of its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    pub fn to_hex(&self) -> String {
        crate::kind::declared::lower_hex(&self.0)
    }

    pub fn from_hex(text: &str) -> Option<Digest> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(Digest(out))
    }
}

/// The hasher of maps keyed by [`Digest`]: a digest is a hash already, so
/// its first 8 bytes, mixed with the process's two random keys (one
/// multiply), are the hash; SipHash of the 32 bytes cost each hit on the
/// in-memory tier about 270 instructions. Keyed, so bytes ground at an
/// origin to share a digest's low bits do not share a bucket. Each
/// `write` sets the value to its first 8 bytes (zero-padded): a digest's
/// bytes, written after the array's length, are the last.
#[derive(Clone, Copy)]
pub(crate) struct DigestHasher {
    keys: (u64, u64),
    value: u64,
}

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        let folded = u128::from(self.value ^ self.keys.0) * u128::from(self.keys.1);
        (folded as u64) ^ ((folded >> 64) as u64)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut first = [0u8; 8];
        let n = bytes.len().min(8);
        first[..n].copy_from_slice(&bytes[..n]);
        self.value = u64::from_le_bytes(first);
    }
}

/// Builds [`DigestHasher`]s with keys drawn once (the standard library's
/// random seed); the second key is odd, so the multiply loses nothing.
#[derive(Clone, Copy)]
pub(crate) struct BuildDigestHasher((u64, u64));

impl Default for BuildDigestHasher {
    fn default() -> BuildDigestHasher {
        let random = || std::collections::hash_map::RandomState::new().hash_one(0u8);
        BuildDigestHasher((random(), random() | 1))
    }
}

impl BuildHasher for BuildDigestHasher {
    type Hasher = DigestHasher;

    fn build_hasher(&self) -> DigestHasher {
        DigestHasher {
            keys: self.0,
            value: 0,
        }
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn a_digest_is_written_and_read_as_lower_case_hex() {
        let digest = Digest::of(b"mirrorcache");
        let text = digest.to_hex();
        assert_eq!(text, hex::encode(digest.0));
        assert_eq!(Digest::from_hex(&text), Some(digest));
    }

    /// A digest's hash is decided by its first 8 bytes, whatever the hasher
    /// was given before them (the array's length), and by the keys.
    #[test]
    fn a_digest_hashes_by_its_first_eight_bytes_and_the_keys() {
        let build = BuildDigestHasher::default();
        let (a, mut b) = (Digest::of(b"x"), Digest::of(b"x"));
        b.0[8..].fill(0);
        assert_eq!(build.hash_one(a), build.hash_one(b));
        b.0[0] ^= 1;
        assert_ne!(build.hash_one(a), build.hash_one(b));
        assert_ne!(build.hash_one(a), BuildDigestHasher::default().hash_one(a));
    }
}
