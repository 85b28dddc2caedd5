//! Composer versions and constraints as Composer's `VersionParser` reads
//! them: up to four numeric segments (`v` prefix dropped) and a stability
//! (`dev` < `alpha` < `beta` < `RC` < stable < `patch`, each with an
//! optional number); constraints `=`, `!=`, `<>`, `>`, `<`, `>=`, `<=`,
//! `^`, `~`, wildcards (`1.0.*`, `*`) and bare versions, joined by spaces
//! or `,` (all must hold) and `||` (any). As in Composer, `>=` and `<`
//! without a stability mean the version's `-dev`, so `<2.0` leaves out
//! 2.0's prereleases. Branch versions (`dev-main`, `1.x-dev`) are in no
//! range.

use std::cmp::Ordering;

use super::super::guard::{leading_operator, VersionSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stability {
    Dev,
    Alpha,
    Beta,
    Rc,
    Stable,
    Patch,
}

/// A version's four numbers, its stability and the stability's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Version {
    numbers: [u64; 4],
    stability: Stability,
    stability_number: u64,
}

impl Version {
    /// `1.2`, `v1.2.3.4`, `1.2.3-beta.2`, `1.2.3RC1`, `1.0-dev`; `None`
    /// for a branch (`dev-main`, `1.x-dev`) or anything else. Also returns
    /// how many numeric segments were written (for `~` and `^`).
    fn parse(text: &str) -> Option<(Version, usize)> {
        let text = text.trim();
        let text = text.strip_prefix(['v', 'V']).unwrap_or(text);
        let numeric = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (numbers_text, rest) = text.split_at(numeric);
        let numbers_text = numbers_text.trim_end_matches('.');
        let parts: Vec<&str> = numbers_text.split('.').collect();
        if numbers_text.is_empty() || parts.len() > 4 || parts.iter().any(|p| p.is_empty()) {
            return None;
        }
        let mut numbers = [0u64; 4];
        for (slot, part) in numbers.iter_mut().zip(&parts) {
            *slot = part.parse().ok()?;
        }
        let (stability, stability_number) = stability_of(rest)?;
        Some((
            Version {
                numbers,
                stability,
                stability_number,
            },
            parts.len(),
        ))
    }

    fn dev(numbers: [u64; 4]) -> Version {
        Version {
            numbers,
            stability: Stability::Dev,
            stability_number: 0,
        }
    }
}

/// The stability suffix (`-beta.2`, `RC1`, `-p1`, `` for stable).
fn stability_of(rest: &str) -> Option<(Stability, u64)> {
    let rest = rest
        .trim_start_matches(['-', '_', '.', '+'])
        .to_ascii_lowercase();
    if rest.is_empty() {
        return Some((Stability::Stable, 0));
    }
    let letters = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    let stability = match &rest[..letters] {
        "dev" => Stability::Dev,
        "alpha" | "a" => Stability::Alpha,
        "beta" | "b" => Stability::Beta,
        "rc" => Stability::Rc,
        "stable" => Stability::Stable,
        "patch" | "pl" | "p" => Stability::Patch,
        _ => return None,
    };
    let number = rest[letters..].trim_start_matches(['.', '-']);
    let number = match number {
        "" => 0,
        n => n.parse().ok()?,
    };
    Some((stability, number))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
}

/// One comparison.
#[derive(Debug, Clone)]
struct Bound {
    op: Op,
    version: Version,
}

impl Bound {
    fn holds(&self, v: &Version) -> bool {
        let order = v.cmp(&self.version);
        match self.op {
            Op::Eq => order == Ordering::Equal,
            Op::Ne => order != Ordering::Equal,
            Op::Gt => order == Ordering::Greater,
            Op::Lt => order == Ordering::Less,
            Op::Ge => order != Ordering::Less,
            Op::Le => order != Ordering::Greater,
        }
    }
}

/// A Composer constraint: any of its alternatives, each all of its bounds.
#[derive(Debug, Clone)]
pub struct Constraint {
    alternatives: Vec<Vec<Bound>>,
}

impl Constraint {
    pub fn parse(text: &str) -> Result<Constraint, String> {
        let invalid = || format!("{text:?} is not a Composer version constraint");
        let mut alternatives = Vec::new();
        for alternative in text.split("||").flat_map(|a| a.split('|')) {
            let mut bounds = Vec::new();
            let words: Vec<&str> = alternative
                .split([' ', ','])
                .filter(|w| !w.is_empty())
                .collect();
            // Operators written apart from their version (`>= 1.0`).
            let mut joined = Vec::new();
            let mut words = words.into_iter();
            while let Some(word) = words.next() {
                if word.chars().all(|c| "<>=!~^".contains(c)) {
                    joined.push(format!("{word}{}", words.next().ok_or_else(invalid)?));
                } else {
                    joined.push(word.to_string());
                }
            }
            if joined.is_empty() {
                return Err(invalid());
            }
            for word in joined {
                bounds.extend(one(&word).ok_or_else(invalid)?);
            }
            alternatives.push(bounds);
        }
        Ok(Constraint { alternatives })
    }
}

