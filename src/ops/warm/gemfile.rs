//! `Gemfile.lock` for `warm`: every gem of a `GEM` section's `specs:` (four
//! spaces in: `name (version[-platform])`) at `gems/<name>-<version>.gem`,
//! checked against the `CHECKSUMS` section's `sha256=` where the lockfile
//! has one (Bundler 2.5 and later), else unchecked (the proxy still checks
//! each `.gem` against what `info/<gem>` declared once it has read it).

use std::collections::HashMap;

use super::artifact::{Artifact, Check, Failure, Location};

/// `name (version)` → (name, version).
fn spec(line: &str) -> Option<(&str, &str)> {
    let (name, rest) = line.trim().split_once(" (")?;
    let version = rest.split(')').next()?;
    (!name.is_empty() && !version.is_empty() && !version.contains(' ')).then_some((name, version))
}

pub fn gemfile_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let mut sums: HashMap<String, String> = HashMap::new();
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') {
            section = line.trim();
        } else if section == "CHECKSUMS" {
            let (name_version, sum) = line.trim().rsplit_once(' ').unwrap_or((line, ""));
            if let (Some((name, version)), Some(hex)) =
                (spec(name_version), sum.strip_prefix("sha256="))
            {
                sums.insert(format!("{name}-{version}"), hex.to_ascii_lowercase());
            }
        }
    }
    let (mut artifacts, mut section, mut in_specs) = (Vec::new(), "", false);
    for (idx, line) in text.lines().enumerate() {
        if !line.starts_with(' ') {
            (section, in_specs) = (line.trim(), false);
            continue;
        }
        if section != "GEM" {
            continue;
        }
        if line.trim() == "specs:" {
            in_specs = true;
            continue;
        }
        let depth = line.len() - line.trim_start().len();
        if !in_specs || depth != 4 {
            continue;
        }
        let (name, version) = spec(line).ok_or_else(|| {
            (
                idx + 1,
                "expected `name (version)` under specs:".to_string(),
            )
        })?;
        let file = format!("{name}-{version}");
        artifacts.push(Artifact {
            name: format!("{name}@{version}"),
            check: sums
                .get(&file)
                .map_or(Check::Unchecked, |hex| Check::Sha256(hex.clone())),
            location: Location::Path(format!("gems/{file}.gem")),
        });
    }
    Ok(artifacts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gem_sections_specs_and_checksums() {
        let sum = "AB".repeat(32);
        let lock = format!(
            "GIT\n  remote: https://example.com/x.git\n  specs:\n    x (0.1.0)\n\n\
             GEM\n  remote: https://rubygems.org/\n  specs:\n    mc-alpha (1.0.0)\n    mc-beta (1.0.0)\n      \
             mc-alpha (>= 1.0)\n    nokogiri (1.16.0-x86_64-linux)\n\nPLATFORMS\n  ruby\n\n\
             DEPENDENCIES\n  mc-beta\n\nCHECKSUMS\n  mc-alpha (1.0.0) sha256={sum}\n\nBUNDLED WITH\n   2.5.0\n"
        );
        let artifacts = gemfile_lock(&lock).unwrap();
        let paths: Vec<_> = artifacts
            .iter()
            .map(|a| match &a.location {
                Location::Path(p) => p.as_str(),
                _ => "",
            })
            .collect();
        assert_eq!(
            paths,
            [
                "gems/mc-alpha-1.0.0.gem",
                "gems/mc-beta-1.0.0.gem",
                "gems/nokogiri-1.16.0-x86_64-linux.gem"
            ]
        );
        assert_eq!(artifacts[0].check, Check::Sha256(sum.to_ascii_lowercase()));
        assert_eq!(artifacts[1].check, Check::Unchecked);
        assert_eq!(
            gemfile_lock("GEM\n  specs:\n    broken\n").unwrap_err().0,
            3
        );
    }
}
