//! `composer.lock` for `warm`: every package of `packages` and
//! `packages-dev` that has a `dist`, checked against its `dist.shasum`
//! (sha1) when not empty. Its archive is found where Composer would find it
//! through the proxy: the release with the lock's `dist.reference` in the
//! remote's p2 file (`p2/<name>.json`, `~dev.json` for a branch), whose
//! `dist.url` the proxy has re-pointed at itself; a lock made through the
//! proxy names that address already.

use serde_json::Value;

use super::artifact::{Artifact, Check, Failure, Location};

pub fn composer_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let lock: Value =
        serde_json::from_str(text).map_err(|e| (e.line(), format!("not a composer.lock: {e}")))?;
    let mut artifacts = Vec::new();
    for section in ["packages", "packages-dev"] {
        for package in lock[section].as_array().into_iter().flatten() {
            let (Some(name), Some(version)) =
                (package["name"].as_str(), package["version"].as_str())
            else {
                return Err((
                    1,
                    format!("a `{section}` entry without `name` and `version`"),
                ));
            };
            let dist = &package["dist"];
            let (Some(url), Some(reference)) = (dist["url"].as_str(), dist["reference"].as_str())
            else {
                // A path repository or a source-only package: no archive.
                continue;
            };
            let check = dist["shasum"]
                .as_str()
                .filter(|s| !s.is_empty())
                .and_then(|hex| hex::decode(hex).ok())
                .map_or(Check::Unchecked, |sha1| Check::Integrity("sha1", sha1));
            artifacts.push(Artifact {
                name: format!("{name}@{version}"),
                location: Location::Composer {
                    name: name.to_string(),
                    version: version.to_string(),
                    reference: reference.to_string(),
                    url: url.to_string(),
                },
                check,
            });
        }
    }
    Ok(artifacts)
}

/// The address on the server of the archive of `name` at `version`
/// (`reference`), the lock's `url` when it is on the server already.
pub async fn dist_url(
    client: &reqwest::Client,
    base: &str,
    (name, version, reference, url): (&str, &str, &str, &str),
) -> Result<String, String> {
    if url.starts_with(&format!("{base}/")) {
        return Ok(url.to_string());
    }
    let branch = version.starts_with("dev-") || version.ends_with("-dev");
    let p2 = format!(
        "{base}/p2/{}{}.json",
        name.to_ascii_lowercase(),
        if branch { "~dev" } else { "" }
    );
    let body = client
        .get(&p2)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| format!("{p2}: {}", e.without_url()))?
        .bytes()
        .await
        .map_err(|e| format!("{p2}: {}", e.without_url()))?;
    let doc: Value = serde_json::from_slice(&body).map_err(|e| format!("{p2}: {e}"))?;
    doc["packages"]
        .as_object()
        .into_iter()
        .flat_map(|packages| packages.values())
        .filter_map(Value::as_array)
        .flatten()
        .find(|release| release["dist"]["reference"].as_str() == Some(reference))
        .and_then(|release| release["dist"]["url"].as_str())
        .map(str::to_string)
        .ok_or_else(|| format!("{p2} lists no release with reference {reference}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_with_a_dist_their_shasum_checked_when_given() {
        let sha1 = "0123456789abcdef0123456789abcdef01234567";
        let lock = serde_json::json!({
            "packages": [
                {"name": "acme/hello", "version": "1.0.0",
                 "dist": {"type": "zip", "url": "https://api.github.com/repos/acme/hello/zipball/aaa",
                          "reference": "aaa", "shasum": sha1}},
                {"name": "acme/local", "version": "1.0.0", "dist": {"type": "path", "url": "../local"}}
            ],
            "packages-dev": [
                {"name": "acme/dev", "version": "dev-main",
                 "dist": {"type": "zip", "url": "http://p/php/~files/b", "reference": "bbb", "shasum": ""}}
            ]
        });
        let found = composer_lock(&lock.to_string()).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].name, "acme/hello@1.0.0");
        assert_eq!(
            found[0].check,
            Check::Integrity("sha1", hex::decode(sha1).unwrap())
        );
        assert_eq!(found[1].check, Check::Unchecked);
        assert!(
            matches!(&found[1].location, Location::Composer { reference, .. } if reference == "bbb")
        );
        assert_eq!(composer_lock("{").unwrap_err().0, 1);
        let nameless = r#"{"packages": [{"version": "1"}]}"#;
        assert!(composer_lock(nameless)
            .unwrap_err()
            .1
            .contains("without `name`"));
    }
}
