//! Terraform's version constraints (`>= 1.2.0, < 2.0`, `~> 1.2`, `!= 1.3.0`,
//! a bare version meaning exactly it): comma-separated comparisons that
//! must all hold. `~> X.Y` allows the last given part to rise (`~> 1.2` is
//! `>= 1.2, < 2.0`; `~> 1.2.3` is `>= 1.2.3, < 1.3.0`).

use nodejs_semver::Version;

use crate::kind::guard::{leading_operator, VersionSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    /// `~>` with the number of parts written.
    Pessimistic(usize),
}

pub(super) struct Constraint(Vec<(Op, Version)>);

/// A version as Terraform writes it, missing parts as zero (`1.2` is
/// `1.2.0`); with the number of numeric parts written.
fn read(text: &str) -> Option<(Version, usize)> {
    let text = text.trim().trim_start_matches('v');
    let (core, rest) = match text.find(['-', '+']) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty()
        || parts.len() > 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let mut padded = parts.clone();
    padded.resize(3, "0");
    let version = Version::parse(format!("{}{rest}", padded.join("."))).ok()?;
    Some((version, parts.len()))
}

impl Constraint {
    pub(super) fn parse(text: &str) -> Result<Constraint, String> {
        let mut comparisons = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let (op, rest) = leading_operator(
                part,
                &[
                    ("~>", Op::Pessimistic(0)),
                    (">=", Op::Ge),
                    ("<=", Op::Le),
                    ("!=", Op::Ne),
                    (">", Op::Gt),
                    ("<", Op::Lt),
                    ("=", Op::Eq),
                ],
                Op::Eq,
            );
            let (version, parts) =
                read(rest).ok_or_else(|| format!("{:?} is not a version", rest.trim()))?;
            let op = match op {
                Op::Pessimistic(_) => Op::Pessimistic(parts),
                op => op,
            };
            comparisons.push((op, version));
        }
        Ok(Constraint(comparisons))
    }
}

/// The first version `~>` no longer allows: the part before the last
/// written one raised (`~> 1.2` → `2.0.0`, `~> 1.2.3` → `1.3.0`; `~> 1`
/// → `2.0.0`).
fn ceiling(base: &Version, parts: usize) -> Version {
    let (major, minor) = match parts {
        3 => (base.major(), base.minor() + 1),
        _ => (base.major() + 1, 0),
    };
    Version::parse(format!("{major}.{minor}.0")).expect("numbers make a version")
}

impl VersionSet for Constraint {
    fn contains(&self, version: &str) -> bool {
        let Some((version, _)) = read(version) else {
            return false;
        };
        self.0.iter().all(|(op, wanted)| match op {
            Op::Eq => version == *wanted,
            Op::Ne => version != *wanted,
            Op::Gt => version > *wanted,
            Op::Ge => version >= *wanted,
            Op::Lt => version < *wanted,
            Op::Le => version <= *wanted,
            Op::Pessimistic(parts) => version >= *wanted && version < ceiling(wanted, *parts),
        })
    }
}
