//! `requirements.yml` for `warm`: the `collections:` an Ansible project
//! installs (`- name: acme.web` with an optional `version:` specifier, or
//! a bare `- acme.web`), resolved the way `ansible-galaxy collection
//! install` resolves them through the server: the newest version the
//! specifier allows in the collection's `versions/` pages (prereleases
//! only when the specifier names one), its detail's `download_url` and
//! `artifact.sha256`, then each of its `metadata.dependencies` in turn.
//! Read as the block-style YAML `ansible-galaxy init` and the Ansible
//! documentation write; entries of another `type` (git, url, file) and
//! the `roles:` section are left out.

use std::collections::{HashSet, VecDeque};

use serde_json::Value;

use super::artifact::{Artifact, Check, Failure, Location};

/// Every `collections:` entry of `text`: (name, version specifier, `*`
/// when none is given).
pub fn requirements_yml(text: &str) -> Result<Vec<Artifact>, Failure> {
    // (name, specifier, type, line).
    let mut entries: Vec<(String, String, Option<String>, usize)> = Vec::new();
    let mut in_collections = false;
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = strip_comment(raw);
        if line.trim().is_empty() || line.trim() == "---" {
            continue;
        }
        if !line.starts_with([' ', '-']) {
            let (key, rest) = line.split_once(':').unwrap_or((line, ""));
            in_collections = key.trim() == "collections";
            if in_collections && !rest.trim().is_empty() {
                return Err((
                    line_no,
                    "`collections:` in flow style is not read: write one `- name:` per line".into(),
                ));
            }
            continue;
        }
        if !in_collections {
            continue;
        }
        let trimmed = line.trim_start();
        let (starts_item, field) = match trimmed.strip_prefix('-') {
            Some(rest) => (true, rest.trim()),
            None => (false, trimmed),
        };
        if starts_item {
            entries.push((String::new(), "*".into(), None, line_no));
        }
        let Some(entry) = entries.last_mut() else {
            return Err((line_no, "a field before the first `- ` entry".into()));
        };
        match field.split_once(':') {
            Some((key, value)) => {
                let value = unquote(value.trim()).to_string();
                match key.trim() {
                    "name" => entry.0 = value,
                    "version" => entry.1 = value,
                    "type" => entry.2 = Some(value),
                    _ => {}
                }
            }
            None if starts_item => entry.0 = unquote(field).to_string(),
            None => return Err((line_no, format!("{field:?} is not `key: value`"))),
        }
    }
    let mut requirements = Vec::new();
    for (name, spec, kind, line_no) in entries {
        if kind.as_deref().is_some_and(|k| k != "galaxy") {
            continue;
        }
        if name.split_once('.').is_none() {
            return Err((
                line_no,
                format!("{name:?} is not a collection name (`namespace.name`)"),
            ));
        }
        requirements.push(format!("{name}:{spec}"));
    }
    Ok(vec![Artifact {
        name: "requirements.yml".into(),
        location: Location::Galaxy(requirements),
        check: Check::Unchecked,
    }])
}

/// `line` without a `#` comment (one outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (at, c) in line.char_indices() {
        match (c, quote) {
            ('"' | '\'', None) => quote = Some(c),
            (c, Some(q)) if c == q => quote = None,
            ('#', None) if at == 0 || line[..at].ends_with(' ') => return &line[..at],
            _ => {}
        }
    }
    line
}

fn unquote(value: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
            return inner;
        }
    }
    value
}

