//! Advisory quarantine, the pure part: OSV records (read by [`osv`]) kept
//! as a compact [`AdvisoryIndex`] per OSV ecosystem (the kinds whose
//! [`Packages::osv_ecosystem`] names one) and package name normalised as
//! that kind normalises names; the [`Class`] of each advisory; a remote's
//! [`Quarantine`] policy and its verdict on one version, with the kind's
//! own version order ([`Packages::compare_versions`]).

pub mod osv;

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{Kind, Packages};

/// What an advisory says a version is, as `quarantine` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Malicious,
    Critical,
    High,
    Medium,
    Low,
}

impl Class {
    pub const NAMES: [&'static str; 5] = ["malicious", "critical", "high", "medium", "low"];

    pub fn named(name: &str) -> Option<Class> {
        Some(match name {
            "malicious" => Class::Malicious,
            "critical" => Class::Critical,
            "high" => Class::High,
            "medium" => Class::Medium,
            "low" => Class::Low,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        Class::NAMES[self as usize]
    }
}

/// One advisory, as a refusal names it.
#[derive(Debug)]
pub struct Advisory {
    pub id: String,
    pub aliases: Vec<String>,
    pub summary: String,
    pub class: Option<Class>,
}

impl Advisory {
    /// Whether `id` is this advisory's id or one of its aliases.
    fn is_named(&self, id: &str) -> bool {
        self.id == id || self.aliases.iter().any(|a| a == id)
    }
}

/// The versions of one package one advisory names.
struct Affected {
    advisory: u32,
    versions: Box<[Box<str>]>,
    /// Each range's events, in version order.
    ranges: Box<[Box<[Event]>]>,
}

enum Event {
    Introduced(Box<str>),
    Fixed(Box<str>),
    LastAffected(Box<str>),
}

/// Every advisory of one feed, by OSV ecosystem and normalised name.
#[derive(Default)]
pub struct AdvisoryIndex {
    advisories: Vec<Advisory>,
    by_ecosystem: HashMap<&'static str, HashMap<String, Vec<Affected>>>,
}

/// What reading a feed found, for `/-/status`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct IndexReport {
    pub records: usize,
    /// Records withdrawn by their database, left out.
    pub withdrawn: usize,
    /// Packages indexed, per OSV ecosystem.
    pub packages: BTreeMap<String, usize>,
    /// Records of ecosystems no kind maps, per ecosystem.
    pub unmapped: BTreeMap<String, usize>,
}

impl AdvisoryIndex {
    /// The index of the OSV zip `bytes`, or why it cannot be used.
    pub fn from_zip(bytes: &[u8]) -> Result<(AdvisoryIndex, IndexReport), String> {
        let mut builder = Builder::new();
        osv::each_record(bytes, |record| builder.add(record))?;
        Ok(builder.finish())
    }

    #[cfg(test)]
    fn from_records(records: Vec<osv::Record>) -> (AdvisoryIndex, IndexReport) {
        let mut builder = Builder::new();
        records.into_iter().for_each(|r| builder.add(r));
        builder.finish()
    }

    /// Whether any advisory names package `normalised` of `packages`' ecosystem.
    pub fn names(&self, packages: &dyn Packages, normalised: &str) -> bool {
        packages
            .osv_ecosystem()
            .and_then(|e| self.by_ecosystem.get(e))
            .is_some_and(|names| names.contains_key(normalised))
    }

    /// The advisories that name `version` of package `normalised`.
    pub fn affecting<'a>(
        &'a self,
        packages: &'a dyn Packages,
        normalised: &str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Advisory> + 'a {
        packages
            .osv_ecosystem()
            .and_then(|e| self.by_ecosystem.get(e))
            .and_then(|names| names.get(normalised))
            .into_iter()
            .flatten()
            .filter(move |a| affects(packages, a, version))
            .map(|a| &self.advisories[a.advisory as usize])
    }
}

/// An index being read, record by record.
struct Builder {
    /// The kinds whose packages OSV ecosystems name.
    mapped: Vec<(&'static str, &'static dyn Packages)>,
    index: AdvisoryIndex,
    report: IndexReport,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            mapped: Kind::all()
                .filter_map(|k| k.packages())
                .filter_map(|p| Some((p.osv_ecosystem()?, p)))
                .collect(),
            index: AdvisoryIndex::default(),
            report: IndexReport::default(),
        }
    }

    fn add(&mut self, record: osv::Record) {
        let (index, report) = (&mut self.index, &mut self.report);
        report.records += 1;
        if record.withdrawn.is_some() {
            report.withdrawn += 1;
            return;
        }
        let at = index.advisories.len() as u32;
        let mut used = false;
        for affected in &record.affected {
            let Some(package) = &affected.package else {
                continue;
            };
            let ecosystem = package.ecosystem.split(':').next().unwrap_or_default();
            let Some(&(key, packages)) = self.mapped.iter().find(|(e, _)| *e == ecosystem) else {
                *report.unmapped.entry(ecosystem.to_string()).or_default() += 1;
                continue;
            };
            let ranges = affected
                .ranges
                .iter()
                .filter(|r| r.kind == "ECOSYSTEM" || r.kind == "SEMVER")
                .map(|r| events(packages, r))
                .collect();
            let names = index.by_ecosystem.entry(key).or_default();
            let list = names.entry(packages.normalise(&package.name)).or_default();
            list.push(Affected {
                advisory: at,
                versions: affected
                    .versions
                    .iter()
                    .map(|v| v.as_str().into())
                    .collect(),
                ranges,
            });
            used = true;
        }
        if used {
            index.advisories.push(Advisory {
                class: osv::class(&record),
                summary: record
                    .summary
                    .or(record.details)
                    .map(|s| s.lines().next().unwrap_or_default().to_string())
                    .unwrap_or_default(),
                id: record.id,
                aliases: record.aliases,
            });
        }
    }

    fn finish(mut self) -> (AdvisoryIndex, IndexReport) {
        for (ecosystem, names) in &self.index.by_ecosystem {
            self.report
                .packages
                .insert(ecosystem.to_string(), names.len());
        }
        (self.index, self.report)
    }
}

