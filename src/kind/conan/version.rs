//! Conan versions and version ranges as Conan reads them
//! (`conans/model/version.py`, `version_range.py`): a version is dot-separated
//! items (numbers compared as numbers, others as text, trailing zeros not
//! counting: `1.0` is `1`), then an optional pre-release after `-` (sorting
//! before the release) and build metadata after `+` (ignored here). A range
//! is conditions joined by spaces (all must hold), alternatives joined by
//! `||`, optionally in `[…]`: `>`, `>=`, `<`, `<=`, `=` or a bare version,
//! `~1.2` (`>=1.2 <1.3-`), `^1.2` (`>=1.2 <2-`), `*`. As in Conan, `>=1.0`
//! and `<2.0` count `1.0`'s and `2.0`'s pre-releases as `1.0-`/`2.0-`
//! would; unlike a client's resolution, a rule matches pre-releases too
//! (a deny rule names them without `include_prerelease`).

use std::cmp::Ordering;

use super::super::guard::VersionSet;

/// One item of a version: a number or a word.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Number(u64),
    Word(String),
}

impl Item {
    fn of(text: &str) -> Item {
        text.parse()
            .map_or_else(|_| Item::Word(text.to_string()), Item::Number)
    }

    /// As Conan compares items: numbers as numbers, else as text.
    fn order(&self, other: &Item) -> Ordering {
        match (self, other) {
            (Item::Number(a), Item::Number(b)) => a.cmp(b),
            _ => self.text().cmp(&other.text()),
        }
    }

    fn text(&self) -> String {
        match self {
            Item::Number(n) => n.to_string(),
            Item::Word(w) => w.clone(),
        }
    }
}

fn items(text: &str) -> Vec<Item> {
    text.split('.').map(Item::of).collect()
}

/// `items` without the trailing zeros Conan does not count.
fn counted(mut items: &[Item]) -> &[Item] {
    while let [rest @ .., Item::Number(0)] = items {
        items = rest;
    }
    items
}

fn order_items(a: &[Item], b: &[Item]) -> Ordering {
    let (a, b) = (counted(a), counted(b));
    for (x, y) in a.iter().zip(b) {
        match x.order(y) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    a.len().cmp(&b.len())
}

/// A version: its items and its pre-release, if any.
#[derive(Debug, Clone)]
struct Version {
    main: Vec<Item>,
    pre: Option<Vec<Item>>,
}

impl Version {
    fn parse(text: &str) -> Option<Version> {
        let text = text.trim();
        if !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-+".contains(c))
        {
            return None;
        }
        let text = text.split_once('+').map_or(text, |(v, _)| v);
        let (main, pre) = match text.split_once('-') {
            Some((main, "")) => (main, Some(Vec::new())),
            Some((main, pre)) => (main, Some(items(pre))),
            None => (text, None),
        };
        let good = !main.is_empty() && main.split('.').all(|i| !i.is_empty());
        good.then(|| Version {
            main: items(main),
            pre,
        })
    }

    fn order(&self, other: &Version) -> Ordering {
        order_items(&self.main, &other.main).then_with(|| match (&self.pre, &other.pre) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(a), Some(b)) => order_items(a, b),
        })
    }

    /// The version below which `~` and `^` stop: the item at `index` plus
    /// one, the rest dropped, before any of its pre-releases.
    fn upper_bound(&self, index: usize) -> Option<Version> {
        let mut main = self.main.get(..index)?.to_vec();
        match self.main.get(index) {
            Some(Item::Number(n)) => main.push(Item::Number(n + 1)),
            None => main.push(Item::Number(1)),
            Some(Item::Word(_)) => return None,
        }
        Some(Version {
            main,
            pre: Some(Vec::new()),
        })
    }

    /// As a lower (`>=`) or upper (`<`) bound: with no pre-release, before
    /// any of its pre-releases.
    fn before_pre_releases(mut self) -> Version {
        self.pre.get_or_insert_with(Vec::new);
        self
    }
}

