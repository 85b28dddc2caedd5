//! `Chart.lock` for `warm`: every dependency on a chart repository over
//! HTTP (not `oci://`, `file://` or a repository alias), found where Helm
//! finds it through the proxy: its record in the remote's `index.yaml`, whose
//! first URL (re-pointed at the proxy, or relative to the repository) is
//! fetched and checked against the record's `digest` (sha256).

use crate::kind::helm::chart_in_index;

use super::artifact::{Artifact, Check, Failure, Location};

/// One `dependencies:` entry being read: where it starts and its fields.
#[derive(Default)]
struct Dependency {
    line: usize,
    name: Option<String>,
    version: Option<String>,
    repository: Option<String>,
}

impl Dependency {
    /// The chart to fetch, if it is on a repository over HTTP.
    fn artifact(self) -> Result<Option<Artifact>, Failure> {
        let (Some(name), Some(version)) = (self.name, self.version) else {
            return Err((
                self.line,
                "a dependency without `name` and `version`".into(),
            ));
        };
        let http = self
            .repository
            .is_some_and(|r| r.starts_with("http://") || r.starts_with("https://"));
        Ok(http.then(|| Artifact {
            name: format!("{name}@{version}"),
            location: Location::Chart { name, version },
            check: Check::Unchecked,
        }))
    }
}

pub fn chart_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let (mut artifacts, mut in_dependencies) = (Vec::new(), false);
    let mut current: Option<Dependency> = None;
    for (idx, line) in text.lines().enumerate() {
        if !line.starts_with([' ', '-']) {
            if let Some(dep) = current.take() {
                artifacts.extend(dep.artifact()?);
            }
            in_dependencies = line.trim_end() == "dependencies:";
            continue;
        }
        if !in_dependencies {
            continue;
        }
        let item = line.trim_start();
        let field = match item.strip_prefix("- ") {
            Some(first) => {
                if let Some(dep) = current.take() {
                    artifacts.extend(dep.artifact()?);
                }
                current = Some(Dependency {
                    line: idx + 1,
                    ..Dependency::default()
                });
                first
            }
            None => item,
        };
        let (Some(dep), Some((key, value))) = (current.as_mut(), field.split_once(':')) else {
            continue;
        };
        let value = Some(value.trim().trim_matches('"').to_string());
        match key.trim() {
            "name" => dep.name = value,
            "version" => dep.version = value,
            "repository" => dep.repository = value,
            _ => {}
        }
    }
    if let Some(dep) = current.take() {
        artifacts.extend(dep.artifact()?);
    }
    Ok(artifacts)
}

/// The URL on the server of chart `name` at `version` (its index record's
/// first URL, resolved against the repository) and the digest to check.
pub async fn chart(
    client: &reqwest::Client,
    base: &str,
    name: &str,
    version: &str,
) -> Result<(String, Check), String> {
    let index = format!("{base}/index.yaml");
    let body = client
        .get(&index)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| format!("{index}: {}", e.without_url()))?
        .bytes()
        .await
        .map_err(|e| format!("{index}: {}", e.without_url()))?;
    let (url, digest) = chart_in_index(&body, name, version)
        .ok_or_else(|| format!("{index} lists no {name} {version}"))?;
    let url = url::Url::parse(&format!("{base}/"))
        .and_then(|b| b.join(&url))
        .map_err(|e| format!("{url}: {e}"))?;
    let check = digest.map_or(Check::Unchecked, |hex| {
        Check::Sha256(hex.trim_start_matches("sha256:").to_ascii_lowercase())
    });
    Ok((url.to_string(), check))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_on_http_repositories_are_read() {
        let lock = "dependencies:\n- name: postgresql\n  repository: https://charts.bitnami.com/bitnami\n  version: 12.1.2\n- name: local\n  repository: file://../local\n  version: 0.1.0\n- name: redis\n  repository: oci://registry-1.docker.io/bitnamicharts\n  version: 18.0.0\ndigest: sha256:abc\ngenerated: \"2024-01-01T00:00:00Z\"\n";
        let found = chart_lock(lock).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "postgresql@12.1.2");
        assert_eq!(
            found[0].location,
            Location::Chart {
                name: "postgresql".into(),
                version: "12.1.2".into()
            }
        );
        let bad = "dependencies:\n- repository: https://x\n";
        assert_eq!(chart_lock(bad).unwrap_err().0, 2);
    }
}
