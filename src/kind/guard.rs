//! The verdict on one version of one package under a remote's
//! [`GuardConfig`]: allowed, or refused with a one-line reason that reaches
//! the user through the client's own error output. Publish times come from
//! the documents ([`publish_times`]); where a document gives none the
//! cooldown lets the version through. Pure: `now_ms` is passed in.

use std::collections::HashMap;
use std::time::Duration;

use crate::config::{normalise_name, GuardConfig, RemoteKind};

/// Judges versions of packages of one remote at one instant.
pub struct Judge<'a> {
    guard: &'a GuardConfig,
    kind: RemoteKind,
    now_ms: i64,
}

impl<'a> Judge<'a> {
    pub fn new(guard: &'a GuardConfig, kind: RemoteKind, now_ms: i64) -> Judge<'a> {
        Judge {
            guard,
            kind,
            now_ms,
        }
    }

    pub fn kind(&self) -> RemoteKind {
        self.kind
    }

    /// Whether the cooldown applies to `name`, so publish times are needed.
    pub fn needs_times(&self, name: &str) -> bool {
        self.guard
            .cooldown_for(&normalise_name(self.kind, name))
            .is_some()
    }

    /// Why `version` of `name` is refused, or `None` if it may be served.
    /// `published_ms`: its publish time, when the registry says.
    pub fn refusal(&self, name: &str, version: &str, published_ms: Option<i64>) -> Option<String> {
        let normalised = normalise_name(self.kind, name);
        // pypi file names spell the project their own way (`mc_alpha`).
        let name = if self.kind == RemoteKind::Pypi {
            normalised.as_str()
        } else {
            name
        };
        if let Some(rule) = self
            .guard
            .deny
            .iter()
            .find(|r| r.matches(&normalised, version))
        {
            return Some(format!(
                "{name}@{version} is refused by this proxy: it matches the deny rule \"{}\"",
                rule.text
            ));
        }
        if let Some(allow) = &self.guard.allow {
            if !allow.iter().any(|r| r.matches(&normalised, version)) {
                return Some(format!(
                    "{name}@{version} is refused by this proxy: it is not on the allow list"
                ));
            }
        }
        let min_age = self.guard.cooldown_for(&normalised)?;
        let age_ms = self.now_ms - published_ms?;
        if age_ms >= min_age.as_millis() as i64 {
            return None;
        }
        Some(format!(
            "{name}@{version} was published {} ago; this proxy serves a release once it is {} old (min_release_age)",
            rounded(age_ms),
            humantime::format_duration(min_age)
        ))
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
/// or with `+00:00`), in unix milliseconds.
pub fn parse_time(text: &str) -> Option<i64> {
    let text = text.trim();
    let utc = match text.strip_suffix("+00:00") {
        Some(stem) => format!("{stem}Z"),
        None => text.to_string(),
    };
    let at = humantime::parse_rfc3339_weak(&utc).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64)
}

/// Publish times a document gives, keyed by what its kind judges: npm's
/// full packument by version (`time`), pypi's PEP 691 page by file name
/// (PEP 700 `upload-time`), a cargo index file by version (`pubtime`).
/// Empty when the document gives none (or is not of that form).
pub fn publish_times(kind: RemoteKind, body: &[u8]) -> HashMap<String, i64> {
    let mut times = HashMap::new();
    match kind {
        RemoteKind::Npm => {
            if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) {
                if let Some(time) = doc.get("time").and_then(|t| t.as_object()) {
                    for (version, at) in time {
                        if let Some(ms) = at.as_str().and_then(parse_time) {
                            times.insert(version.clone(), ms);
                        }
                    }
                }
            }
        }
        RemoteKind::Pypi => {
            if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) {
                for file in doc["files"].as_array().into_iter().flatten() {
                    let at = file["upload-time"].as_str().and_then(parse_time);
                    if let (Some(name), Some(ms)) = (file["filename"].as_str(), at) {
                        times.insert(name.to_string(), ms);
                    }
                }
            }
        }
        RemoteKind::Cargo => {
            for line in body.split(|&b| b == b'\n') {
                let Ok(entry) = serde_json::from_slice::<serde_json::Value>(line) else {
                    continue;
                };
                let at = entry["pubtime"].as_str().and_then(parse_time);
                if let (Some(version), Some(ms)) = (entry["vers"].as_str(), at) {
                    times.insert(version.to_string(), ms);
                }
            }
        }
        _ => {}
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn guard(toml: &str, kind: &str) -> GuardConfig {
        let text = format!(
            "[[remote]]\nname = \"r\"\nkind = \"{kind}\"\nmirrors = [\"http://a/x\"]\n{toml}\n"
        );
        let config = crate::config::Config::parse(&text, "t.toml").unwrap();
        config.remotes[0].guard.clone()
    }

    const DAY: i64 = 24 * 3600 * 1000;
    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn deny_allow_and_cooldown_each_give_a_reason() {
        let g = guard(
            "min_release_age = \"7d\"\ncooldown_exempt = [\"@trusted/*\"]\ndeny = [\"colors@>=1.4.1\", \"flatmap-stream\"]",
            "npm",
        );
        let judge = Judge::new(&g, RemoteKind::Npm, NOW);
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

        let g = guard("allow = [\"mc-*\", \"requests@<3\"]", "pypi");
        let judge = Judge::new(&g, RemoteKind::Pypi, NOW);
        assert_eq!(judge.refusal("MC_Alpha", "1.0", None), None);
        assert_eq!(judge.refusal("requests", "2.31.0", None), None);
        assert_eq!(
            judge.refusal("requests", "3.0", None).unwrap(),
            "requests@3.0 is refused by this proxy: it is not on the allow list"
        );
        assert!(judge.refusal("numpy", "2.0", None).is_some());
    }

    #[test]
    fn publish_times_from_each_kinds_document() {
        let npm = br#"{"time": {"created": "2020-01-01T00:00:00.000Z", "1.0.0": "2020-01-02T00:00:00.000Z"}}"#;
        let times = publish_times(RemoteKind::Npm, npm);
        assert_eq!(times["1.0.0"] - times["created"], DAY);
        let pypi = br#"{"files": [{"filename": "a-1.0.tar.gz", "upload-time": "2020-01-02T00:00:00.123456Z"}, {"filename": "a-0.9.tar.gz"}]}"#;
        let times = publish_times(RemoteKind::Pypi, pypi);
        assert_eq!(times.len(), 1);
        assert_eq!(
            times["a-1.0.tar.gz"],
            parse_time("2020-01-02T00:00:00.123Z").unwrap()
        );
        let cargo = b"{\"name\":\"a\",\"vers\":\"0.1.0\",\"pubtime\":\"2020-01-02T00:00:00+00:00\"}\n{\"name\":\"a\",\"vers\":\"0.2.0\"}\n";
        let times = publish_times(RemoteKind::Cargo, cargo);
        assert_eq!(times.len(), 1);
        assert_eq!(times["0.1.0"], parse_time("2020-01-02T00:00:00Z").unwrap());
        assert!(publish_times(RemoteKind::Pypi, b"<html>not json</html>").is_empty());
    }
}