/// One condition: the comparisons that hold, and the version compared with.
#[derive(Debug, Clone)]
struct Condition {
    holds: fn(Ordering) -> bool,
    version: Version,
}

/// Alternatives (`||`), each conditions that must all hold.
#[derive(Debug, Clone)]
pub struct Range(Vec<Vec<Condition>>);

impl Range {
    pub fn parse(text: &str) -> Result<Range, String> {
        let wrong =
            || format!("{text:?} is not a Conan version range (`1.2`, `[>=1.0 <2]`, `~1.2`)");
        let inner = text.trim();
        let inner = inner
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(inner);
        let mut alternatives = Vec::new();
        for alternative in inner.split("||") {
            let mut conditions = Vec::new();
            for expression in alternative.split_whitespace() {
                conditions.extend(condition(expression).ok_or_else(wrong)?);
            }
            if conditions.is_empty() {
                return Err(wrong());
            }
            alternatives.push(conditions);
        }
        Ok(Range(alternatives))
    }
}

/// The conditions one expression (`>=1.0`, `~1.2`, `*`) stands for.
fn condition(expression: &str) -> Option<Vec<Condition>> {
    let at = |holds: fn(Ordering) -> bool, version: Version| Condition { holds, version };
    if expression == "*" {
        let any = Version::parse("0")?.before_pre_releases();
        return Some(vec![at(Ordering::is_ge, any)]);
    }
    let (operator, rest) = match expression.find(|c: char| !"<>=~^".contains(c)) {
        Some(at) => expression.split_at(at),
        None => return None,
    };
    let version = Version::parse(rest)?;
    Some(match operator {
        "" | "=" => vec![at(Ordering::is_eq, version)],
        ">" => vec![at(Ordering::is_gt, version)],
        "<=" => vec![at(Ordering::is_le, version)],
        ">=" => vec![at(Ordering::is_ge, version.before_pre_releases())],
        "<" => vec![at(Ordering::is_lt, version.before_pre_releases())],
        "~" | "^" => {
            let index = if operator == "~" {
                usize::from(version.main.len() > 1)
            } else {
                let zeros = version.main.iter().take_while(|i| **i == Item::Number(0));
                zeros.count()
            };
            let upper = version.upper_bound(index)?;
            vec![
                at(Ordering::is_ge, version.before_pre_releases()),
                at(Ordering::is_lt, upper),
            ]
        }
        _ => return None,
    })
}

impl VersionSet for Range {
    fn contains(&self, version: &str) -> bool {
        let Some(version) = Version::parse(version) else {
            return false;
        };
        self.0.iter().any(|conditions| {
            conditions
                .iter()
                .all(|c| (c.holds)(version.order(&c.version)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hold_as_conan_compares_versions() {
        let holds = |r: &str, v: &str| Range::parse(r).unwrap().contains(v);
        assert!(holds("1.0", "1") && holds("=1.0.0", "1.0") && !holds("1.0", "1.0.1"));
        assert!(holds("[>=1.0 <2]", "1.10") && !holds("[>=1.0 <2]", "2.0"));
        assert!(holds(">=1.0", "1.0-pre") && !holds("<2.0", "2.0-pre"));
        assert!(holds("~1.2", "1.2.9") && !holds("~1.2", "1.3"));
        assert!(holds("^1.2", "1.9") && !holds("^1.2", "2.0") && !holds("^0.2", "0.3"));
        assert!(holds("<1.0 || >=3", "3.1") && !holds("<1.0 || >=3", "2"));
        assert!(holds("*", "0.0.1") && holds(">1.a", "1.b"));
        assert!(holds("1.2-rc1", "1.2-rc1") && !holds("<1.2", "1.2-rc1"));
        assert!(!holds(">=1.0", "") && !holds(">=1.0", "1..2"));
        for bad in ["", ">=", "[]", "~", "!1.0", ">=1.0 ||"] {
            assert!(Range::parse(bad).is_err(), "{bad}");
        }
    }
}
