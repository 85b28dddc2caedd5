//! The supply-chain guard, shared by every ecosystem with [`Packages`]: the
//! validated rules of a remote (`min_release_age`, `cooldown_exempt`, `deny`,
//! `allow`), each rule a package-name glob with an optional version or range
//! in the ecosystem's own syntax (parsed by the ecosystem, so a bad range
//! fails `check` with its key and line), and the [`Judge`] that gives one
//! version of one package its verdict: allowed, or refused with a one-line
//! reason that reaches the user through the client's own error output.
//! Publish times come from the documents (each ecosystem's
//! `Packages::publish_times`); where a document gives none the cooldown lets
//! the version through. What the guard must check for one request comes in
//! one answer, [`Checks`]. The remote's `quarantine` is judged here too,
//! against the advisory indexes in force, handed in
//! ([`Judge::with_advisories`]). Pure: `now_ms` is passed in.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use globset::{Glob, GlobMatcher};

use super::advisory::{AdvisoryIndex, Quarantine, Quarantined};
use super::package::Artifact;
use super::{Packages, Plan, TimesFrom, Variant};

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
    /// Versions that advisories name, refused by class or id.
    pub quarantine: Quarantine,
}

impl GuardConfig {
    /// Whether anything is refused at all (else the guard is skipped).
    pub fn is_active(&self) -> bool {
        self.min_release_age.is_some()
            || !self.deny.is_empty()
            || self.allow.is_some()
            || self.quarantine.is_active()
    }

    /// The cooldown that applies to `name` (normalised), if any.
    pub fn cooldown_for(&self, name: &str) -> Option<Duration> {
        let exempt = self.cooldown_exempt.iter().any(|g| g.matches(name));
        self.min_release_age.filter(|_| !exempt)
    }
}

/// A package-name glob (`*` and `?`; `@types/*` for a scope), matched
/// against the name normalised as the ecosystem normalises names.
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

/// A version or range in an ecosystem's own syntax, as its
/// [`Packages::parse_versions`] read it. A bare version means exactly that
/// version in every ecosystem (cargo would read `1.2.3` as `^1.2.3`; a rule
/// says what it names).
#[derive(Clone)]
pub struct VersionSpec(Arc<dyn VersionSet>);

/// The versions a rule names, in one ecosystem's syntax.
pub trait VersionSet: Send + Sync {
    /// Whether `version` is one of them; a version that does not parse in the
    /// ecosystem's syntax is not.
    fn contains(&self, version: &str) -> bool;
}

/// The comparison a clause of a version requirement starts with: the
/// operator of the first of `spellings` (longer spellings before their
/// prefixes) that `clause` starts with, and the rest of it; `bare`, and the
/// whole clause, when none does (`1.2` meaning `= 1.2`).
pub fn leading_operator<'c, O: Copy>(
    clause: &'c str,
    spellings: &[(&str, O)],
    bare: O,
) -> (O, &'c str) {
    spellings
        .iter()
        .find_map(|&(spelt, op)| Some((op, clause.strip_prefix(spelt)?)))
        .unwrap_or((bare, clause))
}

impl VersionSpec {
    pub fn new(set: impl VersionSet + 'static) -> VersionSpec {
        VersionSpec(Arc::new(set))
    }

    pub fn contains(&self, version: &str) -> bool {
        self.0.contains(version)
    }
}

impl fmt::Debug for VersionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("VersionSpec")
    }
}

/// Parses a package-name glob, compared as `packages` normalises names (as
/// written, for a kind without packages).
pub fn name_glob(packages: Option<&dyn Packages>, text: &str) -> Result<NameGlob, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty package name".to_string());
    }
    let normalised = packages.map_or_else(|| text.to_string(), |p| p.normalise(text));
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
pub fn package_rule(packages: &dyn Packages, text: &str) -> Result<PackageRule, String> {
    let trimmed = text.trim();
    let split = trimmed
        .char_indices()
        .skip(1)
        .find(|&(_, c)| c == '@')
        .map(|(at, _)| at);
    let (name, versions) = match split {
        Some(at) => (
            &trimmed[..at],
            Some(packages.parse_versions(trimmed[at + 1..].trim())?),
        ),
        None => (trimmed, None),
    };
    Ok(PackageRule {
        text: trimmed.to_string(),
        name: name_glob(Some(packages), name)?,
        versions,
    })
}

/// What filtering did to a document.
#[derive(Debug, PartialEq, Eq)]
pub enum Filtered {
    /// Nothing refused: serve the bytes as they are.
    Unchanged,
    Changed(Vec<u8>),
    /// Every version refused: answer 403 with this reason.
    Refused(String),
}

