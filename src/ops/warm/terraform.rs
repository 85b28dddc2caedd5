//! `.terraform.lock.hcl` for `warm`: every `provider "{host}/{ns}/{type}"`
//! block's `version`, found where `tofu init` finds it through a network
//! mirror: the remote's `{host}/{ns}/{type}/{version}.json`, whose archives
//! with one of the block's `zh:` hashes (every archive, when it has none)
//! are fetched and checked against it.

use super::artifact::{Artifact, Check, Failure, Location};

/// One `provider` block being read.
struct Block {
    line: usize,
    address: String,
    version: Option<String>,
    hashes: Vec<String>,
}

impl Block {
    fn artifact(self) -> Result<Artifact, Failure> {
        let Some(version) = self.version else {
            return Err((
                self.line,
                format!("provider {:?} has no `version`", self.address),
            ));
        };
        if self.address.split('/').count() != 3 {
            return Err((
                self.line,
                format!(
                    "{:?} is not a provider address (host/namespace/type)",
                    self.address
                ),
            ));
        }
        Ok(Artifact {
            name: format!("{}@{version}", self.address),
            location: Location::Provider {
                address: self.address,
                version,
                hashes: self.hashes,
            },
            check: Check::Unchecked,
        })
    }
}

/// The quoted string at the start of `text`.
fn quoted(text: &str) -> Option<&str> {
    let rest = text.trim().strip_prefix('"')?;
    rest.split('"').next()
}

pub fn lock_hcl(text: &str) -> Result<Vec<Artifact>, Failure> {
    let (mut artifacts, mut current) = (Vec::new(), None::<Block>);
    for (idx, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("provider ") {
            if let Some(block) = current.take() {
                artifacts.push(block.artifact()?);
            }
            let address =
                quoted(rest).ok_or((idx + 1, "a provider block without an address".into()))?;
            current = Some(Block {
                line: idx + 1,
                address: address.to_ascii_lowercase(),
                version: None,
                hashes: Vec::new(),
            });
            continue;
        }
        let Some(block) = current.as_mut() else {
            continue;
        };
        if let Some((key, value)) = line.split_once('=') {
            if key.trim() == "version" {
                block.version = quoted(value).map(str::to_string);
            }
        }
        if let Some(hash) = quoted(line).filter(|h| h.starts_with("zh:")) {
            block
                .hashes
                .push(hash.trim_start_matches("zh:").to_ascii_lowercase());
        }
    }
    if let Some(block) = current.take() {
        artifacts.push(block.artifact()?);
    }
    Ok(artifacts)
}

/// The archives on the server of provider `address` at `version` that
/// `hashes` (sha256 hex; empty: any) name, each with its check.
pub async fn archives(
    client: &reqwest::Client,
    base: &str,
    address: &str,
    version: &str,
    hashes: &[String],
) -> Result<Vec<(String, Check)>, String> {
    let url = format!("{base}/{address}/{version}.json");
    let meta = super::get_json(client, &url)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let at = url::Url::parse(&url).map_err(|e| format!("{url}: {e}"))?;
    let mut found = Vec::new();
    for archive in meta["archives"]
        .as_object()
        .into_iter()
        .flat_map(|a| a.values())
    {
        let zh = archive["hashes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h.as_str()?.strip_prefix("zh:"))
            .map(str::to_ascii_lowercase)
            .next();
        let Some(zh) = zh.filter(|zh| hashes.is_empty() || hashes.contains(zh)) else {
            continue;
        };
        let link = archive["url"].as_str().unwrap_or_default();
        let archive_url = at.join(link).map_err(|e| format!("{link}: {e}"))?;
        found.push((archive_url.to_string(), Check::Sha256(zh)));
    }
    if found.is_empty() {
        return Err(format!("{url} lists no archive the lockfile's hashes name"));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_blocks_are_read_with_their_zh_hashes() {
        let lock = "# This file is maintained automatically by \"tofu init\".\n\nprovider \"registry.opentofu.org/hashicorp/null\" {\n  version     = \"3.2.0\"\n  constraints = \"~> 3.0\"\n  hashes = [\n    \"h1:abc=\",\n    \"zh:ABCD\",\n    \"zh:ef01\",\n  ]\n}\n";
        let found = lock_hcl(lock).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "registry.opentofu.org/hashicorp/null@3.2.0");
        assert_eq!(
            found[0].location,
            Location::Provider {
                address: "registry.opentofu.org/hashicorp/null".into(),
                version: "3.2.0".into(),
                hashes: vec!["abcd".into(), "ef01".into()],
            }
        );
        assert_eq!(lock_hcl("provider \"a/b/c\" {\n}\n").unwrap_err().0, 1);
    }
}
