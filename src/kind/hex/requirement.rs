//! Elixir's version requirements, as Hex and Mix read them: clauses
//! `== != > >= < <= ~>` on semantic versions joined by `and`, alternatives
//! joined by `or`; `~> 2.1` is `>= 2.1.0 and < 3.0.0`, `~> 2.1.3` is
//! `>= 2.1.3 and < 2.2.0`; a bare version is that version exactly. Each
//! alternative is read into a `semver::VersionReq`.

use super::super::guard::VersionSet;

/// A version as Elixir writes one in a requirement: `2.1` is `2.1.0`.
fn full(version: &str) -> Option<semver::Version> {
    let version = version.trim();
    semver::Version::parse(version)
        .ok()
        .or_else(|| semver::Version::parse(&format!("{version}.0")).ok())
}

/// One clause as the comparators `semver` reads.
fn comparators(clause: &str) -> Option<String> {
    let clause = clause.trim();
    let (op, version) = ["==", "!=", ">=", "<=", "~>", ">", "<"]
        .iter()
        .find_map(|op| Some((*op, clause.strip_prefix(op)?)))
        .unwrap_or(("==", clause));
    let parsed = full(version)?;
    Some(match op {
        "~>" => {
            let parts = version.trim().split('-').next()?.split('.').count();
            let upper = if parts >= 3 {
                format!("<{}.{}.0", parsed.major, parsed.minor + 1)
            } else {
                format!("<{}.0.0", parsed.major + 1)
            };
            format!(">={parsed}, {upper}")
        }
        "==" => format!("={parsed}"),
        // `semver` has no `!=`: the two sides of it, as two alternatives.
        "!=" => return None,
        other => format!("{other}{parsed}"),
    })
}

/// Alternatives (`or`), each all of its clauses (`and`); `!=` clauses kept
/// apart, as versions each alternative leaves out.
#[derive(Debug, Clone)]
pub struct Requirement(Vec<(semver::VersionReq, Vec<semver::Version>)>);

impl Requirement {
    pub fn parse(text: &str) -> Result<Requirement, String> {
        let wrong = || {
            format!("{text:?} is not an Elixir version requirement (`~> 1.2`, `>= 1.0 and < 2.0`)")
        };
        let mut alternatives = Vec::new();
        for alternative in text.split(" or ") {
            let (mut kept, mut excluded) = (Vec::new(), Vec::new());
            for clause in alternative.split(" and ") {
                match clause.trim().strip_prefix("!=") {
                    Some(version) => excluded.push(full(version).ok_or_else(wrong)?),
                    None => kept.push(comparators(clause).ok_or_else(wrong)?),
                }
            }
            let req = if kept.is_empty() {
                semver::VersionReq::STAR
            } else {
                semver::VersionReq::parse(&kept.join(", ")).map_err(|_| wrong())?
            };
            alternatives.push((req, excluded));
        }
        Ok(Requirement(alternatives))
    }
}

impl VersionSet for Requirement {
    fn contains(&self, version: &str) -> bool {
        let Ok(version) = semver::Version::parse(version) else {
            return false;
        };
        self.0
            .iter()
            .any(|(req, excluded)| req.matches(&version) && !excluded.contains(&version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_hold_as_elixir_reads_them() {
        let holds = |r: &str, v: &str| Requirement::parse(r).unwrap().contains(v);
        assert!(holds("~> 2.1", "2.9.0") && !holds("~> 2.1", "3.0.0"));
        assert!(holds("~> 2.1.3", "2.1.9") && !holds("~> 2.1.3", "2.2.0"));
        assert!(holds(">= 1.0.0 and < 2.0.0", "1.5.0") && !holds(">= 1.0.0 and < 2.0.0", "2.0.0"));
        assert!(holds("1.0.0", "1.0.0") && !holds("== 1.0.0", "1.0.1"));
        assert!(holds("~> 1.0 or ~> 3.0", "3.1.0") && !holds("~> 1.0 or ~> 3.0", "2.0.0"));
        assert!(holds("!= 1.1.0", "1.2.0") && !holds(">= 1.0.0 and != 1.1.0", "1.1.0"));
        assert!(Requirement::parse("^1.2").is_err());
    }
}