/// The tarball of every collection `requirements` (`name:specifier`)
/// names and of everything they depend on, each once, with the sha256 its
/// detail declares; `base` is the remote on the server.
pub async fn tarballs(
    client: &reqwest::Client,
    base: &str,
    requirements: &[String],
) -> Result<Vec<Artifact>, String> {
    let galaxy = crate::kind::Kind::named("galaxy").ok_or("no galaxy kind")?;
    let packages = galaxy
        .packages()
        .ok_or("the galaxy kind names no packages")?;
    let mut queue: VecDeque<(String, String)> = requirements
        .iter()
        .filter_map(|r| r.split_once(':'))
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    let (mut seen, mut found) = (HashSet::new(), Vec::new());
    while let Some((name, spec)) = queue.pop_front() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let (namespace, collection) = name.split_once('.').ok_or("not namespace.name")?;
        let at = format!("{base}/api/v3/collections/{namespace}/{collection}/versions/");
        let allowed = packages.parse_versions(&spec)?;
        let wants_pre = spec.contains('-');
        let versions = listed_versions(client, base, &format!("{at}?limit=100")).await?;
        let newest = versions
            .iter()
            .filter(|v| allowed.contains(v))
            .filter_map(|v| Some((semver::Version::parse(v).ok()?, v)))
            .filter(|(parsed, _)| wants_pre || parsed.pre.is_empty())
            .max_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("{name}: no version on the server matches {spec:?}"))?;
        let detail = get_json(client, &format!("{at}{newest}/")).await?;
        let url = detail["download_url"]
            .as_str()
            .ok_or_else(|| format!("{name} {newest}: no download_url"))?;
        let check = detail["artifact"]["sha256"]
            .as_str()
            .map_or(Check::Unchecked, |hex| Check::Sha256(hex.to_string()));
        found.push(Artifact {
            name: format!("{name}@{newest}"),
            location: Location::Url(url.to_string()),
            check,
        });
        if let Some(dependencies) = detail["metadata"]["dependencies"].as_object() {
            for (dependency, spec) in dependencies {
                let spec = spec.as_str().unwrap_or("*").to_string();
                queue.push_back((dependency.clone(), spec));
            }
        }
    }
    Ok(found)
}

/// Every version the `versions/` pages from `first` list, following each
/// root-relative `links.next` on the server.
async fn listed_versions(
    client: &reqwest::Client,
    base: &str,
    first: &str,
) -> Result<Vec<String>, String> {
    let origin = url::Url::parse(base).map_err(|e| e.to_string())?;
    let mut next = Some(first.to_string());
    let mut versions = Vec::new();
    // A page links the next one: at most this many, against a loop.
    for _ in 0..1000 {
        let Some(page_url) = next.take() else {
            return Ok(versions);
        };
        let page = get_json(client, &page_url).await?;
        let listed = page["data"].as_array().or(page["results"].as_array());
        for release in listed.into_iter().flatten() {
            if let Some(version) = release["version"].as_str() {
                versions.push(version.to_string());
            }
        }
        next = page["links"]["next"]
            .as_str()
            .and_then(|link| origin.join(link).ok())
            .map(String::from);
    }
    Err(format!("{first}: more than 1000 pages"))
}

/// `GET url` as JSON, the failure as text.
async fn get_json(client: &reqwest::Client, url: &str) -> Result<Value, String> {
    super::get_json(client, url)
        .await
        .map_err(|e| format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collections_are_read_in_every_block_form_and_other_types_left_out() {
        let text = "---\nroles:\n  - name: geerlingguy.java\ncollections:\n  # the web tier\n  - name: acme.web\n    version: \">=1.0.0,<2.0.0\"  # pinned\n  - acme.base\n  - name: https://git.example/acme/tools.git\n    type: git\n  - name: 'acme.db'\n    version: 1.2.0\n";
        let read = requirements_yml(text).unwrap();
        assert_eq!(
            read[0].location,
            Location::Galaxy(vec![
                "acme.web:>=1.0.0,<2.0.0".into(),
                "acme.base:*".into(),
                "acme.db:1.2.0".into(),
            ])
        );
        let flow = requirements_yml("collections: [acme.web]\n").unwrap_err();
        assert_eq!(flow.0, 1);
        assert!(requirements_yml("collections:\n  - web\n").is_err());
    }
}
