//! The listings of an oci remote: a repository's `tags/list` (paged here
//! with `n` and `last`) and a manifest's referrers (the OCI 1.1 referrers
//! API, `referrers/<digest>`: the signatures, SBOMs and attestations that
//! name it, filtered here by `artifactType`). Both are mutable documents,
//! cached whole and revalidated after `revalidate_after` like any other.

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use bytes::Bytes;

use super::{known, OciError, Pull};
use crate::http::{serve, Served};
use crate::kind::oci::{self, Invalid};
use crate::path::ArtifactPath;

/// The most tags one `tags/list` page may ask for (`n`).
const MAX_PAGE: usize = 10_000;

const INDEX: &str = "application/vnd.oci.image.index.v1+json";

impl Pull<'_> {
    /// `tags/list`, cached whole as a mutable document; `n` and `last`
    /// page it here (a `Link` header names the next page).
    pub(super) async fn tags(&self, path: &ArtifactPath) -> Result<Served, OciError> {
        let (mut n, mut last) = (None, None);
        for (key, value) in url::form_urlencoded::parse(self.uri.query().unwrap_or("").as_bytes()) {
            match &*key {
                "n" => match value.parse::<usize>() {
                    Ok(v) if v <= MAX_PAGE => n = Some(v),
                    _ => {
                        return Err(OciError::new(
                            StatusCode::BAD_REQUEST,
                            "PAGINATION_NUMBER_INVALID",
                            format!("n must be a number up to {MAX_PAGE}"),
                        ))
                    }
                },
                "last" if oci::is_tag(&value) => last = Some(value.into_owned()),
                "last" => return Err(OciError::invalid(Invalid::Tag)),
                _ => {}
            }
        }
        let (served, body) = self
            .listing(path, "NAME_UNKNOWN", "repository unknown to every mirror")
            .await?;
        if n.is_none() && last.is_none() {
            let response = self.whole(
                body,
                Some(HeaderValue::from_static("application/json")),
                served.cache,
            );
            return Ok(Served { response, ..served });
        }
        let (page, next) = page_of(&body, n, last.as_deref()).ok_or_else(|| {
            OciError::new(
                StatusCode::BAD_GATEWAY,
                "UNKNOWN",
                "the mirror's tag list is not JSON",
            )
        })?;
        let mut response = self.whole(
            page.into(),
            Some(HeaderValue::from_static("application/json")),
            served.cache,
        );
        if let Some(next) = next {
            let link = format!(
                "<{}?n={}&last={next}>; rel=\"next\"",
                self.uri.path(),
                n.unwrap_or(MAX_PAGE)
            );
            if let Ok(link) = HeaderValue::from_str(&link) {
                response.headers_mut().insert(header::LINK, link);
            }
        }
        Ok(Served { response, ..served })
    }

    /// `referrers/<digest>`: the image index of the manifests that name it,
    /// as the mirror sent it, or only those of one `artifactType` (then
    /// `OCI-Filters-Applied` says so). A registry without the API answers
    /// 404, and clients fall back to the referrers tag.
    pub(super) async fn referrers(&self, path: &ArtifactPath) -> Result<Served, OciError> {
        let artifact_type = url::form_urlencoded::parse(self.uri.query().unwrap_or("").as_bytes())
            .find(|(k, _)| k == "artifactType")
            .map(|(_, v)| v.into_owned());
        let (served, body) = self
            .listing(path, "MANIFEST_UNKNOWN", "manifest unknown to every mirror")
            .await?;
        let body = match &artifact_type {
            None => body,
            Some(wanted) => only_of_type(&body, wanted).ok_or_else(|| {
                OciError::new(
                    StatusCode::BAD_GATEWAY,
                    "UNKNOWN",
                    "the mirror's referrers list is not JSON",
                )
            })?,
        };
        let mut response = self.whole(body, Some(HeaderValue::from_static(INDEX)), served.cache);
        if artifact_type.is_some() {
            response.headers_mut().insert(
                "oci-filters-applied",
                HeaderValue::from_static("artifactType"),
            );
        }
        Ok(Served { response, ..served })
    }

    /// A listing read whole through the cache (a GET, whatever the
    /// client's method), or the endpoint's "unknown" error.
    async fn listing(
        &self,
        path: &ArtifactPath,
        unknown: &'static str,
        message: &str,
    ) -> Result<(Served, Bytes), OciError> {
        let served = serve(
            self.proxy,
            self.remote,
            path,
            &Method::GET,
            &HeaderMap::new(),
        )
        .await
        .map_err(|e| OciError::from_proxy(&e, unknown))?;
        known(&served, unknown, message)?;
        let (parts, body) = served.response.into_parts();
        let (body, _) = self
            .read_whole(axum::response::Response::from_parts(parts, body))
            .await?;
        let served = Served {
            response: axum::response::Response::new(axum::body::Body::empty()),
            ..served
        };
        Ok((served, body))
    }
}

/// The referrers index with only the manifests of `artifact_type`.
fn only_of_type(body: &[u8], artifact_type: &str) -> Option<Bytes> {
    let mut index: serde_json::Value = serde_json::from_slice(body).ok()?;
    if let Some(manifests) = index["manifests"].as_array_mut() {
        manifests.retain(|m| m["artifactType"].as_str() == Some(artifact_type));
    }
    Some(serde_json::to_vec(&index).ok()?.into())
}

/// One page of a tag list (`{"name": …, "tags": […]}`): the tags after
/// `last`, at most `n`, and the last tag of the page when more follow.
fn page_of(body: &[u8], n: Option<usize>, last: Option<&str>) -> Option<(Vec<u8>, Option<String>)> {
    let mut list: serde_json::Value = serde_json::from_slice(body).ok()?;
    let mut tags: Vec<String> = list["tags"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    tags.sort();
    if let Some(last) = last {
        tags.retain(|t| t.as_str() > last);
    }
    let n = n.unwrap_or(MAX_PAGE);
    let next = (n > 0 && tags.len() > n).then(|| tags[n - 1].clone());
    tags.truncate(n);
    list["tags"] = serde_json::json!(tags);
    Some((serde_json::to_vec(&list).ok()?, next))
}

#[cfg(test)]
mod tests {
    use super::{only_of_type, page_of};

    #[test]
    fn referrers_are_filtered_by_artifact_type() {
        let body = br#"{"schemaVersion":2,"manifests":[{"artifactType":"a/sig","digest":"x"},{"artifactType":"a/sbom","digest":"y"}]}"#;
        let only = only_of_type(body, "a/sbom").unwrap();
        assert_eq!(
            &only[..],
            br#"{"manifests":[{"artifactType":"a/sbom","digest":"y"}],"schemaVersion":2}"#
        );
        assert!(only_of_type(b"<html>", "a/sbom").is_none());
    }

    #[test]
    fn tag_lists_are_paged_after_last() {
        let body = br#"{"name":"a","tags":["c","a","b","d"]}"#;
        let (page, next) = page_of(body, Some(2), None).unwrap();
        assert_eq!(page, br#"{"name":"a","tags":["a","b"]}"#);
        assert_eq!(next.as_deref(), Some("b"));
        let (page, next) = page_of(body, Some(2), Some("b")).unwrap();
        assert_eq!(page, br#"{"name":"a","tags":["c","d"]}"#);
        assert_eq!(next, None);
        let (page, _) = page_of(body, Some(0), None).unwrap();
        assert_eq!(page, br#"{"name":"a","tags":[]}"#);
        assert!(page_of(b"<html>", Some(1), None).is_none());
    }
}
