//! An lfs remote's download actions: where a mirror said each object is
//! (`href`) and what to send there (`header`), kept by the object's path
//! (`{endpoint}/objects/{oid}`, so per repository) and the mirror, until the
//! action expires. A client's batch records them; an object's fill sends
//! them ([`send`]), and asks a mirror it has none from (the next one, after
//! the first's bytes were refused) with a batch of its own, made with the
//! remote's credentials. They never leave the proxy, and `Debug` shows only
//! how many there are.

use std::collections::HashMap;
use std::sync::Mutex;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, ACCEPT_ENCODING, CONTENT_TYPE};
use url::Url;

use super::{MirrorSet, Remote};
use crate::clock::now_ms;
use crate::kind::lfs::{self, batch, MEDIA_TYPE};

/// Actions kept at most; past it the table is emptied (the next batch
/// records them again).
const CAPACITY: usize = 100_000;

/// How long an action that names no expiry is used.
pub const DEFAULT_LIFETIME_S: i64 = 3600;

/// One object's download action at one mirror.
#[derive(Clone)]
pub struct Action {
    pub href: Url,
    pub headers: HeaderMap,
    /// The object's size, as the batch said.
    pub size: u64,
    /// Usable until then (unix ms).
    pub until_ms: i64,
}

impl Action {
    /// The action a batch answer gave for an object of `size` bytes, if the
    /// proxy follows it: an `href` the remote may leave for (as a
    /// registry's blob redirect), its valid headers.
    pub fn from_batch(
        remote: &Remote,
        given: &batch::Action,
        size: u64,
        now_ms: i64,
    ) -> Option<Action> {
        let href = Url::parse(&given.href).ok()?;
        if !remote.may_leave_for(&href) {
            return None;
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &given.header {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.insert(name, value);
            }
        }
        let lifetime = given.lifetime(now_ms / 1000).unwrap_or(DEFAULT_LIFETIME_S);
        Some(Action {
            href,
            headers,
            size,
            until_ms: now_ms + lifetime.max(0) * 1000,
        })
    }
}

#[derive(Default)]
pub struct Actions {
    // A std lock: held for one lookup or insert, never across an await.
    entries: Mutex<HashMap<(String, String), Action>>,
}

impl Actions {
    /// Keeps `action` for the object at `path` at mirror `mirror` (its
    /// base URL), replacing an older one.
    pub fn keep(&self, path: &str, mirror: &str, action: Action, now_ms: i64) {
        let mut entries = self.entries.lock().expect("lfs actions poisoned");
        if entries.len() >= CAPACITY {
            entries.retain(|_, a| a.until_ms > now_ms);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert((path.to_string(), mirror.to_string()), action);
    }

    /// The action for the object at `path` at `mirror`, while it is usable.
    pub fn get(&self, path: &str, mirror: &str, now_ms: i64) -> Option<Action> {
        let entries = self.entries.lock().expect("lfs actions poisoned");
        let key = (path.to_string(), mirror.to_string());
        entries.get(&key).filter(|a| a.until_ms > now_ms).cloned()
    }

    /// The size any mirror's action gave the object at `path`.
    fn size_of(&self, path: &str) -> Option<u64> {
        let entries = self.entries.lock().expect("lfs actions poisoned");
        entries
            .iter()
            .find_map(|((p, _), a)| (p == path).then_some(a.size))
    }
}

impl std::fmt::Debug for Actions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.entries.lock().map(|e| e.len()).unwrap_or_default();
        write!(f, "Actions({n})")
    }
}

/// The GET of the object at `path` from mirror `mirror_idx` of `set`: its
/// action's `href` with the action's headers only. A mirror with no action
/// for it is asked for one first ([`ask`]); when it gives none, its answer
/// (a refusal, or a 404) is the attempt's.
pub(super) async fn send(
    remote: &Remote,
    set: &MirrorSet,
    mirror_idx: usize,
    path: &str,
) -> reqwest::Result<reqwest::Response> {
    let now = now_ms();
    let mirror = set.mirrors[mirror_idx].base();
    let action = match remote.lfs_actions.get(path, mirror, now) {
        Some(action) => action,
        None => match ask(remote, set, mirror_idx, path, now).await? {
            Ok(action) => action,
            Err(answer) => return Ok(answer),
        },
    };
    remote
        .client()
        .get(action.href)
        .headers(action.headers)
        .header(ACCEPT_ENCODING, "identity")
        .send()
        .await
}

/// A download batch for the one object at `path`, sent to mirror
/// `mirror_idx` with the remote's own credentials: the action it gives
/// (kept), or, when it gives none, the answer that ends the attempt.
async fn ask(
    remote: &Remote,
    set: &MirrorSet,
    mirror_idx: usize,
    path: &str,
    now: i64,
) -> reqwest::Result<Result<Action, reqwest::Response>> {
    let not_found = || {
        let answer = axum::http::Response::builder().status(404).body(Vec::new());
        Ok(Err(answer.expect("a bare 404").into()))
    };
    let Some((endpoint, oid)) = lfs::object(path) else {
        return not_found();
    };
    let size = remote.lfs_actions.size_of(path).unwrap_or_default();
    let body = serde_json::json!({
        "operation": "download",
        "transfers": ["basic"],
        "objects": [{"oid": oid, "size": size}],
    });
    let url = set.mirrors[mirror_idx].url_for(&format!("{endpoint}/objects/batch"));
    let request = remote.client().post(url);
    let answer = remote
        .authorize(request, set, mirror_idx)
        .header(ACCEPT, MEDIA_TYPE)
        .header(CONTENT_TYPE, MEDIA_TYPE)
        .body(body.to_string())
        .send()
        .await?;
    if answer.status() != reqwest::StatusCode::OK {
        return Ok(Err(answer));
    }
    let objects = batch::parse_answer(&answer.bytes().await?).unwrap_or_default();
    let action = objects
        .iter()
        .filter(|o| o.oid == oid && o.error.is_none())
        .find_map(|o| Action::from_batch(remote, o.download()?, o.size, now));
    let Some(action) = action else {
        return not_found();
    };
    let mirror = set.mirrors[mirror_idx].base();
    remote.lfs_actions.keep(path, mirror, action.clone(), now);
    Ok(Ok(action))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_is_kept_per_mirror_until_it_expires_and_never_shown() {
        let actions = Actions::default();
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "RemoteAuth s3cret".parse().unwrap());
        let action = Action {
            href: Url::parse("https://cdn.example/o?sig=s3cret").unwrap(),
            headers,
            size: 3,
            until_ms: 1_000,
        };
        actions.keep("e/objects/aa", "https://a", action, 0);
        assert!(actions.get("e/objects/aa", "https://a", 999).is_some());
        assert!(actions.get("e/objects/aa", "https://a", 1_000).is_none());
        assert!(actions.get("e/objects/aa", "https://b", 0).is_none());
        assert!(actions.get("f/objects/aa", "https://a", 0).is_none());
        assert_eq!(actions.size_of("e/objects/aa"), Some(3));
        assert_eq!(format!("{actions:?}"), "Actions(1)");
    }
}
