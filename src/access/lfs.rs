//! Who may read an lfs remote's cached objects. An upstream's yes to a
//! batch (a 200) is remembered for the repository's endpoint and the
//! credential that got it, by a SHA-256 of both (never the credential
//! itself); a no (401, 403, 404) forgets it. Each download action the proxy
//! answers carries a grant: an HMAC, under a key made at start-up, of the
//! remote, endpoint, oid and expiry, which is all an object's GET is
//! checked against, so a cached object reaches only a client a batch for
//! that repository admitted.

use std::collections::HashMap;
use std::sync::RwLock;

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

/// Identities kept at most; past it the table is emptied (everyone's next
/// batch asks upstream again).
const CAPACITY: usize = 100_000;

/// The grants' key and the upstream's recent answers.
pub struct LfsGrants {
    key: [u8; 32],
    // A std lock: held for one lookup or insert, never across an await.
    yes_at: RwLock<HashMap<[u8; 32], i64>>,
}

impl LfsGrants {
    /// With a fresh random key: grants of an earlier process are void.
    pub fn new() -> LfsGrants {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the system's random source");
        LfsGrants {
            key,
            yes_at: RwLock::default(),
        }
    }

    /// Who asks for which repository: `credential` is the `Authorization`
    /// the batch was forwarded with (empty for none: the remote's own).
    pub fn identity(remote: &str, endpoint: &str, credential: &[u8]) -> [u8; 32] {
        let mut hash = Sha256::new();
        for part in [remote.as_bytes(), endpoint.as_bytes(), credential] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
        hash.finalize().into()
    }

    /// The upstream said yes to `identity` at `now_ms`.
    pub fn said_yes(&self, identity: [u8; 32], now_ms: i64) {
        let mut seen = self.yes_at.write().expect("lfs grants poisoned");
        if seen.len() >= CAPACITY {
            seen.clear();
        }
        seen.insert(identity, now_ms);
    }

    /// The upstream said no to `identity`.
    pub fn said_no(&self, identity: &[u8; 32]) {
        self.yes_at
            .write()
            .expect("lfs grants poisoned")
            .remove(identity);
    }

    /// When the upstream last said yes to `identity`, if it did.
    pub fn yes_at(&self, identity: &[u8; 32]) -> Option<i64> {
        let seen = self.yes_at.read().expect("lfs grants poisoned");
        seen.get(identity).copied()
    }

    /// The grant for `oid` of `endpoint`, good until `until_ms`.
    pub fn grant(&self, remote: &str, endpoint: &str, oid: &str, until_ms: i64) -> String {
        let mac = self.mac(remote, endpoint, oid, until_ms);
        format!("{until_ms}.{}", hex::encode(mac))
    }

    /// Whether `grant` is one [`grant`](LfsGrants::grant) gave for `oid` of
    /// `endpoint` and is still good at `now_ms`.
    pub fn admits(
        &self,
        remote: &str,
        endpoint: &str,
        oid: &str,
        grant: &str,
        now_ms: i64,
    ) -> bool {
        let Some((until, mac)) = grant.split_once('.') else {
            return false;
        };
        let (Ok(until_ms), Ok(mac)) = (until.parse::<i64>(), hex::decode(mac)) else {
            return false;
        };
        let expected = self.mac(remote, endpoint, oid, until_ms);
        now_ms < until_ms && bool::from(expected.as_slice().ct_eq(&mac))
    }

    /// HMAC-SHA256 (RFC 2104) of the grant's fields under the key.
    fn mac(&self, remote: &str, endpoint: &str, oid: &str, until_ms: i64) -> [u8; 32] {
        let pad = |byte: u8| {
            let mut block = [byte; 64];
            for (b, k) in block.iter_mut().zip(self.key) {
                *b ^= k;
            }
            block
        };
        let mut inner = Sha256::new();
        inner.update(pad(0x36));
        inner.update(Self::identity(remote, endpoint, oid.as_bytes()));
        inner.update(until_ms.to_be_bytes());
        let mut outer = Sha256::new();
        outer.update(pad(0x5c));
        outer.update(inner.finalize());
        outer.finalize().into()
    }
}

impl Default for LfsGrants {
    fn default() -> LfsGrants {
        LfsGrants::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_admits_its_own_object_until_it_expires() {
        let grants = LfsGrants::new();
        let grant = grants.grant("lfs", "o/r.git/info/lfs", "aa", 1_000);
        assert!(grants.admits("lfs", "o/r.git/info/lfs", "aa", &grant, 999));
        assert!(!grants.admits("lfs", "o/r.git/info/lfs", "aa", &grant, 1_000));
        assert!(!grants.admits("lfs", "o/other.git/info/lfs", "aa", &grant, 0));
        assert!(!grants.admits("lfs", "o/r.git/info/lfs", "bb", &grant, 0));
        let later = grant.replacen("1000", "9000", 1);
        assert!(!grants.admits("lfs", "o/r.git/info/lfs", "aa", &later, 0));
        assert!(!LfsGrants::new().admits("lfs", "o/r.git/info/lfs", "aa", &grant, 0));
        assert!(!grants.admits("lfs", "o/r.git/info/lfs", "aa", "x", 0));
    }

    #[test]
    fn a_yes_is_kept_by_identity_and_a_no_forgets_it() {
        let grants = LfsGrants::new();
        let alice = LfsGrants::identity("lfs", "o/r", b"Basic YWxpY2U6cw==");
        let bob = LfsGrants::identity("lfs", "o/r", b"Basic Ym9iOnM=");
        grants.said_yes(alice, 5);
        assert_eq!(grants.yes_at(&alice), Some(5));
        assert_eq!(grants.yes_at(&bob), None);
        grants.said_no(&alice);
        assert_eq!(grants.yes_at(&alice), None);
    }
}