/// What the rules say of a package as a whole ([`Judge::standing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Every version is refused (a name-only deny rule; not on the allow list).
    Refused,
    /// Rules name some of its versions.
    ByVersion,
    /// Only the cooldown may refuse versions (by their publish times).
    Cooling,
    /// Nothing is refused.
    Served,
}

/// What the guard must check for one request, read from the remote's rules
/// and its ecosystem's [`Packages`] in one answer
/// ([`Kind::guard_checks`](super::Kind::guard_checks)): the front end asks
/// once, then reads publish times and bodies through the cache as it says.
#[derive(Debug)]
pub struct Checks {
    /// A download of one version of a package, judged before it is served.
    pub artifact: Option<ArtifactCheck>,
    /// A document the guard filters on every answer.
    pub document: Option<DocumentFilter>,
    /// Whether the client shows a refusal's reason only from the status
    /// line (pip), not the body.
    pub reason_in_status_line: bool,
}

/// The verdict on a download as far as the rules give it without its
/// publish time.
#[derive(Debug)]
pub struct ArtifactCheck {
    pub artifact: Artifact,
    /// Why a rule refuses it whatever its publish time, if one does.
    pub refusal: Option<String>,
    /// The advisory, when the refusal is the quarantine's.
    pub quarantined: Option<Quarantined>,
    /// An advisory names it and `quarantine_since` is set: its publish
    /// time decides.
    pub quarantine_dated: bool,
    /// The cooldown that applies to its package, if any: then its publish
    /// time decides.
    pub cooldown: Option<Duration>,
}

/// How one document is filtered.
#[derive(Debug)]
pub struct DocumentFilter {
    /// The package the document is about (an index: the index's path).
    pub name: String,
    /// The variant asked for (`""` when the document has none).
    pub suffix: &'static str,
    /// Where publish times come from when the document has none: a variant
    /// of it, or another document (`Packages::times_from`).
    pub times_from: Option<(String, Option<Variant>)>,
    /// The cooldown that applies to the package, if any.
    pub cooldown: Option<Duration>,
    /// An index of many packages (`Packages::index_listing`), restated to
    /// match their filtered documents.
    pub index: bool,
}

/// What `guard` must check for `path` (its plan `plan`) of an ecosystem
/// with `packages`, at `now_ms`.
pub fn checks(
    guard: &GuardConfig,
    packages: &dyn Packages,
    path: &str,
    plan: &Plan<'_>,
    now_ms: i64,
    advisories: &[Arc<AdvisoryIndex>],
) -> Checks {
    let artifact = packages.artifact(path).map(|artifact| {
        let judge = Judge::new(guard, packages, now_ms).with_advisories(advisories);
        let verdict = judge.verdict(&artifact.name, &artifact.version, None);
        // With `quarantine_since`, the publish time decides.
        let dated = guard.quarantine.since_ms.is_some() && matches!(verdict, Some((_, Some(_))));
        let (refusal, quarantined) = match verdict {
            Some((reason, class)) if !dated => (Some(reason), class),
            _ => (None, None),
        };
        ArtifactCheck {
            refusal,
            quarantined,
            quarantine_dated: dated,
            cooldown: guard.cooldown_for(&packages.normalise(&artifact.name)),
            artifact,
        }
    });
    Checks {
        artifact,
        document: document_filter(guard, packages, path, plan),
        reason_in_status_line: packages.reason_in_status_line(),
    }
}

/// The filter for `path`, if it is a document the guard filters.
fn document_filter(
    guard: &GuardConfig,
    packages: &dyn Packages,
    path: &str,
    plan: &Plan<'_>,
) -> Option<DocumentFilter> {
    let Some(name) = packages.document(path) else {
        // Asked with no body, an index answers that it is one.
        return packages.index_listing(path, &[]).map(|_| DocumentFilter {
            name: path.to_string(),
            suffix: "",
            times_from: None,
            cooldown: None,
            index: true,
        });
    };
    let suffix = plan.variant.map_or("", |v| v.suffix);
    let cooldown = guard.cooldown_for(&packages.normalise(&name));
    let times_from = cooldown.and_then(|_| match packages.times_from(&name, suffix)? {
        TimesFrom::Variant(times) => plan
            .variants
            .iter()
            .find(|v| v.suffix == times)
            .map(|v| (path.to_string(), Some(*v))),
        TimesFrom::Document(other) => Some((other, None)),
    });
    Some(DocumentFilter {
        name,
        suffix,
        times_from,
        cooldown,
        index: false,
    })
}

