//! lfs: a Git host's LFS endpoint as `git lfs pull`, `git lfs fetch` and
//! `git clone`'s smudge filter speak to it (the batch API,
//! `{endpoint}/objects/batch`, `application/vnd.git-lfs+json`). The batch is
//! forwarded with the client's credentials; each object's `download` action
//! is answered with a proxy URL, `{endpoint}/objects/{oid}`, whose key holds
//! the endpoint (so the repository) and whose body must be the SHA-256 the
//! oid names. What the batch answers read and write is in [`batch`]: pure
//! JSON rules, no state.

pub mod batch;

use axum::http::HeaderMap;

use super::declared::{Algo, Declared};
use super::{Digests, Ecosystem, PassThrough, Plan, Protocol};

pub struct Lfs;

/// The header a proxy download action carries: the grant the batch gave
/// for that endpoint and oid (`access::lfs`), never an upstream secret.
pub const GRANT_HEADER: &str = "x-mirrorcache-lfs-grant";

/// The batch API's media type, of requests and answers.
pub const MEDIA_TYPE: &str = "application/vnd.git-lfs+json";

/// The LFS endpoint (`owner/repo.git/info/lfs`) whose batch `path` is.
pub fn batch_endpoint(path: &str) -> Option<&str> {
    path.strip_suffix("/objects/batch")
        .filter(|endpoint| !endpoint.is_empty())
}

/// The endpoint and oid of an object's proxy URL, `{endpoint}/objects/{oid}`.
pub fn object(path: &str) -> Option<(&str, &str)> {
    let (endpoint, oid) = path.rsplit_once("/objects/")?;
    (!endpoint.is_empty() && is_oid(oid)).then_some((endpoint, oid))
}

/// The proxy path of object `oid` of `endpoint`.
pub fn object_path(endpoint: &str, oid: &str) -> String {
    format!("{endpoint}/objects/{oid}")
}

/// An oid as the batch API writes a SHA-256: 64 lower-case hex digits.
pub fn is_oid(oid: &str) -> bool {
    oid.len() == 64 && oid.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Ecosystem for Lfs {
    fn name(&self) -> &'static str {
        "lfs"
    }

    /// An object is immutable (named by its SHA-256); the batch is an API
    /// route taking POST (answered by `http::lfs`, never cached).
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: object(path).is_some(),
            pass_through: batch_endpoint(path).map(|_| PassThrough { post: true }),
            ..Plan::default()
        }
    }

    /// `lfs_uploads` and `lfs_grant_ttl` are this kind's own.
    fn refuses_key(&self, key: &str) -> Option<String> {
        match key {
            "lfs_uploads" | "lfs_grant_ttl" => None,
            _ => super::standard_refusal(self.name(), self.digests(), self.packages(), key),
        }
    }

    /// Objects come from the download actions the batch answers named.
    fn protocol(&self) -> Protocol {
        Protocol::LfsActions
    }

    fn digests(&self) -> Option<&dyn Digests> {
        Some(self)
    }

    #[cfg(test)]
    fn conformance(&self) -> super::conformance::Rows {
        tests::rows()
    }
}

impl Digests for Lfs {
    /// The oid is the object's SHA-256.
    fn in_path(&self, path: &str) -> Option<Declared> {
        Declared::from_hex(Algo::Sha256, object(path)?.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::conformance::{Class, Rows};

    const OID: &str = "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393";

    pub(super) fn rows() -> Rows {
        Rows {
            paths: vec![
                (
                    "owner/repo.git/info/lfs/objects/batch",
                    Class::Pass { post: true },
                ),
                (
                    "owner/repo.git/info/lfs/objects/4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393",
                    Class::Immutable,
                ),
                // Not an oid: not an object.
                ("owner/repo.git/info/lfs/objects/ABC", Class::Mutable),
                ("owner/repo.git/info/lfs/locks", Class::Mutable),
            ],
            ..Rows::default()
        }
    }

    #[test]
    fn paths_name_their_endpoint_and_oid() {
        let path = object_path("o/r.git/info/lfs", OID);
        assert_eq!(object(&path), Some(("o/r.git/info/lfs", OID)));
        assert_eq!(
            batch_endpoint("o/r.git/info/lfs/objects/batch"),
            Some("o/r.git/info/lfs")
        );
        assert_eq!(batch_endpoint("objects/batch"), None);
        assert_eq!(object(&format!("objects/{OID}")), None);
        assert_eq!(object(&path.to_uppercase()), None);
        assert_eq!(Lfs.in_path(&path).unwrap().hex(), OID);
    }

    #[test]
    fn only_an_lfs_remote_takes_the_lfs_keys() {
        assert_eq!(Lfs.refuses_key("lfs_uploads"), None);
        assert!(Lfs.refuses_key("deny").is_some());
        let npm = crate::kind::Kind::named("npm").unwrap().ecosystem();
        assert!(npm.refuses_key("lfs_grant_ttl").unwrap().contains("lfs"));
    }
}
