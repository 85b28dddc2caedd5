//! The supply-chain guard of a remote, validated: the release-age cooldown
//! (`min_release_age`, `cooldown_exempt`) and the package rules (`deny`,
//! `allow`), each rule a package-name glob with an optional version or range
//! in the ecosystem's own syntax, parsed once here so a bad range fails
//! `check` with its key and line.

use std::time::Duration;

use globset::{Glob, GlobMatcher};

use super::RemoteKind;

/// What a remote refuses to serve. The default refuses nothing.
#[derive(Debug, Clone, Default)]
pub struct GuardConfig {
    /// Versions published less than this long ago are refused.
    pub min_release_age: Option<Duration>,
    /// Package names the cooldown does not apply to.
    pub cooldown_exempt: Vec<NameGlob>,
    pub deny: Vec<PackageRule>,
    /// When set, only packages (and versions) one of these rules matches.
    pub allow: Option<Vec<PackageRule>>,
}

impl GuardConfig {
    /// Whether anything is refused at all (else the guard is skipped).
    pub fn is_active(&self) -> bool {
        self.min_release_age.is_some() || !self.deny.is_empty() || self.allow.is_some()
    }

    /// The cooldown that applies to `name` (normalised), if any.
    pub fn cooldown_for(&self, name: &str) -> Option<Duration> {
        let exempt = self.cooldown_exempt.iter().any(|g| g.matches(name));
        self.min_release_age.filter(|_| !exempt)
    }
}

/// A package-name glob (`*` and `?`; `@types/*` for a scope), matched
/// against the name normalised as [`normalise_name`] does.
#[derive(Debug, Clone)]
pub struct NameGlob {
    matcher: GlobMatcher,
}

impl NameGlob {
    pub fn matches(&self, normalised_name: &str) -> bool {
        self.matcher.is_match(normalised_name)
    }
}

/// One `deny` or `allow` entry: `name`, `name@version` or `name@range`.
#[derive(Debug, Clone)]
pub struct PackageRule {
    /// As written in the config, for the reason shown to clients.
    pub text: String,
    pub name: NameGlob,
    /// `None`: every version of the matching packages.
    pub versions: Option<VersionSpec>,
}

impl PackageRule {
    /// Whether the rule covers every version of `name` (a name-only rule).
    pub fn matches_package(&self, normalised_name: &str) -> bool {
        self.versions.is_none() && self.name.matches(normalised_name)
    }

    /// Whether the rule covers `version` of `name`. A version that does not
    /// parse in the ecosystem's syntax is covered only by a name-only rule.
    pub fn matches(&self, normalised_name: &str, version: &str) -> bool {
        self.name.matches(normalised_name)
            && self.versions.as_ref().is_none_or(|v| v.contains(version))
    }
}

/// A version or range in the ecosystem's own syntax. A bare version means
/// exactly that version in every ecosystem (cargo would read `1.2.3` as
/// `^1.2.3`; a rule says what it names).
#[derive(Debug, Clone)]
pub enum VersionSpec {
    /// npm semver ranges (`>=1.4.1`, `^2 || 3.x`); prereleases included.
    Npm(nodejs_semver::Range),
    /// PEP 440 specifiers (`>=2,<3`, `==1.0.*`; a bare `1.0` is `==1.0`).
    Pypi(pep440_rs::VersionSpecifiers),
    /// Cargo requirements (`>=0.3, <0.4`; a bare `1.2.3` is `=1.2.3`).
    Cargo(semver::VersionReq),
}

impl VersionSpec {
    pub fn contains(&self, version: &str) -> bool {
        match self {
            VersionSpec::Npm(range) => nodejs_semver::Version::parse(version)
                .is_ok_and(|v| range.satisfies_with_prerelease(&v, true)),
            VersionSpec::Pypi(specifiers) => version
                .parse::<pep440_rs::Version>()
                .is_ok_and(|v| specifiers.contains(&v)),
            VersionSpec::Cargo(req) => semver::Version::parse(version).is_ok_and(|v| {
                // `matches` leaves prereleases out unless the requirement
                // names one; a deny rule means the range as numbers.
                req.matches(&v) || {
                    let mut release = v.clone();
                    release.pre = semver::Prerelease::EMPTY;
                    req.matches(&release) && !v.pre.is_empty()
                }
            }),
        }
    }

    fn parse(kind: RemoteKind, text: &str) -> Result<VersionSpec, String> {
        let text = text.trim();
        match kind {
            RemoteKind::Npm => nodejs_semver::Range::parse(text)
                .map(VersionSpec::Npm)
                .map_err(|e| format!("{text:?} is not an npm version range: {e}")),
            RemoteKind::Pypi => {
                let text = if text.parse::<pep440_rs::Version>().is_ok() {
                    format!("=={text}")
                } else {
                    text.to_string()
                };
                text.parse::<pep440_rs::VersionSpecifiers>()
                    .map(VersionSpec::Pypi)
                    .map_err(|e| format!("{text:?} is not a PEP 440 version specifier: {e}"))
            }
            RemoteKind::Cargo => {
                let text = if semver::Version::parse(text).is_ok() {
                    format!("={text}")
                } else {
                    text.to_string()
                };
                semver::VersionReq::parse(&text)
                    .map(VersionSpec::Cargo)
                    .map_err(|e| format!("{text:?} is not a cargo version requirement: {e}"))
            }
            _ => Err(format!(
                "{} remotes take package rules without versions only",
                kind.as_str()
            )),
        }
    }
}

