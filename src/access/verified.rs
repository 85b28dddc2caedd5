//! Credentials verified lately, by the SHA-256 of their `Authorization`
//! header: what lets a request with known credentials skip bcrypt and the
//! token table. A read is one shared lock and one lookup keyed by the
//! digest's own first bytes (it is already a uniform hash), which is what
//! the hit path can afford; moka's bookkeeping per read cost a private
//! remote's 1 KiB hits a sixth of their rate.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, RwLock};

/// Entries kept at most; past it the map is emptied (everyone verifies once more).
const CAPACITY: usize = 10_000;

/// A digest is its own hash: its first eight bytes.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for (i, b) in bytes.iter().take(8).enumerate() {
            self.0 |= u64::from(*b) << (8 * i);
        }
    }
}

/// One credential checked lately.
#[derive(Clone)]
pub struct Verified {
    pub user: Arc<str>,
    /// Taken on trust until then (unix ms): the earlier of the cache's
    /// lifetime and a token's expiry.
    pub until_ms: i64,
}

#[derive(Default)]
pub struct VerifiedCache {
    // A std lock: held for one lookup or insert, never across an await.
    entries: RwLock<HashMap<[u8; 32], Verified, BuildHasherDefault<DigestHasher>>>,
}

impl VerifiedCache {
    /// The user of `key`, if it was verified and is still within its time.
    pub fn get(&self, key: &[u8; 32], now_ms: i64) -> Option<Arc<str>> {
        let entries = self.entries.read().expect("verified cache poisoned");
        let found = entries.get(key)?;
        (now_ms < found.until_ms).then(|| found.user.clone())
    }

    pub fn insert(&self, key: [u8; 32], verified: Verified) {
        let mut entries = self.entries.write().expect("verified cache poisoned");
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(key, verified);
    }

    pub fn clear(&self) {
        self.entries
            .write()
            .expect("verified cache poisoned")
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_taken_until_its_time_only() {
        let cache = VerifiedCache::default();
        let key = [7u8; 32];
        cache.insert(
            key,
            Verified {
                user: "ci".into(),
                until_ms: 1_000,
            },
        );
        assert_eq!(cache.get(&key, 999).as_deref(), Some("ci"));
        assert_eq!(cache.get(&key, 1_000), None);
        assert_eq!(cache.get(&[8u8; 32], 0), None);
        cache.clear();
        assert_eq!(cache.get(&key, 0), None);
    }
}