/// A range's events in version order (`introduced: "0"` first); a range
/// whose versions the kind cannot compare keeps none.
fn events(packages: &dyn Packages, range: &osv::Range) -> Box<[Event]> {
    let mut events: Vec<Event> = range
        .events
        .iter()
        .filter_map(|e| {
            Some(if let Some(v) = &e.introduced {
                Event::Introduced(v.as_str().into())
            } else if let Some(v) = &e.fixed {
                Event::Fixed(v.as_str().into())
            } else {
                Event::LastAffected(e.last_affected.as_deref()?.into())
            })
        })
        .collect();
    let at = |e: &Event| match e {
        Event::Introduced(v) | Event::Fixed(v) | Event::LastAffected(v) => v.clone(),
    };
    let mut comparable = true;
    events.sort_by(|a, b| {
        let (a, b) = (at(a), at(b));
        match (&*a, &*b) {
            ("0", "0") => Ordering::Equal,
            ("0", _) => Ordering::Less,
            (_, "0") => Ordering::Greater,
            _ => packages.compare_versions(&a, &b).unwrap_or_else(|| {
                comparable = false;
                Ordering::Equal
            }),
        }
    });
    if comparable {
        events.into()
    } else {
        Box::new([])
    }
}

/// Whether `affected` names `version`: listed, or inside one of its ranges.
fn affects(packages: &dyn Packages, affected: &Affected, version: &str) -> bool {
    if affected.versions.iter().any(|v| &**v == version) {
        return true;
    }
    let at_least = |bound: &str| {
        bound == "0" || packages.compare_versions(version, bound) != Some(Ordering::Less)
    };
    affected.ranges.iter().any(|events| {
        let mut inside = false;
        for event in events.iter() {
            match event {
                Event::Introduced(v) if at_least(v) => inside = true,
                Event::Fixed(v) if at_least(v) => inside = false,
                Event::LastAffected(v)
                    if packages.compare_versions(version, v) == Some(Ordering::Greater) =>
                {
                    inside = false
                }
                _ => {}
            }
        }
        inside && packages.compare_versions(version, version).is_some()
    })
}

/// A remote's quarantine: `quarantine` (classes and advisory ids),
/// `quarantine_allow` (advisory ids and `pkg@version` rules) and
/// `quarantine_since` (only versions published after it).
#[derive(Debug, Clone, Default)]
pub struct Quarantine {
    pub classes: Vec<Class>,
    pub ids: Vec<String>,
    pub allow_ids: Vec<String>,
    /// `pkg@version`s: (name normalised as the kind normalises it, version).
    pub allow_versions: Vec<(String, String)>,
    /// Unix ms; a version whose publish time is known to be before it is served.
    pub since_ms: Option<i64>,
}

/// The advisory a quarantine refusal names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// The advisory's class (`"listed"` for one without a class named by id).
    pub class: &'static str,
    pub id: String,
}

/// The advisory indexes in force, one per feed, swapped whole.
pub type AdvisorySet = Arc<Vec<Arc<AdvisoryIndex>>>;

impl Quarantine {
    pub fn is_active(&self) -> bool {
        !self.classes.is_empty() || !self.ids.is_empty()
    }

    /// Why `version` of `name` (normalised as `normalised`, shown as
    /// `shown`) is quarantined, and the advisory that says so, or `None`.
    #[allow(clippy::too_many_arguments)]
    pub fn refusal(
        &self,
        set: &[Arc<AdvisoryIndex>],
        packages: &dyn Packages,
        shown: &str,
        normalised: &str,
        version: &str,
        published_ms: Option<i64>,
    ) -> Option<(String, Quarantined)> {
        if !self.is_active() {
            return None;
        }
        if let (Some(since), Some(at)) = (self.since_ms, published_ms) {
            if at < since {
                return None;
            }
        }
        if self
            .allow_versions
            .iter()
            .any(|(name, v)| name == normalised && v == version)
        {
            return None;
        }
        let advisory = set
            .iter()
            .flat_map(|index| index.affecting(packages, normalised, version))
            .filter(|a| !self.allow_ids.iter().any(|id| a.is_named(id)))
            .find(|a| {
                a.class.is_some_and(|c| self.classes.contains(&c))
                    || self.ids.iter().any(|id| a.is_named(id))
            })?;
        let class = advisory.class.map_or("listed", Class::name);
        let reason = format!(
            "{shown}@{version} is quarantined by this proxy: {} ({class}): {}",
            advisory.id, advisory.summary
        );
        let id = advisory.id.clone();
        Some((reason, Quarantined { class, id }))
    }

    /// Whether any advisory of `set` names package `normalised`.
    pub fn names(
        &self,
        set: &[Arc<AdvisoryIndex>],
        packages: &dyn Packages,
        normalised: &str,
    ) -> bool {
        self.is_active() && set.iter().any(|index| index.names(packages, normalised))
    }
}

#[cfg(test)]
mod tests;
