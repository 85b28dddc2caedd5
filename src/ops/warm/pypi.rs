//! `warm`'s pypi side: the files of one `name==version` that a
//! requirements file pins, found on the remote's simple page (PEP 503 HTML
//! or PEP 691 JSON), with the hashes the lockfile gives.

use super::artifact::{Artifact, Check, Location};
use super::Places;

/// The files of `name==version` on the remote's simple page (PEP 503), those
/// with one of `hashes` when given.
pub(super) async fn files(
    client: &reqwest::Client,
    places: &Places,
    name: &str,
    version: &str,
    hashes: &[String],
) -> Result<Vec<Artifact>, String> {
    let page_url = format!("{}/simple/{}/", places.base, pep503(name));
    // The page is cached per variant: ask for the one pip asks for (JSON
    // first), and warm the HTML one too, for the other tools.
    let _ = client
        .get(&page_url)
        .header("accept", "text/html")
        .send()
        .await;
    let response = client
        .get(&page_url)
        .header("accept", PIP_ACCEPT)
        .send()
        .await
        .map_err(|e| format!("{page_url}: {}", e.without_url()))?;
    if !response.status().is_success() {
        return Err(format!(
            "{page_url}: the server answered {}",
            response.status().as_u16()
        ));
    }
    let json = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().ends_with(b"json"));
    let page = response
        .text()
        .await
        .map_err(|e| format!("{page_url}: {}", e.without_url()))?;
    let links = if json {
        json_links(&page).map_err(|e| format!("{page_url}: {e}"))?
    } else {
        hrefs(&page)
    };
    let base = url::Url::parse(&page_url).map_err(|e| e.to_string())?;
    let mut files = Vec::new();
    for href in links {
        let Ok(url) = base.join(&href) else { continue };
        let file = url
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        if distribution_of(&file) != Some((pep503(name), version)) {
            continue;
        }
        let fragment = url
            .fragment()
            .and_then(|f| f.strip_prefix("sha256="))
            .map(str::to_ascii_lowercase);
        let check = match (&fragment, hashes.is_empty()) {
            (Some(sha), false) if hashes.contains(sha) => Check::Sha256Any(hashes.to_vec()),
            (_, false) => continue,
            (Some(sha), true) => Check::Sha256(sha.clone()),
            (None, true) => Check::Unchecked,
        };
        let mut url = url;
        url.set_fragment(None);
        if !url.as_str().starts_with(&format!("{}/", places.base)) {
            return Err(format!("{page_url} links {file} off the server"));
        }
        files.push(Artifact {
            name: file,
            location: Location::Url(url.into()),
            check,
        });
    }
    if files.is_empty() {
        return Err(format!(
            "no file of {name}=={version}{} on {page_url}",
            if hashes.is_empty() {
                ""
            } else {
                " with a listed hash"
            }
        ));
    }
    Ok(files)
}

/// The `Accept` header pip sends for a simple page (PEP 691).
const PIP_ACCEPT: &str = "application/vnd.pypi.simple.v1+json, \
     application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01";

/// The files of a PEP 691 JSON simple page, as `url#sha256=…` links.
fn json_links(page: &str) -> Result<Vec<String>, serde_json::Error> {
    let page: serde_json::Value = serde_json::from_str(page)?;
    Ok(page["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|file| {
            let url = file["url"].as_str()?;
            Some(match file["hashes"]["sha256"].as_str() {
                Some(sha) => format!("{url}#sha256={sha}"),
                None => url.to_string(),
            })
        })
        .collect())
}

/// PEP 503's normalised project name.
fn pep503(name: &str) -> String {
    use crate::kind::Packages as _;
    crate::kind::pypi::Pypi.normalise(name)
}

/// (normalised project, version) of a wheel or sdist file name.
fn distribution_of(file: &str) -> Option<(String, &str)> {
    let (project, version) = match file.strip_suffix(".whl") {
        Some(stem) => {
            let mut parts = stem.split('-');
            (parts.next()?, parts.next()?)
        }
        None => [".tar.gz", ".zip", ".tar.bz2"]
            .iter()
            .find_map(|ext| file.strip_suffix(ext))?
            .rsplit_once('-')?,
    };
    Some((pep503(project), version))
}

/// The `href` values of a simple page's anchors, `&amp;` decoded.
fn hrefs(page: &str) -> Vec<String> {
    page.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|href| href.replace("&amp;", "&"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_page_files_are_matched_by_normalised_name_and_version() {
        assert_eq!(pep503("Foo_Bar..baz"), "foo-bar-baz");
        assert_eq!(
            distribution_of("Foo_Bar-1.0-py3-none-any.whl"),
            Some(("foo-bar".into(), "1.0"))
        );
        assert_eq!(
            distribution_of("foo-bar-1.0.tar.gz"),
            Some(("foo-bar".into(), "1.0"))
        );
        assert_eq!(distribution_of("foo-1.0.exe"), None);
        assert_eq!(
            json_links(r#"{"files": [{"url": "a.whl", "hashes": {"sha256": "ab"}}, {"url": "b.zip", "hashes": {}}]}"#).unwrap(),
            ["a.whl#sha256=ab", "b.zip"]
        );
        assert_eq!(
            hrefs("<a href=\"../../p/a.whl#sha256=ab\">a</a><a href=\"x?a=1&amp;b=2\">"),
            ["../../p/a.whl#sha256=ab", "x?a=1&b=2"]
        );
    }
}
