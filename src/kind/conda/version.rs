//! conda versions and the version part of a match spec, as conda orders and
//! reads them: a version split at `.`, `_` and `-` into runs of digits and
//! of letters, `dev` before any other word, words before numbers, `post`
//! after them, missing parts taken as 0; a spec is clauses (`>=1.0`, `<2`,
//! `==1.2`, `!=1.3`, `1.2.*`) joined by `,` (all must hold), alternatives by
//! `|`; a bare version is that version exactly.

use std::cmp::Ordering;

use super::super::guard::VersionSet;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    Dev,
    Word(String),
    Number(u64),
    Post,
}

/// A version's parts, lower case (`None` when empty or not a version).
fn parts(version: &str) -> Option<Vec<Part>> {
    let version = version.trim().to_ascii_lowercase();
    if !version.starts_with(|c: char| c.is_ascii_digit()) || version.contains(char::is_whitespace) {
        return None;
    }
    let mut out = Vec::new();
    for piece in version.split(['.', '_', '-', '+', '!']) {
        let mut rest = piece;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            let len = if digits > 0 {
                out.push(Part::Number(rest[..digits].parse().ok()?));
                digits
            } else {
                let letters = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
                out.push(match &rest[..letters] {
                    "dev" => Part::Dev,
                    "post" => Part::Post,
                    word => Part::Word(word.to_string()),
                });
                letters
            };
            rest = &rest[len..];
        }
    }
    (!out.is_empty()).then_some(out)
}

fn compare(a: &[Part], b: &[Part]) -> Ordering {
    let zero = Part::Number(0);
    (0..a.len().max(b.len()))
        .map(|i| a.get(i).unwrap_or(&zero).cmp(b.get(i).unwrap_or(&zero)))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

#[derive(Debug, Clone)]
enum Clause {
    /// A comparison: whether an ordering against the version holds.
    Compare(fn(Ordering) -> bool, Vec<Part>),
    /// `1.2.*`: the version starts with these parts.
    Prefix(Vec<Part>),
}

impl Clause {
    fn holds(&self, version: &[Part]) -> bool {
        match self {
            Clause::Compare(holds, other) => holds(compare(version, other)),
            Clause::Prefix(prefix) => {
                version.len() >= prefix.len() && version[..prefix.len()] == prefix[..]
            }
        }
    }
}

/// Alternatives (`|`), each all of its clauses (`,`).
#[derive(Debug, Clone)]
pub struct Spec(Vec<Vec<Clause>>);

impl Spec {
    pub fn parse(text: &str) -> Result<Spec, String> {
        let wrong =
            || format!("{text:?} is not a conda version spec (`>=1.0,<2`, `1.2.*`, `1.0|1.2`)");
        let mut alternatives = Vec::new();
        for alternative in text.split('|') {
            let mut clauses = Vec::new();
            for clause in alternative.split(',') {
                let clause = clause.trim();
                let (op, version) = ["==", "!=", ">=", "<=", ">", "<", "="]
                    .iter()
                    .find_map(|op| Some((*op, clause.strip_prefix(op)?)))
                    .unwrap_or(("==", clause));
                if let Some(prefix) = version.trim().strip_suffix(".*") {
                    clauses.push(Clause::Prefix(parts(prefix).ok_or_else(wrong)?));
                    continue;
                }
                let holds: fn(Ordering) -> bool = match op {
                    "==" | "=" => Ordering::is_eq,
                    "!=" => Ordering::is_ne,
                    ">=" => Ordering::is_ge,
                    "<=" => Ordering::is_le,
                    ">" => Ordering::is_gt,
                    _ => Ordering::is_lt,
                };
                clauses.push(Clause::Compare(holds, parts(version).ok_or_else(wrong)?));
            }
            alternatives.push(clauses);
        }
        Ok(Spec(alternatives))
    }
}

impl VersionSet for Spec {
    fn contains(&self, version: &str) -> bool {
        let Some(version) = parts(version) else {
            return false;
        };
        self.0
            .iter()
            .any(|clauses| clauses.iter().all(|c| c.holds(&version)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_hold_as_conda_orders_versions() {
        let holds = |s: &str, v: &str| Spec::parse(s).unwrap().contains(v);
        assert!(holds(">=1.0,<2", "1.10.1") && !holds(">=1.0,<2", "2.0"));
        assert!(holds("1.2.*", "1.2.9") && !holds("1.2.*", "1.20"));
        assert!(holds("1.0|1.2", "1.2.0") && !holds("1.0|1.2", "1.1"));
        assert!(holds("1.0", "1.0.0") && !holds("==1.0", "1.0.1"));
        // dev before a word before the release, post after it.
        assert!(holds("<1.0", "1.0dev1") && holds("<1.0", "1.0a1"));
        assert!(holds(">1.0", "1.0.post1") && holds("<1.0a", "1.0dev"));
        assert!(Spec::parse("~=1 2").is_err() && Spec::parse("~=1.2").is_err());
    }
}
