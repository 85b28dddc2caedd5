//! The advisory keys: `[[advisories]]` feeds and a remote's `quarantine`,
//! `quarantine_allow` and `quarantine_since`, refused on kinds that cannot
//! tell packages apart.

use toml::Spanned;

use super::raw::{RawAdvisories, RawRemote};
use super::validate::Validator;
use super::{AdvisoryFeed, ConfigError, RemoteConfig};
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
            // The URLs are the mirrors of the feed's remote: checked as mirrors are.
            let urls = self.mirror_list(&format!("advisories[{i}].urls"), &feed.urls)?;
            feeds.push(AdvisoryFeed {
                name: name.clone(),
                urls,
                refresh: feed.refresh.0.max(std::time::Duration::from_secs(1)),
            });
        }
        Ok(feeds)
    }

    /// The remote each feed is fetched through ([`AdvisoryFeed::remote_name`]):
    /// a `generic` remote whose mirrors are the feed's URLs, revalidated
    /// every `refresh`, with every other key at its default, refused when a
    /// `[[remote]]` has its name.
    pub(super) fn feed_remotes(
        &self,
        feeds: &[AdvisoryFeed],
        remotes: &[RemoteConfig],
    ) -> Result<Vec<RemoteConfig>, ConfigError> {
        let mut built = Vec::with_capacity(feeds.len());
        for (i, feed) in feeds.iter().enumerate() {
            let name = feed.remote_name();
            if let Some(j) = remotes.iter().position(|r| r.name == name) {
                return self.error(
                    format!("remote[{j}].name"),
                    0..0,
                    format!(
                        "{name:?} is the name of advisory feed {:?}'s cache; rename the remote",
                        feed.name
                    ),
                );
            }
            // A parsed URL and a feed name hold no `"` nor `\`.
            let quoted = |text: &str| format!("\"{text}\"");
            let mirrors: Vec<String> = feed.urls.iter().map(|u| quoted(u.as_str())).collect();
            // Read as a `[[remote]]` table is, so its other keys take their
            // defaults. OSV's largest export is a few hundred MiB. A URL
            // that fails (or sends no export) is ejected at once, for one
            // `refresh` at most; a 404 is not remembered (the next refresh
            // asks again whatever it is).
            let ms = |d: std::time::Duration| d.min(feed.refresh).as_millis();
            let table = format!(
                "name = {}\nmirrors = [{}]\nrevalidate_after = \"{}ms\"\n\
                 max_body_size = \"2GiB\"\npin_on_first_use = false\nnegative_ttl = \"0s\"\n\
                 eject_after = 1\neject_cooldown = \"{}ms\"\neject_cooldown_max = \"{}ms\"\n",
                quoted(&name),
                mirrors.join(", "),
                feed.refresh.as_millis(),
                ms(std::time::Duration::from_secs(10)),
                ms(std::time::Duration::from_secs(300)),
            );
            let internal = Validator {
                text: &table,
                origin: self.origin,
            };
            let remote = toml::from_str::<RawRemote>(&table)
                .map_err(|e| e.to_string())
                .and_then(|raw| internal.remote(i, raw).map_err(|e| e.message));
            match remote {
                Ok(remote) => built.push(RemoteConfig {
                    feed: true,
                    ..remote
                }),
                Err(message) => return self.error(format!("advisories[{i}]"), 0..0, message),
            }
        }
        Ok(built)
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