/// Judges versions of packages of one remote at one instant.
pub struct Judge<'a> {
    guard: &'a GuardConfig,
    packages: &'a dyn Packages,
    now_ms: i64,
    /// The advisory indexes the quarantine judges by (none: it refuses nothing).
    advisories: &'a [Arc<AdvisoryIndex>],
}

impl<'a> Judge<'a> {
    pub fn new(guard: &'a GuardConfig, packages: &'a dyn Packages, now_ms: i64) -> Judge<'a> {
        Judge {
            guard,
            packages,
            now_ms,
            advisories: &[],
        }
    }

    /// The judge with the remote's `quarantine` judged against `advisories`.
    pub fn with_advisories(mut self, advisories: &'a [Arc<AdvisoryIndex>]) -> Judge<'a> {
        self.advisories = advisories;
        self
    }

    /// Whether the cooldown applies to `name`, so publish times are needed.
    pub fn needs_times(&self, name: &str) -> bool {
        self.guard
            .cooldown_for(&self.packages.normalise(name))
            .is_some()
    }

    /// What the rules say of package `name` before any of its versions is
    /// looked at.
    pub fn standing(&self, name: &str) -> Standing {
        let normalised = self.packages.normalise(name);
        // With an allow list: `None` when no entry names the package, else
        // whether one allows every version.
        let allowed = self.guard.allow.as_ref().map(|allow| {
            let of_name: Vec<&PackageRule> = allow
                .iter()
                .filter(|r| r.name.matches(&normalised))
                .collect();
            (!of_name.is_empty()).then(|| of_name.iter().any(|r| r.versions.is_none()))
        });
        if self
            .guard
            .deny
            .iter()
            .any(|r| r.matches_package(&normalised))
            || allowed == Some(None)
        {
            return Standing::Refused;
        }
        let by_version = allowed == Some(Some(false))
            || self.guard.deny.iter().any(|r| r.name.matches(&normalised))
            || (self.guard.quarantine).names(self.advisories, self.packages, &normalised);
        if by_version {
            Standing::ByVersion
        } else if self.guard.cooldown_for(&normalised).is_some() {
            Standing::Cooling
        } else {
            Standing::Served
        }
    }

    /// Why `version` of `name` is refused, or `None` if it may be served.
    /// `published_ms`: its publish time, when the registry says.
    pub fn refusal(&self, name: &str, version: &str, published_ms: Option<i64>) -> Option<String> {
        self.verdict(name, version, published_ms)
            .map(|(reason, _)| reason)
    }

    /// [`refusal`](Judge::refusal), with the advisory when the quarantine
    /// is what refuses it.
    pub fn verdict(
        &self,
        name: &str,
        version: &str,
        published_ms: Option<i64>,
    ) -> Option<(String, Option<Quarantined>)> {
        let normalised = self.packages.normalise(name);
        let name = self.packages.shown_name(name, &normalised);
        if let Some(rule) = self
            .guard
            .deny
            .iter()
            .find(|r| r.matches(&normalised, version))
        {
            return Some((
                format!(
                    "{name}@{version} is refused by this proxy: it matches the deny rule \"{}\"",
                    rule.text
                ),
                None,
            ));
        }
        if let Some(allow) = &self.guard.allow {
            if !allow.iter().any(|r| r.matches(&normalised, version)) {
                return Some((
                    format!(
                        "{name}@{version} is refused by this proxy: it is not on the allow list"
                    ),
                    None,
                ));
            }
        }
        if let Some((reason, advisory)) = self.guard.quarantine.refusal(
            self.advisories,
            self.packages,
            name,
            &normalised,
            version,
            published_ms,
        ) {
            return Some((reason, Some(advisory)));
        }
        let min_age = self.guard.cooldown_for(&normalised)?;
        let age_ms = self.now_ms - published_ms?;
        if age_ms >= min_age.as_millis() as i64 {
            return None;
        }
        Some((format!(
            "{name}@{version} was published {} ago; this proxy serves a release once it is {} old (min_release_age)",
            rounded(age_ms),
            humantime::format_duration(min_age)
        ), None))
    }
}

/// An age for people: whole minutes (seconds under a minute; "0s" for a
/// time in the future).
fn rounded(age_ms: i64) -> humantime::FormattedDuration {
    let secs = (age_ms.max(0) / 1000) as u64;
    let secs = if secs >= 60 { secs / 60 * 60 } else { secs };
    humantime::format_duration(Duration::from_secs(secs))
}

