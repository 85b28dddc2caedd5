//! [`Touched`]: hits on entries the index served, counted in memory until
//! the evictor's flush writes them with the access times.

/// Hits on entries served from the index, which the entry cache does not
/// hold: `remote/path` → (last access, hits), taken by the evictor's flush.
/// Bounded like the entry cache: a key past the bound is not counted until
/// the next flush, as an entry evicted from the entry cache before its
/// flush is not.
pub struct Touched {
    shards: Box<[std::sync::Mutex<TouchedShard>]>,
    room: usize,
}

/// `remote/path` → (last access, hits), hashed by foldhash as the entry
/// cache is (a random hit notes its key here).
type TouchedShard = std::collections::HashMap<String, (i64, u64), foldhash::fast::RandomState>;

/// Shards of [`Touched`]: hits of two threads rarely take one lock.
const TOUCHED_SHARDS: usize = 64;

impl Touched {
    pub fn new(capacity: u64) -> Touched {
        Touched {
            shards: (0..TOUCHED_SHARDS).map(|_| Default::default()).collect(),
            room: (capacity as usize).div_ceil(TOUCHED_SHARDS),
        }
    }

    fn shard(&self, key: &str) -> &std::sync::Mutex<TouchedShard> {
        // FNV-1a: any spread will do.
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        &self.shards[hash as usize % TOUCHED_SHARDS]
    }

    /// Counts a hit on `key` at `now_ms`; returns the last one noted before
    /// it since the last flush, if any.
    pub(crate) fn note(&self, key: &str, now_ms: i64) -> Option<i64> {
        let mut touched = self.shard(key).lock().expect("touched poisoned");
        if let Some((last, hits)) = touched.get_mut(key) {
            let before = *last;
            *hits += 1;
            *last = before.max(now_ms);
            return Some(before);
        }
        if touched.len() < self.room {
            touched.insert(key.to_string(), (now_ms, 1));
        }
        None
    }

    /// Hits on `key` noted since the last flush, and the last one's time.
    pub(crate) fn pending(&self, key: &str) -> (u64, i64) {
        let touched = self.shard(key).lock().expect("touched poisoned");
        touched
            .get(key)
            .map_or((0, 0), |(last, hits)| (*hits, *last))
    }

    /// Everything noted since the last call: (key, last access, hits).
    pub fn take(&self) -> Vec<(String, i64, u64)> {
        let mut taken = Vec::new();
        for shard in self.shards.iter() {
            let drained = std::mem::take(&mut *shard.lock().expect("touched poisoned"));
            taken.extend(drained.into_iter().map(|(k, (last, hits))| (k, last, hits)));
        }
        taken
    }
}
