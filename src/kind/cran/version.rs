//! R package versions and the constraints on them as R reads them:
//! `package_version` splits a version at every `.` and `-` into numbers
//! (`2.1-3` is 2, 1, 3) and compares them in order, a shorter prefix first;
//! a constraint is `OP version` with R's operators (`>=`, `>`, `<=`, `<`,
//! `==`, `!=`), as a `DESCRIPTION` writes them (parentheses allowed), joined
//! by `,` (all must hold); a bare version is that version exactly.

use std::cmp::Ordering;

use super::super::guard::VersionSet;

/// A version's numbers (`None` when it is not an R version).
fn numbers(version: &str) -> Option<Vec<u64>> {
    let parts: Option<Vec<u64>> = version
        .trim()
        .split(['.', '-'])
        .map(|part| part.parse().ok())
        .collect();
    parts.filter(|p| p.len() >= 2)
}

/// One constraint: R's comparison and the version it compares with.
#[derive(Debug, Clone)]
struct Bound {
    holds: fn(Ordering) -> bool,
    version: Vec<u64>,
}

/// Every constraint must hold.
#[derive(Debug, Clone)]
pub struct Constraints(Vec<Bound>);

impl Constraints {
    pub fn parse(text: &str) -> Result<Constraints, String> {
        let wrong =
            || format!("{text:?} is not an R version constraint (`1.2-3`, `>= 1.0, < 2.0`)");
        let mut bounds = Vec::new();
        for clause in text.split(',') {
            let clause = clause.trim();
            let clause = clause
                .strip_prefix('(')
                .and_then(|c| c.strip_suffix(')'))
                .unwrap_or(clause)
                .trim();
            let operator = clause
                .find(|c: char| c.is_ascii_digit())
                .map_or(clause, |at| &clause[..at]);
            let holds: fn(Ordering) -> bool = match operator.trim() {
                "" | "==" => Ordering::is_eq,
                "!=" => Ordering::is_ne,
                ">=" => Ordering::is_ge,
                ">" => Ordering::is_gt,
                "<=" => Ordering::is_le,
                "<" => Ordering::is_lt,
                _ => return Err(wrong()),
            };
            let version = numbers(&clause[operator.len()..]).ok_or_else(wrong)?;
            bounds.push(Bound { holds, version });
        }
        Ok(Constraints(bounds))
    }
}

impl VersionSet for Constraints {
    fn contains(&self, version: &str) -> bool {
        let Some(version) = numbers(version) else {
            return false;
        };
        self.0
            .iter()
            .all(|bound| (bound.holds)(version.cmp(&bound.version)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraints_hold_as_r_compares_versions() {
        let holds = |c: &str, v: &str| Constraints::parse(c).unwrap().contains(v);
        assert!(holds("2.1-3", "2.1.3") && !holds("2.1-3", "2.1-4"));
        assert!(holds(">= 1.0", "1.0-1") && !holds(">= 1.0", "0.9.9"));
        assert!(holds("(>= 1.0), < 2.0", "1.99") && !holds(">= 1.0, < 2.0", "2.0"));
        assert!(holds("> 1.2", "1.10") && holds("!= 1.2", "1.2.1"));
        // A shorter prefix sorts first.
        assert!(holds("< 1.0.1", "1.0") && !holds("<= 1.0", "1.0.1"));
        assert!(!holds(">= 1.0", "devel"));
        assert!(Constraints::parse("~> 1.0").is_err());
        assert!(Constraints::parse(">= x").is_err());
    }
}
