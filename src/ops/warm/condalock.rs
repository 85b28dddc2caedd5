//! `pixi.lock` and `conda-lock.yml` for `warm`: every conda package each
//! names, at its URL mapped onto the remote (a channel on the remote's
//! mirror, `https://conda.anaconda.org/conda-forge/…`, is
//! `/{remote}/conda-forge/…`), checked against its `sha256` where the lock
//! has one. PyPI packages of either lock are left out (a pypi remote warms
//! them). Read line by line: both files are YAML written by their tools in
//! one layout (`- conda: <url>` then its keys, in pixi's `packages:`;
//! `- name:` entries with `manager:`, `url:` and `hash: sha256:` in
//! conda-lock's `package:`).

use super::artifact::{Artifact, Check, Failure, Location};

/// One package being read: its URL, whether it is a conda one, its sha256.
#[derive(Default)]
struct Entry {
    url: Option<String>,
    conda: bool,
    sha256: Option<String>,
}

impl Entry {
    fn artifact(self) -> Option<Artifact> {
        let url = self.url.filter(|_| self.conda)?;
        let file = url.rsplit('/').next().unwrap_or(&url).to_string();
        Some(Artifact {
            name: file,
            location: Location::Resolved(url),
            check: self.sha256.map_or(Check::Unchecked, |hex| {
                Check::Sha256(hex.to_ascii_lowercase())
            }),
        })
    }
}

/// A `key: value` line's value, unquoted.
fn value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line
        .trim_start()
        .strip_prefix("- ")
        .unwrap_or(line.trim_start());
    let value = rest.strip_prefix(key)?.strip_prefix(':')?.trim();
    Some(value.trim_matches(|c| c == '\'' || c == '"'))
}

/// Both formats: a list item starts an entry; `conda:` (pixi) or
/// `manager: conda` with `url:` (conda-lock) make it a conda package.
pub fn conda_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let (mut artifacts, mut entry, mut in_list) = (Vec::new(), None::<Entry>, false);
    for line in text.lines() {
        if !line.starts_with(' ') && !line.starts_with('-') {
            // A top-level key: pixi's `packages:`, conda-lock's `package:`.
            artifacts.extend(entry.take().and_then(Entry::artifact));
            in_list = matches!(line.trim_end(), "packages:" | "package:");
            continue;
        }
        if !in_list {
            continue;
        }
        if line.starts_with("- ") {
            artifacts.extend(entry.take().and_then(Entry::artifact));
            entry = Some(Entry::default());
        }
        let Some(current) = entry.as_mut() else {
            continue;
        };
        if let Some(url) = value(line, "conda") {
            (current.url, current.conda) = (Some(url.to_string()), true);
        } else if let Some(url) = value(line, "url") {
            current.url = Some(url.to_string());
        } else if let Some(manager) = value(line, "manager") {
            current.conda = manager == "conda";
        } else if let Some(hex) = value(line, "sha256") {
            current.sha256 = Some(hex.to_string());
        }
    }
    artifacts.extend(entry.take().and_then(Entry::artifact));
    if artifacts.is_empty() && !text.contains("version:") {
        return Err((1, "no `version:`: not a pixi.lock or conda-lock.yml".into()));
    }
    Ok(artifacts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<(String, Check)> {
        conda_lock(text)
            .unwrap()
            .into_iter()
            .map(|a| match a.location {
                Location::Resolved(url) => (url, a.check),
                _ => (String::new(), a.check),
            })
            .collect()
    }

    #[test]
    fn pixi_lock_conda_packages_with_their_sha256() {
        let lock = format!(
            "version: 6\nenvironments:\n  default:\n    channels:\n    - url: https://conda.anaconda.org/conda-forge/\n    packages:\n      linux-64:\n      - conda: https://conda.anaconda.org/conda-forge/linux-64/zlib-1.3-h0.conda\n\
             packages:\n- conda: https://conda.anaconda.org/conda-forge/linux-64/zlib-1.3-h0.conda\n  sha256: {}\n  md5: aa\n  size: 1\n\
             - pypi: https://files.pythonhosted.org/packages/x/six-1.16.0-py2.py3-none-any.whl\n  name: six\n  sha256: {}\n\
             - conda: https://conda.anaconda.org/conda-forge/noarch/tzdata-2024a-h0.conda\n",
            "AB".repeat(32),
            "cd".repeat(32)
        );
        assert_eq!(
            read(&lock),
            [
                (
                    "https://conda.anaconda.org/conda-forge/linux-64/zlib-1.3-h0.conda".into(),
                    Check::Sha256("ab".repeat(32))
                ),
                (
                    "https://conda.anaconda.org/conda-forge/noarch/tzdata-2024a-h0.conda".into(),
                    Check::Unchecked
                ),
            ]
        );
    }

    #[test]
    fn conda_lock_yml_conda_entries_with_their_sha256() {
        let lock = format!(
            "version: 1\nmetadata:\n  platforms:\n  - linux-64\npackage:\n\
             - name: zlib\n  version: '1.3'\n  manager: conda\n  platform: linux-64\n  dependencies: {{}}\n  url: https://conda.anaconda.org/conda-forge/linux-64/zlib-1.3-h0.conda\n  hash:\n    md5: aa\n    sha256: {}\n  category: main\n\
             - name: six\n  version: 1.16.0\n  manager: pip\n  url: https://files.pythonhosted.org/six.whl\n  hash:\n    sha256: {}\n",
            "ef".repeat(32),
            "12".repeat(32)
        );
        assert_eq!(
            read(&lock),
            [(
                "https://conda.anaconda.org/conda-forge/linux-64/zlib-1.3-h0.conda".into(),
                Check::Sha256("ef".repeat(32))
            )]
        );
        assert!(conda_lock("hello: world\n").is_err());
    }
}
