//! The advisory keys: `[[advisories]]` feeds and a remote's `quarantine`,
//! `quarantine_allow` and `quarantine_since`, refused on kinds that cannot
//! tell packages apart.

use toml::Spanned;
use url::Url;

use super::raw::{RawAdvisories, RawRemote};
use super::validate::Validator;
use super::{AdvisoryFeed, ConfigError};
use crate::kind::advisory::{Class, Quarantine};
use crate::kind::guard::parse_time;
use crate::kind::Kind;

impl Validator<'_> {
    /// Every `[[advisories]]` table: a unique name fit for a file name, one
    /// URL at least, each http(s).
    pub(super) fn advisories(
        &self,
        raw: Vec<Spanned<RawAdvisories>>,
    ) -> Result<Vec<AdvisoryFeed>, ConfigError> {
        let mut feeds: Vec<AdvisoryFeed> = Vec::with_capacity(raw.len());
        for (i, feed) in raw.into_iter().enumerate() {
            let feed = feed.into_inner();
            let name = feed.name.get_ref();
            let name_ok = valid_feed_name(name);
            if !name_ok {
                return self.error(
                    format!("advisories[{i}].name"),
                    feed.name.span(),
                    format!("{name:?} is not a valid feed name (letters, digits, '-', '_', '.')"),
                );
            }
            if feeds.iter().any(|f| &f.name == name) {
                return self.error(
                    format!("advisories[{i}].name"),
                    feed.name.span(),
                    format!("duplicate feed name {name:?}"),
                );
            }
            if feed.urls.get_ref().is_empty() {
                return self.error(
                    format!("advisories[{i}].urls"),
                    feed.urls.span(),
                    "lists no URL; give at least one",
                );
            }
            let mut urls = Vec::new();
            for (j, url) in feed.urls.get_ref().iter().enumerate() {
                match Url::parse(url.get_ref()) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") => urls.push(u),
                    _ => {
                        return self.error(
                            format!("advisories[{i}].urls[{j}]"),
                            url.span(),
                            format!("{:?} is not an http(s) URL", url.get_ref()),
                        )
                    }
                }
            }
            feeds.push(AdvisoryFeed {
                name: name.clone(),
                urls,
                refresh: feed.refresh.0.max(std::time::Duration::from_secs(1)),
            });
        }
        Ok(feeds)
    }

    /// `quarantine`, `quarantine_allow` and `quarantine_since` of remote `i`.
    pub(super) fn quarantine(&self, i: usize, raw: &RawRemote) -> Result<Quarantine, ConfigError> {
        let Some(kind) = Kind::named(raw.kind.get_ref()) else {
            return Ok(Quarantine::default());
        };
        let set = [
            ("quarantine", raw.quarantine.as_ref().map(Spanned::span)),
            (
                "quarantine_allow",
                raw.quarantine_allow.as_ref().map(Spanned::span),
            ),
            (
                "quarantine_since",
                raw.quarantine_since.as_ref().map(Spanned::span),
            ),
        ];
        for (key, span) in set {
            if let (Some(span), Some(refusal)) = (span, kind.ecosystem().refuses_key(key)) {
                return self.error(format!("remote[{i}].{key}"), span, refusal);
            }
        }
        let Some(packages) = kind.packages() else {
            return Ok(Quarantine::default());
        };
        let mut quarantine = Quarantine::default();
        for (j, entry) in raw.quarantine.iter().flat_map(|l| l.get_ref()).enumerate() {
            let text = entry.get_ref().trim();
            if let Some(class) = Class::named(text) {
                quarantine.classes.push(class);
            } else if looks_like_id(text) {
                quarantine.ids.push(text.to_string());
            } else {
                return self.error(
                    format!("remote[{i}].quarantine[{j}]"),
                    entry.span(),
                    format!(
                        "{text:?} is neither a class ({}) nor an advisory id (`GHSA-…`, `MAL-…`, `CVE-…`)",
                        Class::NAMES.join(", ")
                    ),
                );
            }
        }
        for (j, entry) in raw
            .quarantine_allow
            .iter()
            .flat_map(|l| l.get_ref())
            .enumerate()
        {
            let text = entry.get_ref().trim();
            let key = format!("remote[{i}].quarantine_allow[{j}]");
            if looks_like_id(text) {
                quarantine.allow_ids.push(text.to_string());
                continue;
            }
            // An npm scope's leading `@` is part of the name.
            let split = text.char_indices().skip(1).find(|&(_, c)| c == '@');
            match split.map(|(at, _)| (text[..at].trim(), text[at + 1..].trim())) {
                Some((name, version)) if !name.is_empty() && !version.is_empty() => {
                    let name = packages.normalise(name);
                    quarantine.allow_versions.push((name, version.to_string()));
                }
                _ => {
                    return self.error(
                        key,
                        entry.span(),
                        format!("{text:?} names no version; write an advisory id or `pkg@version`"),
                    )
                }
            }
        }
        if let Some(since) = &raw.quarantine_since {
            let text = since.get_ref().trim();
            let time = if text.contains('T') {
                parse_time(text)
            } else {
                parse_time(&format!("{text}T00:00:00Z"))
            };
            match time {
                Some(ms) => quarantine.since_ms = Some(ms),
                None => {
                    return self.error(
                        format!("remote[{i}].quarantine_since"),
                        since.span(),
                        format!("{text:?} is not a date (`2025-09-08`) nor an RFC 3339 time"),
                    )
                }
            }
        }
        Ok(quarantine)
    }
}

/// Whether `text` is written as an advisory id: a prefix of capitals and
/// digits, a dash, then more (`GHSA-xxxx-…`, `MAL-2025-1`, `CVE-2024-1`,
/// `PYSEC-2023-1`, `RUSTSEC-2024-1`).
fn looks_like_id(text: &str) -> bool {
    text.split_once('-').is_some_and(|(prefix, rest)| {
        prefix.len() >= 2
            && prefix
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
            && !rest.is_empty()
            && !rest.contains('@')
    })
}

/// Whether `name` is fit for a feed (and its file): letters, digits, `-`,
/// `_` and `.`, not starting with a dot.
pub fn valid_feed_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}
