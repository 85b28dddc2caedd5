//! Version ranges in interval notation, shared by the ecosystems that write
//! them so (Maven, NuGet): `[1.0,2.0)`, `(,1.0],[1.2,)`, `[1.5]`, and a bare
//! version meaning exactly that version. Each ecosystem brings its own order
//! of versions (`parse`'s `version`).

use super::guard::VersionSet;

/// One `[a,b)` of a range: bounds with whether each is included.
struct Restriction<V> {
    lower: Option<(V, bool)>,
    upper: Option<(V, bool)>,
}

impl<V: Ord> Restriction<V> {
    fn contains(&self, v: &V) -> bool {
        let above = self
            .lower
            .as_ref()
            .is_none_or(|(b, inclusive)| if *inclusive { v >= b } else { v > b });
        let below = self
            .upper
            .as_ref()
            .is_none_or(|(b, inclusive)| if *inclusive { v <= b } else { v < b });
        above && below
    }
}

/// A range: any of its restrictions, versions read by `version`.
struct Range<V> {
    restrictions: Vec<Restriction<V>>,
    version: fn(&str) -> V,
}

impl<V: Ord + Send + Sync> VersionSet for Range<V> {
    fn contains(&self, text: &str) -> bool {
        let v = (self.version)(text);
        self.restrictions.iter().any(|r| r.contains(&v))
    }
}

/// The range `text`, its versions ordered as `version` reads them; the
/// error says what is wrong, without naming the ecosystem.
pub fn parse<V: Ord + Send + Sync + 'static>(
    text: &str,
    version: fn(&str) -> V,
) -> Result<impl VersionSet + 'static, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty".to_string());
    }
    if !text.starts_with(['[', '(']) {
        if text.contains([',', '[', ']', '(', ')']) {
            return Err("a range is written in brackets".to_string());
        }
        let restrictions = vec![Restriction {
            lower: Some((version(text), true)),
            upper: Some((version(text), true)),
        }];
        return Ok(Range {
            restrictions,
            version,
        });
    }
    let mut restrictions = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let open = rest.chars().next().unwrap_or(' ');
        if !matches!(open, '[' | '(') {
            return Err(format!("expected '[' or '(' at {rest:?}"));
        }
        let close = rest.find([']', ')']).ok_or("unclosed bracket")?;
        let inner = &rest[1..close];
        let closed_by = rest.as_bytes()[close];
        let bound = |s: &str, inclusive: bool| {
            let s = s.trim();
            (!s.is_empty()).then(|| (version(s), inclusive))
        };
        let restriction = match inner.split_once(',') {
            None if open == '[' && closed_by == b']' && !inner.trim().is_empty() => Restriction {
                lower: bound(inner, true),
                upper: bound(inner, true),
            },
            None => return Err(format!("{inner:?} needs a comma or [exact]")),
            Some((_, upper)) if upper.contains(',') => {
                return Err(format!("{inner:?} has more than two bounds"))
            }
            Some((lower, upper)) => Restriction {
                lower: bound(lower, open == '['),
                upper: bound(upper, closed_by == b']'),
            },
        };
        restrictions.push(restriction);
        rest = rest[close + 1..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
            if rest.is_empty() {
                return Err("a trailing comma".to_string());
            }
        } else if !rest.is_empty() {
            return Err(format!("unexpected {rest:?}"));
        }
    }
    Ok(Range {
        restrictions,
        version,
    })
}
