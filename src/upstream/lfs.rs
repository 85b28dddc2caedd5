//! An lfs remote's download actions: where the upstream said each object
//! is (`href`) and what to send there (`header`), kept by the object's path
//! (`{endpoint}/objects/{oid}`, so per repository) until the action expires.
//! The batch answer records them; the object's fill reads them
//! (`fetch::fetch_avoiding`). They never leave the proxy, and `Debug` shows
//! only how many there are.

use std::collections::HashMap;
use std::sync::Mutex;

use url::Url;

/// Actions kept at most; past it the table is emptied (the next batch
/// records them again).
const CAPACITY: usize = 100_000;

/// One object's download action.
#[derive(Clone)]
pub struct Action {
    pub href: Url,
    pub headers: reqwest::header::HeaderMap,
    /// Usable until then (unix ms).
    pub until_ms: i64,
}

#[derive(Default)]
pub struct Actions {
    // A std lock: held for one lookup or insert, never across an await.
    entries: Mutex<HashMap<String, Action>>,
}

impl Actions {
    /// Keeps `action` for the object at `path`, replacing an older one.
    pub fn keep(&self, path: String, action: Action, now_ms: i64) {
        let mut entries = self.entries.lock().expect("lfs actions poisoned");
        if entries.len() >= CAPACITY {
            entries.retain(|_, a| a.until_ms > now_ms);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(path, action);
    }

    /// The action for the object at `path`, while it is usable.
    pub fn get(&self, path: &str, now_ms: i64) -> Option<Action> {
        let entries = self.entries.lock().expect("lfs actions poisoned");
        entries.get(path).filter(|a| a.until_ms > now_ms).cloned()
    }
}

impl std::fmt::Debug for Actions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.entries.lock().map(|e| e.len()).unwrap_or_default();
        write!(f, "Actions({n})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_is_kept_until_it_expires_and_never_shown() {
        let actions = Actions::default();
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("authorization", "RemoteAuth s3cret".parse().unwrap());
        let action = Action {
            href: Url::parse("https://cdn.example/o?sig=s3cret").unwrap(),
            headers,
            until_ms: 1_000,
        };
        actions.keep("e/objects/aa".into(), action, 0);
        assert!(actions.get("e/objects/aa", 999).is_some());
        assert!(actions.get("e/objects/aa", 1_000).is_none());
        assert!(actions.get("f/objects/aa", 0).is_none());
        assert_eq!(format!("{actions:?}"), "Actions(1)");
    }
}