/// An RFC 3339 time as the registries write it (`2024-05-01T12:00:00.123Z`,
/// or with an offset: `+00:00`, Helm's `-06:00`), in unix milliseconds.
pub fn parse_time(text: &str) -> Option<i64> {
    let text = text.trim();
    let (stem, offset_ms) = match utc_offset(text) {
        Some((stem, offset_ms)) => (format!("{stem}Z"), offset_ms),
        None => (text.to_string(), 0),
    };
    let at = humantime::parse_rfc3339_weak(&stem).ok()?;
    let ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64;
    Some(ms - offset_ms)
}

/// A time's `±hh:mm` suffix: the time before it and the offset from UTC.
fn utc_offset(text: &str) -> Option<(&str, i64)> {
    let at = text.len().checked_sub(6)?;
    let (stem, tail) = (text.get(..at)?, text.get(at..)?);
    let sign = match tail.as_bytes() {
        [b'+', _, _, b':', _, _] => 1,
        [b'-', _, _, b':', _, _] => -1,
        _ => return None,
    };
    let (hours, minutes): (i64, i64) = (tail[1..3].parse().ok()?, tail[4..6].parse().ok()?);
    stem.contains('T')
        .then_some((stem, sign * (hours * 60 + minutes) * 60_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 24 * 3600 * 1000;
    const NOW: i64 = 1_800_000_000_000;

    fn rules(packages: &dyn Packages, texts: &[&str]) -> Vec<PackageRule> {
        texts
            .iter()
            .map(|t| package_rule(packages, t).unwrap())
            .collect()
    }

    #[test]
    fn deny_allow_and_cooldown_each_give_a_reason() {
        let npm = &super::super::npm::Npm;
        let g = GuardConfig {
            min_release_age: Some(Duration::from_secs(7 * 24 * 3600)),
            cooldown_exempt: vec![name_glob(Some(npm), "@trusted/*").unwrap()],
            deny: rules(npm, &["colors@>=1.4.1", "flatmap-stream"]),
            allow: None,
            quarantine: Quarantine::default(),
        };
        let judge = Judge::new(&g, npm, NOW);
        assert_eq!(judge.refusal("colors", "1.4.0", Some(NOW - 60 * DAY)), None);
        let reason = judge.refusal("colors", "1.4.44-liberty-2", None).unwrap();
        assert_eq!(reason, "colors@1.4.44-liberty-2 is refused by this proxy: it matches the deny rule \"colors@>=1.4.1\"");
        assert!(judge.refusal("flatmap-stream", "0.1.1", None).is_some());
        let young = judge
            .refusal("left-pad", "1.1.0", Some(NOW - DAY - 5000))
            .unwrap();
        assert_eq!(young, "left-pad@1.1.0 was published 1day ago; this proxy serves a release once it is 7days old (min_release_age)");
        assert_eq!(
            judge.refusal("left-pad", "1.0.0", Some(NOW - 8 * DAY)),
            None
        );
        // No publish time, or exempt: through.
        assert_eq!(judge.refusal("left-pad", "1.1.0", None), None);
        assert_eq!(judge.refusal("@trusted/x", "1.1.0", Some(NOW)), None);
        assert!(!judge.needs_times("@trusted/x") && judge.needs_times("left-pad"));

        let pypi = &super::super::pypi::Pypi;
        let g = GuardConfig {
            allow: Some(rules(pypi, &["mc-*", "requests@<3"])),
            ..GuardConfig::default()
        };
        let judge = Judge::new(&g, pypi, NOW);
        assert_eq!(judge.refusal("MC_Alpha", "1.0", None), None);
        assert_eq!(judge.refusal("requests", "2.31.0", None), None);
        assert_eq!(
            judge.refusal("requests", "3.0", None).unwrap(),
            "requests@3.0 is refused by this proxy: it is not on the allow list"
        );
        assert!(judge.refusal("numpy", "2.0", None).is_some());
    }

    #[test]
    fn times_with_an_offset_are_read_as_utc() {
        let utc = parse_time("2016-10-06T22:23:20.499Z").unwrap();
        assert_eq!(parse_time("2016-10-06T16:23:20.499814565-06:00"), Some(utc));
        assert_eq!(parse_time("2016-10-07T00:23:20.499+02:00"), Some(utc));
        assert_eq!(parse_time("2016-10-06T22:23:20.499+00:00"), Some(utc));
        assert_eq!(parse_time("2016-10-06-06:00"), None);
    }

    #[test]
    fn an_empty_name_is_refused() {
        let error = package_rule(&super::super::npm::Npm, "").unwrap_err();
        assert!(error.contains("empty package name"), "{error}");
    }
}
