//! What the quarantine refused, for the dashboard: one row per remote,
//! package, version and advisory, with a count and the last time, kept in
//! memory (bounded) since the process started.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Serialize;

use crate::kind::advisory::Quarantined;

/// The most rows kept; past it the row refused longest ago gives way.
const MAX_ROWS: usize = 500;

/// One refused version as the dashboard lists it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Refusal {
    pub remote: String,
    pub package: String,
    pub version: String,
    pub advisory: String,
    pub class: &'static str,
    pub count: u64,
    /// Unix ms of the last refusal.
    pub last_ms: i64,
}

/// The refusals counted so far.
#[derive(Default)]
pub struct Refusals {
    /// This is a `std::sync::Mutex`: it is held only to update a map, never
    /// across an await; a refusal is rare next to a hit.
    rows: Mutex<HashMap<(String, String, String, String), Refusal>>,
}

impl Refusals {
    pub fn record(
        &self,
        remote: &str,
        package: &str,
        version: &str,
        advisory: &Quarantined,
        now_ms: i64,
    ) {
        let mut rows = self.rows.lock().expect("not poisoned");
        let key = (
            remote.to_string(),
            package.to_string(),
            version.to_string(),
            advisory.id.clone(),
        );
        if !rows.contains_key(&key) && rows.len() >= MAX_ROWS {
            let oldest = rows
                .iter()
                .min_by_key(|(_, r)| r.last_ms)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                rows.remove(&oldest);
            }
        }
        let row = rows.entry(key).or_insert_with(|| Refusal {
            remote: remote.to_string(),
            package: package.to_string(),
            version: version.to_string(),
            advisory: advisory.id.clone(),
            class: advisory.class,
            count: 0,
            last_ms: now_ms,
        });
        row.count += 1;
        row.last_ms = now_ms;
    }

    /// Every row, the latest refusal first.
    pub fn list(&self) -> Vec<Refusal> {
        let rows = self.rows.lock().expect("not poisoned");
        let mut list: Vec<Refusal> = rows.values().cloned().collect();
        list.sort_by(|a, b| b.last_ms.cmp(&a.last_ms).then(a.package.cmp(&b.package)));
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_per_version_and_advisory_latest_first() {
        let refusals = Refusals::default();
        let mal = Quarantined {
            class: "malicious",
            id: "MAL-2025-1".to_string(),
        };
        refusals.record("npm", "mc-worm", "1.0.1", &mal, 10);
        refusals.record("npm", "mc-worm", "1.0.1", &mal, 30);
        refusals.record("npm", "mc-evil", "1.0.0", &mal, 20);
        let list = refusals.list();
        assert_eq!(list.len(), 2);
        assert_eq!((list[0].package.as_str(), list[0].count), ("mc-worm", 2));
        assert_eq!(list[0].last_ms, 30);
        assert_eq!((list[1].package.as_str(), list[1].count), ("mc-evil", 1));
        for i in 0..MAX_ROWS + 5 {
            refusals.record("npm", "many", &i.to_string(), &mal, 100 + i as i64);
        }
        let list = refusals.list();
        assert_eq!(list.len(), MAX_ROWS);
        assert!(list.iter().all(|r| r.package == "many"));
    }
}