/// A package name as the ecosystem compares names: PEP 503 for pypi
/// (lower case, runs of `-`, `_`, `.` as one `-`), lower case for cargo
/// (crates.io treats `-` and `_` alike too), as it is for npm (names are
/// lower case there already).
pub fn normalise_name(kind: RemoteKind, name: &str) -> String {
    match kind {
        RemoteKind::Pypi => {
            let mut out = String::with_capacity(name.len());
            for c in name.chars() {
                if matches!(c, '-' | '_' | '.') {
                    if !out.ends_with('-') {
                        out.push('-');
                    }
                } else {
                    out.push(c.to_ascii_lowercase());
                }
            }
            out
        }
        RemoteKind::Cargo => name.to_ascii_lowercase().replace('_', "-"),
        _ => name.to_string(),
    }
}

/// Which kinds can name a package from an artifact's path (so `deny` and
/// `allow` can be enforced on them).
pub fn has_packages(kind: RemoteKind) -> bool {
    matches!(kind, RemoteKind::Npm | RemoteKind::Pypi | RemoteKind::Cargo)
}

/// Parses a package-name glob for `kind`.
pub(super) fn name_glob(kind: RemoteKind, text: &str) -> Result<NameGlob, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty package name".to_string());
    }
    let normalised = normalise_name(kind, text);
    let glob = globset::GlobBuilder::new(&normalised)
        .literal_separator(false)
        .build()
        .map_err(|e| format!("bad package-name pattern: {e}"))?;
    Ok(NameGlob {
        matcher: Glob::compile_matcher(&glob),
    })
}

/// Parses `name`, `name@version` or `name@range` (an npm scope's leading
/// `@` is part of the name).
pub(super) fn package_rule(kind: RemoteKind, text: &str) -> Result<PackageRule, String> {
    let trimmed = text.trim();
    let split = trimmed
        .char_indices()
        .skip(1)
        .find(|&(_, c)| c == '@')
        .map(|(at, _)| at);
    let (name, versions) = match split {
        Some(at) => (
            &trimmed[..at],
            Some(VersionSpec::parse(kind, &trimmed[at + 1..])?),
        ),
        None => (trimmed, None),
    };
    Ok(PackageRule {
        text: trimmed.to_string(),
        name: name_glob(kind, name)?,
        versions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_in_each_ecosystems_syntax() {
        use RemoteKind::*;
        for (kind, rule, name, version, matches) in [
            (Npm, "event-stream@3.3.6", "event-stream", "3.3.6", true),
            (Npm, "event-stream@3.3.6", "event-stream", "3.3.5", false),
            (Npm, "flatmap-stream", "flatmap-stream", "0.1.1", true),
            (Npm, "colors@>=1.4.1", "colors", "1.4.2", true),
            (Npm, "colors@>=1.4.1", "colors", "1.5.0-beta.1", true),
            (Npm, "colors@>=1.4.1", "colors", "1.4.0", false),
            (Npm, "@evil/*", "@evil/pkg", "1.0.0", true),
            (Npm, "@evil/*@^2", "@evil/pkg", "2.1.0", true),
            (Npm, "@evil/*@^2", "@evil/pkg", "3.0.0", false),
            (Pypi, "Requests@>=2,<3", "requests", "2.31.0", true),
            (Pypi, "requests@>=2,<3", "requests", "3.0", false),
            (Pypi, "zope.interface@5.0", "zope-interface", "5.0.0", true),
            (Pypi, "mc_*", "mc-alpha", "1.0", true),
            (Cargo, "serde@1.0.0", "serde", "1.0.1", false),
            (Cargo, "serde@^1.0.0", "serde", "1.0.1", true),
            (Cargo, "rustdecimal", "rustdecimal", "1.23.0", true),
            (Cargo, "mc_leaf@>=0.1, <0.2", "mc-leaf", "0.1.5", true),
            (Cargo, "mc_leaf@>=0.1, <0.2", "mc-leaf", "0.2.0-rc.1", false),
        ] {
            let parsed = package_rule(kind, rule).unwrap();
            assert_eq!(
                parsed.matches(name, version),
                matches,
                "{kind:?} {rule} {name} {version}"
            );
        }
    }

    #[test]
    fn malformed_ranges_are_refused_with_the_ecosystems_name() {
        for (kind, rule, says) in [
            (RemoteKind::Npm, "colors@>=>1", "npm version range"),
            (RemoteKind::Pypi, "requests@>>2", "PEP 440"),
            (RemoteKind::Cargo, "serde@~>1", "cargo version requirement"),
            (RemoteKind::Apt, "hello@1.0", "without versions"),
            (RemoteKind::Npm, "", "empty package name"),
        ] {
            let error = package_rule(kind, rule).unwrap_err();
            assert!(error.contains(says), "{rule}: {error}");
        }
    }
}
