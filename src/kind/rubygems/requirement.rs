//! RubyGems versions and requirements as `Gem::Version` and
//! `Gem::Requirement` read them: segments split at `.` and where digits meet
//! letters, a letter segment making a prerelease that sorts before its
//! release; requirements `= != > < >= <= ~>` joined by `,` (all must hold).

use std::cmp::Ordering;

use super::super::guard::{leading_operator, VersionSet};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Number(u64),
    Text(String),
}

/// A version's segments, trailing zeros dropped (`1.0` is `1`).
fn segments(version: &str) -> Option<Vec<Segment>> {
    let mut out = Vec::new();
    for part in version.trim().split('.') {
        let mut rest = part;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 {
                out.push(Segment::Number(rest[..digits].parse().ok()?));
                rest = &rest[digits..];
            } else {
                let letters = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
                let text = rest[..letters].trim_matches('-');
                if !text.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return None;
                }
                if !text.is_empty() {
                    out.push(Segment::Text(text.to_string()));
                }
                rest = &rest[letters..];
            }
        }
    }
    if out.is_empty() || !matches!(out[0], Segment::Number(_)) {
        return None;
    }
    while out.len() > 1 && out.last() == Some(&Segment::Number(0)) {
        out.pop();
    }
    Some(out)
}

fn compare(a: &[Segment], b: &[Segment]) -> Ordering {
    let len = a.len().max(b.len());
    for i in 0..len {
        let zero = Segment::Number(0);
        let (x, y) = (a.get(i).unwrap_or(&zero), b.get(i).unwrap_or(&zero));
        let order = match (x, y) {
            (Segment::Number(x), Segment::Number(y)) => x.cmp(y),
            (Segment::Text(x), Segment::Text(y)) => x.cmp(y),
            // A prerelease segment sorts before any number.
            (Segment::Text(_), Segment::Number(_)) => Ordering::Less,
            (Segment::Number(_), Segment::Text(_)) => Ordering::Greater,
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    Ordering::Equal
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    Pessimistic,
}

/// `~> 1.2.3`'s upper bound: the release segments but the last, the new
/// last one bumped (`1.3`); `~> 1` is `< 2`.
fn bump(version: &[Segment]) -> Vec<Segment> {
    let mut release: Vec<u64> = version
        .iter()
        .map_while(|s| match s {
            Segment::Number(n) => Some(*n),
            Segment::Text(_) => None,
        })
        .collect();
    if release.len() > 1 {
        release.pop();
    }
    if let Some(last) = release.last_mut() {
        *last += 1;
    }
    release.into_iter().map(Segment::Number).collect()
}

/// A `Gem::Requirement`: every clause must hold.
#[derive(Debug, Clone)]
pub struct Requirement(Vec<(Op, Vec<Segment>, String)>);

impl Requirement {
    pub fn parse(text: &str) -> Result<Requirement, String> {
        let mut clauses = Vec::new();
        for clause in text.split(',') {
            let clause = clause.trim();
            let (op, rest) = leading_operator(
                clause,
                &[
                    ("~>", Op::Pessimistic),
                    (">=", Op::Ge),
                    ("<=", Op::Le),
                    ("!=", Op::Ne),
                    (">", Op::Gt),
                    ("<", Op::Lt),
                    ("=", Op::Eq),
                ],
                Op::Eq,
            );
            let version = segments(rest).ok_or_else(|| {
                format!("{text:?} is not a RubyGems requirement (`~> 1.2`, `>= 1.0, < 2`)")
            })?;
            clauses.push((op, version, rest.trim().to_string()));
        }
        Ok(Requirement(clauses))
    }
}

impl VersionSet for Requirement {
    fn contains(&self, version: &str) -> bool {
        // `1.1.0-x86_64-linux`: the version before the platform.
        let version = version.split('-').next().unwrap_or(version);
        let Some(v) = segments(version) else {
            return false;
        };
        self.0.iter().all(|(op, r, _)| {
            let order = compare(&v, r);
            match op {
                Op::Eq => order == Ordering::Equal,
                Op::Ne => order != Ordering::Equal,
                Op::Gt => order == Ordering::Greater,
                Op::Lt => order == Ordering::Less,
                Op::Ge => order != Ordering::Less,
                Op::Le => order != Ordering::Greater,
                Op::Pessimistic => {
                    order != Ordering::Less && compare(&v, &bump(r)) == Ordering::Less
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_hold_as_rubygems_reads_them() {
        let holds = |r: &str, v: &str| Requirement::parse(r).unwrap().contains(v);
        assert!(holds("~> 1.2", "1.9.3") && !holds("~> 1.2", "2.0"));
        assert!(holds("~> 1.2.3", "1.2.9") && !holds("~> 1.2.3", "1.3.0"));
        assert!(!holds("~> 1.2.3", "1.2.2"));
        assert!(holds(">= 1.0, < 2", "1.5") && !holds(">= 1.0, < 2", "2.0.0"));
        assert!(holds("1.0", "1.0.0") && !holds("= 1.0", "1.0.1"));
        assert!(holds("!= 1.1", "1.2") && !holds("!= 1.1", "1.1.0"));
        // A prerelease sorts before its release.
        assert!(holds("< 2.0", "2.0.0.rc1") && !holds(">= 2.0", "2.0.0.rc1"));
        assert!(holds("> 1.0", "1.1.0-x86_64-linux"));
        assert!(Requirement::parse("~> banana").is_err());
    }
}
