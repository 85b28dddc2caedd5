//! NuGet versions in NuGet's order: up to four numeric parts (missing ones
//! are 0, so `1.0` is `1.0.0.0`), a release after its prereleases, and
//! prerelease labels compared part by part as SemVer 2 does (numbers
//! numerically and before words, words without regard to case); build
//! metadata (`+…`) is ignored.

use std::cmp::Ordering;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NugetVersion {
    parts: [u64; 4],
    /// The prerelease label's dot-separated parts, lower case; empty for a
    /// release.
    pre: Vec<String>,
}

impl NugetVersion {
    /// `text` read leniently: a part that is not a number counts as 0, so
    /// every text has a place in the order.
    pub fn read(text: &str) -> NugetVersion {
        let text = text.trim();
        let text = text.split('+').next().unwrap_or(text);
        let (release, pre) = text.split_once('-').unwrap_or((text, ""));
        let mut parts = [0; 4];
        for (slot, part) in parts.iter_mut().zip(release.split('.')) {
            *slot = part.parse().unwrap_or(0);
        }
        let pre = if pre.is_empty() {
            Vec::new()
        } else {
            pre.split('.').map(str::to_ascii_lowercase).collect()
        };
        NugetVersion { parts, pre }
    }

    /// The normalised form NuGet puts in paths (`1.0` → `1.0.0`, a fourth
    /// part kept only when not 0), lower case.
    pub fn normalised(text: &str) -> String {
        let v = NugetVersion::read(text);
        let [a, b, c, d] = v.parts;
        let mut out = format!("{a}.{b}.{c}");
        if d != 0 {
            out.push_str(&format!(".{d}"));
        }
        if !v.pre.is_empty() {
            out.push('-');
            out.push_str(&v.pre.join("."));
        }
        out
    }
}

fn compare_label(a: &str, b: &str) -> Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        (Ok(_), Err(_)) => Ordering::Less,
        (Err(_), Ok(_)) => Ordering::Greater,
        (Err(_), Err(_)) => a.cmp(b),
    }
}

impl Ord for NugetVersion {
    fn cmp(&self, other: &NugetVersion) -> Ordering {
        self.parts.cmp(&other.parts).then_with(|| {
            match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&other.pre) {
                        let order = compare_label(a, b);
                        if order != Ordering::Equal {
                            return order;
                        }
                    }
                    self.pre.len().cmp(&other.pre.len())
                }
            }
        })
    }
}

impl PartialOrd for NugetVersion {
    fn partial_cmp(&self, other: &NugetVersion) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_as_nuget_sorts_them() {
        let order = [
            "1.0.0-alpha",
            "1.0.0-alpha.2",
            "1.0.0-alpha.beta",
            "1.0.0-Beta",
            "1.0.0-rc.1",
            "1.0",
            "1.0.0.1",
            "1.2.0",
            "10.0.0",
        ];
        for pair in order.windows(2) {
            assert!(
                NugetVersion::read(pair[0]) < NugetVersion::read(pair[1]),
                "{pair:?}"
            );
        }
        assert_eq!(
            NugetVersion::read("1.0"),
            NugetVersion::read("1.0.0.0+build")
        );
        assert_eq!(NugetVersion::normalised("1.0"), "1.0.0");
        assert_eq!(NugetVersion::normalised("1.0.0.4-RC.1"), "1.0.0.4-rc.1");
    }
}
