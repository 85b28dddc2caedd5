//! The batch API's JSON (git-lfs `docs/api/batch.md`): the client's request,
//! the upstream's answer as the proxy reads it, and the answer the client
//! gets, whose download actions point at the proxy and carry no upstream
//! `href` or `header`.

use serde::Deserialize;
use serde_json::{json, Value};

/// A client's batch request: what it asks for and how.
#[derive(Debug, Deserialize)]
pub struct Request {
    pub operation: String,
    #[serde(default)]
    pub objects: Vec<Wanted>,
    /// Absent means `sha256`.
    #[serde(default)]
    pub hash_algo: Option<String>,
}

/// One object a batch names.
#[derive(Debug, Clone, Deserialize)]
pub struct Wanted {
    pub oid: String,
    #[serde(default)]
    pub size: u64,
}

impl Request {
    /// The request in `body`, if it is one; `None` for anything else.
    pub fn parse(body: &[u8]) -> Option<Request> {
        serde_json::from_slice(body).ok()
    }

    /// Whether its objects are named by SHA-256 (the proxy's own address).
    pub fn is_sha256(&self) -> bool {
        self.hash_algo.as_deref().is_none_or(|a| a == "sha256")
    }
}

/// One object of an upstream's answer.
#[derive(Debug, Deserialize)]
pub struct Answered {
    pub oid: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    actions: Actions,
    /// The object's own error (`{"code": 404, "message": …}`), passed on.
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct Actions {
    download: Option<Action>,
}

/// Where and how the upstream says to download an object: kept by the
/// proxy, never shown to the client.
#[derive(Debug, Clone, Deserialize)]
pub struct Action {
    pub href: String,
    #[serde(default)]
    pub header: std::collections::BTreeMap<String, String>,
    /// Seconds from now (the API also allows `expires_at`; the shorter wins).
    #[serde(default)]
    pub expires_in: Option<i64>,
    #[serde(default)]
    pub expires_at: Option<String>,
}

impl Answered {
    pub fn download(&self) -> Option<&Action> {
        self.actions.download.as_ref()
    }
}

impl Action {
    /// Seconds it stays usable from `now_s` (unix seconds), if it says.
    pub fn lifetime(&self, now_s: i64) -> Option<i64> {
        let at = self.expires_at.as_deref().and_then(|t| {
            let at = humantime::parse_rfc3339_weak(t).ok()?;
            let at = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
            Some(i64::try_from(at).ok()? - now_s)
        });
        match (self.expires_in.filter(|&s| s > 0), at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The objects of an upstream's batch answer, if `body` is one.
pub fn parse_answer(body: &[u8]) -> Option<Vec<Answered>> {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        objects: Vec<Answered>,
    }
    serde_json::from_slice::<Answer>(body)
        .ok()
        .map(|a| a.objects)
}

/// One object of the proxy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Download it from the proxy at `href`, sending `grant` in
    /// [`GRANT_HEADER`](super::GRANT_HEADER).
    Download {
        oid: String,
        size: u64,
        href: String,
        grant: String,
        expires_in: i64,
    },
    /// The upstream's own error for it, as it wrote it.
    Upstream {
        oid: String,
        size: u64,
        error: Value,
    },
    /// The proxy's error for it.
    Error {
        oid: String,
        size: u64,
        code: u16,
        message: String,
    },
}

/// The proxy's batch answer (`transfer: basic`, SHA-256) for `replies`.
pub fn answer(replies: &[Reply]) -> Vec<u8> {
    let objects = replies
        .iter()
        .map(|reply| match reply {
            Reply::Download {
                oid,
                size,
                href,
                grant,
                expires_in,
            } => json!({
                "oid": oid,
                "size": size,
                "actions": {"download": {
                    "href": href,
                    "header": {super::GRANT_HEADER: grant},
                    "expires_in": expires_in,
                }},
            }),
            Reply::Upstream { oid, size, error } => {
                json!({"oid": oid, "size": size, "error": error})
            }
            Reply::Error {
                oid,
                size,
                code,
                message,
            } => json!({"oid": oid, "size": size, "error": {"code": code, "message": message}}),
        })
        .collect::<Vec<Value>>();
    let body = json!({"transfer": "basic", "objects": objects, "hash_algo": "sha256"});
    serde_json::to_vec(&body).expect("a batch answer serialises")
}

/// An error body as the batch API writes one (`{"message": …}`).
pub fn error(message: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({ "message": message })).expect("an error serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_answer_keeps_its_actions_and_the_proxy_answer_hides_them() {
        let upstream = br#"{"transfer":"basic","objects":[
            {"oid":"aa","size":3,"authenticated":true,"actions":{"download":{
              "href":"https://cdn.example/o?sig=s3cret","header":{"Authorization":"RemoteAuth s3cret"},
              "expires_in":600}}},
            {"oid":"bb","size":1,"error":{"code":404,"message":"Object does not exist"}}]}"#;
        let objects = parse_answer(upstream).unwrap();
        let action = objects[0].download().unwrap();
        assert_eq!(action.header["Authorization"], "RemoteAuth s3cret");
        assert_eq!(action.lifetime(0), Some(600));
        assert!(objects[1].download().is_none());
        let replies = [
            Reply::Download {
                oid: "aa".into(),
                size: 3,
                href: "http://proxy/r/e/objects/aa".into(),
                grant: "g".into(),
                expires_in: 600,
            },
            Reply::Upstream {
                oid: "bb".into(),
                size: 1,
                error: objects[1].error.clone().unwrap(),
            },
        ];
        let text = String::from_utf8(answer(&replies)).unwrap();
        assert!(!text.contains("s3cret") && !text.contains("cdn.example"));
        assert!(text.contains(r#""x-mirrorcache-lfs-grant":"g""#), "{text}");
        assert!(text.contains(r#""code":404"#));
    }

    #[test]
    fn requests_parse_and_other_hash_algorithms_are_told_apart() {
        let request =
            Request::parse(br#"{"operation":"download","objects":[{"oid":"aa","size":3}]}"#)
                .unwrap();
        assert!(request.is_sha256());
        assert_eq!(request.objects[0].size, 3);
        let other = Request::parse(br#"{"operation":"download","hash_algo":"sha512"}"#).unwrap();
        assert!(!other.is_sha256());
        assert!(Request::parse(b"not json").is_none());
        let at = Action {
            href: String::new(),
            header: Default::default(),
            expires_in: Some(600),
            expires_at: Some("1970-01-01T00:01:40Z".into()),
        };
        assert_eq!(at.lifetime(0), Some(100));
    }
}
