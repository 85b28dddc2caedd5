//! `warm` for a huggingface remote: each name is `repo[@revision]`
//! (`org/model`, `datasets/org/data@v1`, `gpt2@<commit>`), read as
//! `snapshot_download` reads it: the revision's commit from the repository
//! info, then every file of the recursive tree listing at that commit
//! (following its `Link` pages), each fetched by commit and checked against
//! its LFS sha256 when it has one.

use super::lockfile::{Artifact, Check, Location};
use crate::kind::huggingface::{api_paths, is_commit, split_snapshot};

/// The files of every snapshot `names` names, through the server at `base`
/// (`{server}/{remote}`).
pub async fn artifacts(
    client: &reqwest::Client,
    base: &str,
    names: &[String],
) -> anyhow::Result<Vec<Artifact>> {
    let mut artifacts = Vec::new();
    for name in names {
        let (repo, revision) = split_snapshot(name).ok_or_else(|| {
            anyhow::anyhow!("{name:?} is not a repository name, optionally with @revision")
        })?;
        let (info, _) = api_paths(repo, revision);
        let commit = if is_commit(revision) {
            revision.to_string()
        } else {
            let info = get_json(client, &format!("{base}/{info}")).await?.0;
            info["sha"]
                .as_str()
                .filter(|sha| is_commit(sha))
                .ok_or_else(|| anyhow::anyhow!("{name}: the repository info has no commit"))?
                .to_string()
        };
        let (_, tree) = api_paths(repo, &commit);
        let mut next = Some(format!("{base}/{tree}"));
        while let Some(url) = next.take() {
            let (page, link) = get_json(client, &url).await?;
            for file in page.as_array().into_iter().flatten() {
                if file["type"] != "file" {
                    continue;
                }
                let Some(path) = file["path"].as_str() else {
                    continue;
                };
                let check = match file["lfs"]["oid"].as_str() {
                    Some(sha) => Check::Sha256(sha.to_ascii_lowercase()),
                    None => Check::Unchecked,
                };
                artifacts.push(Artifact {
                    name: format!("{repo}@{}/{path}", &commit[..12]),
                    location: Location::Path(format!("{repo}/resolve/{commit}/{}", quote(path))),
                    check,
                });
            }
            next = link.as_deref().and_then(next_page).map(str::to_string);
            if next.as_deref().is_some_and(|n| !n.starts_with(base)) {
                anyhow::bail!("{name}: the tree's next page is not on the server");
            }
        }
    }
    Ok(artifacts)
}

/// A file's path with each segment percent-encoded as `huggingface_hub`
/// quotes it.
fn quote(path: &str) -> String {
    const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(path, KEEP).to_string()
}

/// The `rel="next"` URL of a `Link` header.
fn next_page(link: &str) -> Option<&str> {
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .contains("rel=\"next\"")
            .then(|| url.trim().trim_start_matches('<').trim_end_matches('>'))
    })
}

/// `GET url` as JSON, with its `Link` header.
async fn get_json(
    client: &reqwest::Client,
    url: &str,
) -> anyhow::Result<(serde_json::Value, Option<String>)> {
    let response = client
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| anyhow::anyhow!("fetching {url}: {}", e.without_url()))?;
    let link = response
        .headers()
        .get("link")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = response
        .bytes()
        .await
        .map_err(|e| anyhow::anyhow!("reading {url}: {}", e.without_url()))?;
    let json =
        serde_json::from_slice(&body).map_err(|e| anyhow::anyhow!("{url} is not JSON: {e}"))?;
    Ok((json, link))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_read_from_link_and_paths_are_quoted() {
        assert_eq!(
            next_page("<http://p/hf/api/models/a/b/tree/x?cursor=2>; rel=\"next\""),
            Some("http://p/hf/api/models/a/b/tree/x?cursor=2")
        );
        assert_eq!(next_page("<http://p/x>; rel=\"xet-auth\""), None);
        assert_eq!(quote("dir/a b+c.bin"), "dir/a%20b%2Bc.bin");
    }
}