impl VersionSet for Constraint {
    fn contains(&self, version: &str) -> bool {
        let Some((version, _)) = Version::parse(version) else {
            return false;
        };
        self.alternatives
            .iter()
            .any(|bounds| bounds.iter().all(|b| b.holds(&version)))
    }
}

/// The bounds one word (`^1.2`, `>=1.0`, `1.0.*`, `1.2.3`) means.
fn one(word: &str) -> Option<Vec<Bound>> {
    // A stability flag (`@dev`, `@stable`) says which stabilities Composer
    // may pick, not which versions: dropped.
    let word = word.split('@').next()?;
    if word.is_empty() || word == "*" {
        return Some(vec![Bound {
            op: Op::Ge,
            version: Version::dev([0; 4]),
        }]);
    }
    if let Some(rest) = word.strip_prefix('^') {
        let (low, written) = Version::parse(rest)?;
        // The first non-zero segment may not change (`^0.3` is `<0.4`).
        let at = low.numbers[..written.max(1)]
            .iter()
            .position(|&n| n != 0)
            .unwrap_or(written - 1);
        return Some(range(low, bumped(&low.numbers, at)));
    }
    if let Some(rest) = word.strip_prefix('~') {
        let (low, written) = Version::parse(rest)?;
        // The last segment written may grow (`~1.2` is `<2.0`, `~1.2.3` `<1.3`).
        let at = if written == 1 { 0 } else { written - 2 };
        return Some(range(low, bumped(&low.numbers, at)));
    }
    if let Some(stem) = word.strip_suffix(".*").or_else(|| word.strip_suffix(".x")) {
        let (low, written) = Version::parse(stem)?;
        return Some(range(low, bumped(&low.numbers, written - 1)));
    }
    let (op, rest) = leading_operator(
        word,
        &[
            (">=", Op::Ge),
            ("<=", Op::Le),
            ("!=", Op::Ne),
            ("<>", Op::Ne),
            ("==", Op::Eq),
            (">", Op::Gt),
            ("<", Op::Lt),
            ("=", Op::Eq),
        ],
        Op::Eq,
    );
    let (mut version, _) = Version::parse(rest)?;
    let has_stability = rest
        .trim_start_matches(['v', 'V'])
        .contains(|c: char| c.is_ascii_alphabetic());
    if matches!(op, Op::Ge | Op::Lt) && !has_stability {
        version.stability = Stability::Dev;
    }
    Some(vec![Bound { op, version }])
}

/// `>= low` (its `-dev` when `low` is stable) and `< upper-dev`.
fn range(low: Version, upper: [u64; 4]) -> Vec<Bound> {
    let low = match low.stability {
        Stability::Stable => Version::dev(low.numbers),
        _ => low,
    };
    vec![
        Bound {
            op: Op::Ge,
            version: low,
        },
        Bound {
            op: Op::Lt,
            version: Version::dev(upper),
        },
    ]
}

/// `numbers` with segment `at` one higher and every later one zero.
fn bumped(numbers: &[u64; 4], at: usize) -> [u64; 4] {
    let mut out = [0; 4];
    out[..at].copy_from_slice(&numbers[..at]);
    out[at] = numbers[at] + 1;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(constraint: &str, version: &str) -> bool {
        Constraint::parse(constraint).unwrap().contains(version)
    }

    #[test]
    fn constraints_hold_as_composer_reads_them() {
        for (constraint, version, expected) in [
            ("^1.2", "1.2.0", true),
            ("^1.2", "1.9.9", true),
            ("^1.2", "2.0.0", false),
            ("^1.2", "2.0.0-beta1", false),
            ("^1.2", "1.1.9", false),
            ("^0.3", "0.3.5", true),
            ("^0.3", "0.4.0", false),
            ("^0.0.3", "0.0.4", false),
            ("~1.2", "1.9", true),
            ("~1.2", "2.0", false),
            ("~1.2.3", "1.2.9", true),
            ("~1.2.3", "1.3.0", false),
            (">=1.0 <2.0", "1.5", true),
            (">=1.0 <2.0", "2.0.0-RC1", false),
            (">=1.0, <2.0", "0.9", false),
            (">= 1.0 < 2.0", "1.0.0", true),
            ("1.0.*", "1.0.7", true),
            ("1.0.*", "1.1.0", false),
            ("^1.0 || ^3.0", "3.1.0", true),
            ("^1.0 || ^3.0", "2.1.0", false),
            ("1.2.3", "v1.2.3", true),
            ("1.2.3", "1.2.4", false),
            ("!=1.2.3", "1.2.4", true),
            ("<=1.2", "1.2.0.0", true),
            (">1.2", "1.2.0-patch1", true),
            ("*", "7.0.0", true),
            ("^1.0@dev", "1.1.0-dev", true),
            (">=2.0-beta2", "2.0.0-beta1", false),
            (">=2.0-beta2", "2.0.0-beta.3", true),
            ("^1.0", "dev-main", false),
        ] {
            assert_eq!(
                holds(constraint, version),
                expected,
                "{constraint} {version}"
            );
        }
        for bad in ["", "^", ">=", "^x", "1.2.3.4.5", "~> 1"] {
            assert!(Constraint::parse(bad).is_err(), "{bad:?}");
        }
    }
}
