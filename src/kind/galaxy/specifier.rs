//! Galaxy's version specifiers as `ansible-galaxy` reads them
//! (`ansible/galaxy/dependency_resolution/versioning.py`,
//! `meets_requirements`): requirements `== = != > >= < <=` (a bare version
//! is `==`) joined by `,`, all of which must hold; `*` is any version.
//! Versions are semantic versions compared as `SemanticVersion` does (build
//! metadata ignored, a prerelease before its release); a requirement's
//! version may be loose (`1.2` is `1.2.0`).

use std::cmp::Ordering;

use super::super::guard::{leading_operator, VersionSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Op {
    fn holds(self, order: Ordering) -> bool {
        match self {
            Op::Eq => order == Ordering::Equal,
            Op::Ne => order != Ordering::Equal,
            Op::Gt => order == Ordering::Greater,
            Op::Ge => order != Ordering::Less,
            Op::Lt => order == Ordering::Less,
            Op::Le => order != Ordering::Greater,
        }
    }
}

/// A strict semantic version, build metadata dropped.
fn version(text: &str) -> Option<semver::Version> {
    let mut version = semver::Version::parse(text.trim()).ok()?;
    version.build = semver::BuildMetadata::EMPTY;
    Some(version)
}

/// A requirement's version: a loose one padded with zeros to three parts.
fn loose(text: &str) -> Option<semver::Version> {
    let text = text.trim();
    let (release, rest) = match text.find(['-', '+']) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let parts = release.split('.').count();
    if parts == 0 || parts > 3 {
        return None;
    }
    let padded = format!("{release}{}{rest}", ".0".repeat(3 - parts));
    version(&padded)
}

/// A Galaxy version specifier.
#[derive(Debug, Clone)]
pub struct Specifier {
    /// Every requirement must hold; `*` adds none.
    requirements: Vec<(Op, semver::Version)>,
}

impl Specifier {
    pub fn parse(text: &str) -> Result<Specifier, String> {
        let mut requirements = Vec::new();
        for item in text.split(',') {
            let item = item.trim();
            let (op, rest) = leading_operator(
                item,
                &[
                    ("==", Op::Eq),
                    ("!=", Op::Ne),
                    (">=", Op::Ge),
                    ("<=", Op::Le),
                    ("=", Op::Eq),
                    (">", Op::Gt),
                    ("<", Op::Lt),
                ],
                Op::Eq,
            );
            if rest.trim() == "*" {
                continue;
            }
            let Some(at) = loose(rest) else {
                return Err(format!(
                    "{item:?} is not a Galaxy version requirement (`1.2.0`, `>=1.0.0,<2.0.0`, `!=1.1.0`, `*`)"
                ));
            };
            requirements.push((op, at));
        }
        Ok(Specifier { requirements })
    }
}

impl VersionSet for Specifier {
    fn contains(&self, text: &str) -> bool {
        let Some(candidate) = version(text) else {
            return false;
        };
        self.requirements
            .iter()
            .all(|(op, at)| op.holds(candidate.cmp(at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_hold_together_as_meets_requirements_says() {
        for (spec, version, holds) in [
            ("1.2.0", "1.2.0", true),
            ("1.2", "1.2.0", true),
            ("==1.2.0", "1.2.1", false),
            ("!=1.2.0", "1.2.1", true),
            (">=1.0.0,<2.0.0", "1.9.9", true),
            (">=1.0.0,<2.0.0", "2.0.0", false),
            (">=1.0.0,<2.0.0", "2.0.0-rc.1", true),
            (">1.0.0", "1.0.0+build.5", false),
            ("<=1.0.0", "1.0.0-beta.2", true),
            ("*", "0.0.1", true),
            (">=1.0.0, !=1.5.0", "1.5.0", false),
            ("1.0.0", "not-a-version", false),
        ] {
            let parsed = Specifier::parse(spec).unwrap();
            assert_eq!(parsed.contains(version), holds, "{spec} {version}");
        }
        assert!(Specifier::parse(">=one").is_err());
        assert!(Specifier::parse("1.2.3.4").is_err());
    }
}
