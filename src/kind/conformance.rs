//! The checks every registered ecosystem runs: each gives its rows
//! ([`Ecosystem::conformance`]) and this file holds them against the
//! ecosystem's answers — path classes, variants by `Accept`, package
//! identities, a document's rewrite, the digests documents declare, and what
//! filtering does to a document. A new ecosystem gets every check by adding
//! its rows.

use std::collections::HashMap;

use axum::http::{header, HeaderMap};
use url::Url;

use super::declared::{Declared, Document};
use super::guard::{package_rule, Filtered, GuardConfig, Judge};
use super::rewrite::Rewrite;
use super::{Ecosystem, Kind, PassThrough, Plan, Rewritten as Rewrites};

/// What a path is to its ecosystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Cached forever.
    Immutable,
    /// An index document: cached, revalidated, rewritten.
    Document,
    /// Cached and revalidated, never rewritten.
    Mutable,
    /// An API route passed through (`post`: also takes POST).
    Pass { post: bool },
    /// Answered by the proxy itself, never fetched.
    AnsweredHere,
}

/// A document and the digests it declares.
pub struct Declares {
    pub mirrors: &'static [&'static str],
    pub files: &'static [&'static str],
    pub path: &'static str,
    pub body: Vec<u8>,
    /// (artifact key, `algo:hex`), in any order.
    pub declared: Vec<(String, String)>,
}

/// A document's rewrite as a client at `http://proxy` sees it.
pub struct Rewritten {
    pub mirrors: &'static [&'static str],
    pub files: &'static [&'static str],
    pub path: &'static str,
    pub body: &'static str,
    pub expected: &'static str,
}

/// What filtering a document under `deny` rules gives.
pub struct Filters {
    pub deny: &'static [&'static str],
    /// The package and the variant of its document.
    pub name: &'static str,
    pub suffix: &'static str,
    pub body: Vec<u8>,
    pub expected: Expect,
}

#[derive(Debug)]
pub enum Expect {
    Unchanged,
    Refused,
    /// Changed: keeps the first text, loses the second.
    Changed(&'static str, &'static str),
}

/// One ecosystem's rows. Empty lists are allowed, but every ecosystem gives
/// at least one path.
#[derive(Default)]
pub struct Rows {
    pub paths: Vec<(&'static str, Class)>,
    /// (path, `Accept`, the variant's suffix).
    pub variants: Vec<(&'static str, &'static str, Option<&'static str>)>,
    /// (path, the package and version it downloads).
    pub artifacts: Vec<(&'static str, Option<(&'static str, &'static str)>)>,
    /// (path, the package whose document it is).
    pub documents: Vec<(&'static str, Option<&'static str>)>,
    /// (path, the key its declared digest is kept under).
    pub keys: Vec<(&'static str, Option<&'static str>)>,
    pub declares: Vec<Declares>,
    pub rewrites: Vec<Rewritten>,
    pub filters: Vec<Filters>,
}

fn urls(list: &[&str]) -> Vec<Url> {
    list.iter().map(|u| Url::parse(u).unwrap()).collect()
}

/// The class of `path`, read from its plan.
fn class_of(plan: &Plan<'_>) -> Class {
    match plan.pass_through {
        Some(PassThrough { post }) => Class::Pass { post },
        None if plan.answered_here.is_some() => Class::AnsweredHere,
        None if plan.immutable => Class::Immutable,
        None if plan.document == Rewrites::Always => Class::Document,
        None => Class::Mutable,
    }
}

fn check(kind: Kind, rows: Rows) {
    let name = kind.name();
    assert!(!rows.paths.is_empty(), "{name}: no path rows");
    for (path, class) in rows.paths {
        let plan = kind.plan(path, &HeaderMap::new());
        assert_eq!(class_of(&plan), class, "{name} {path}");
        assert!(
            !(plan.immutable && plan.document == Rewrites::Always),
            "{name} {path}: immutable and a document"
        );
        assert_eq!(
            plan.variant.is_some(),
            !plan.variants.is_empty(),
            "{name} {path}: a variant is picked when there are variants"
        );
        // The key's spelling changes nothing of what the path is.
        if let Some(respelling) = plan.respelled {
            let respelled = respelling.apply(path);
            let again = kind.plan(&respelled, &HeaderMap::new());
            let expected = Plan {
                respelled: None,
                ..plan
            };
            assert_eq!(again, expected, "{name} {path} as {respelled}");
        }
        if plan.query_in_key {
            let with_query = format!("{path}?a=b");
            let again = kind.plan(&with_query, &HeaderMap::new());
            assert_eq!(again, plan, "{name} {with_query}");
        }
    }
    for (path, accept, suffix) in rows.variants {
        let mut headers = HeaderMap::new();
        if !accept.is_empty() {
            headers.insert(header::ACCEPT, accept.parse().unwrap());
        }
        let plan = kind.plan(path, &headers);
        assert_eq!(
            plan.variant.map(|v| v.suffix),
            suffix,
            "{name} {path} {accept}"
        );
        assert_eq!(plan.variants.is_empty(), suffix.is_none(), "{name} {path}");
    }
    let packages = kind.packages();
    for (path, expected) in rows.artifacts {
        let found = packages
            .and_then(|p| p.artifact(path))
            .map(|a| (a.name, a.version));
        let expected = expected.map(|(n, v)| (n.to_string(), v.to_string()));
        assert_eq!(found, expected, "{name} {path}");
    }
    for (path, expected) in rows.documents {
        let found = packages.and_then(|p| p.document(path));
        assert_eq!(found.as_deref(), expected, "{name} {path}");
    }
    for (path, expected) in rows.keys {
        assert_eq!(
            kind.artifact_key(path).as_deref(),
            expected,
            "{name} {path}"
        );
    }
    for row in rows.declares {
        let digests = kind.digests().expect("declaring rows need Digests");
        assert!(digests.declares(row.path), "{name} {}: declares", row.path);
        let (mirrors, files) = (urls(row.mirrors), urls(row.files));
        let document = Document::new("r", &mirrors, &files, row.path);
        let mut learned: Vec<(String, String)> = digests
            .learn(&document, &row.body)
            .into_iter()
            .map(|(key, d): (String, Declared)| (key, d.to_string()))
            .collect();
        learned.sort();
        let mut expected = row.declared;
        expected.sort();
        assert_eq!(learned, expected, "{name} {}", row.path);
    }
    for row in rows.rewrites {
        assert!(
            kind.plan(row.path, &HeaderMap::new()).document == Rewrites::Always,
            "{name} {}: a document",
            row.path
        );
        let (mirrors, files) = (urls(row.mirrors), urls(row.files));
        let rewrite = Rewrite::new("r", &mirrors, &files, "http://proxy");
        let got = kind.ecosystem().rewrite(row.path, row.body, &rewrite);
        assert_eq!(got, row.expected, "{name} {}", row.path);
    }
    for row in rows.filters {
        let packages = packages.expect("filter rows need Packages");
        let guard = GuardConfig {
            deny: row
                .deny
                .iter()
                .map(|r| package_rule(packages, r).unwrap())
                .collect(),
            ..GuardConfig::default()
        };
        let judge = Judge::new(&guard, packages, 0);
        let got = packages.filter(&judge, row.name, &row.body, &HashMap::new(), row.suffix);
        let ok = match (&row.expected, &got) {
            (Expect::Unchanged, Filtered::Unchanged) => true,
            (Expect::Refused, Filtered::Refused(_)) => true,
            (Expect::Changed(keeps, loses), Filtered::Changed(body)) => {
                let body = String::from_utf8_lossy(body);
                body.contains(keeps) && !body.contains(loses)
            }
            _ => false,
        };
        assert!(
            ok,
            "{name} {}: expected {:?}, got {got:?}",
            row.name, row.expected
        );
    }
}

#[test]
fn every_registered_ecosystem_conforms() {
    for kind in Kind::all() {
        check(kind, kind.ecosystem().conformance());
    }
}

#[test]
fn files_paths_are_immutable_for_every_kind() {
    for kind in Kind::all() {
        assert!(kind.is_immutable("~files/any/file"), "{kind:?}");
        let plan = kind.plan("~files/any/file", &HeaderMap::new());
        assert!(plan.immutable, "{kind:?}");
    }
}

/// The ecosystem trait is object safe and every method has a default but
/// the name (and the test rows).
#[test]
fn a_bare_ecosystem_means_nothing_special() {
    struct Bare;
    impl Ecosystem for Bare {
        fn name(&self) -> &'static str {
            "bare"
        }
        fn conformance(&self) -> Rows {
            Rows::default()
        }
    }
    let bare: &dyn Ecosystem = &Bare;
    assert_eq!(bare.plan("a", &HeaderMap::new()), Plan::default());
    assert!(bare.digests().is_none() && bare.packages().is_none());
    assert_eq!(bare.refuses_key("mirrors"), None);
    assert!(bare.refuses_key("sumdb").is_some());
}

/// A guard for the unit tests of an ecosystem's filter: `min_release_age`
/// in days, and `deny` rules.
pub fn guard(kind: &str, min_age_days: Option<u64>, deny: &[&str]) -> GuardConfig {
    let packages = Kind::named(kind).unwrap().packages().unwrap();
    GuardConfig {
        min_release_age: min_age_days.map(|d| std::time::Duration::from_secs(d * 24 * 3600)),
        deny: deny
            .iter()
            .map(|r| package_rule(packages, r).unwrap())
            .collect(),
        ..GuardConfig::default()
    }
}

/// A day and an instant, in unix ms, for the filter tests.
pub const DAY: i64 = 24 * 3600 * 1000;
pub const NOW: i64 = 1_800_000_000_000;

/// `ms` as RFC 3339, as registries write publish times.
pub fn iso(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

/// The JSON of a changed document.
pub fn changed_json(filtered: Filtered) -> serde_json::Value {
    match filtered {
        Filtered::Changed(bytes) => serde_json::from_slice(&bytes).unwrap(),
        other => panic!("not changed: {other:?}"),
    }
}

/// Each (rule, name, version, matches) in the ecosystem's syntax, and a
/// malformed rule refused with a message that says `says`.
pub fn check_rules(
    packages: &dyn super::Packages,
    table: &[(&str, &str, &str, bool)],
    (malformed, says): (&str, &str),
) {
    for (rule, name, version, matches) in table {
        let parsed = package_rule(packages, rule).unwrap();
        assert_eq!(
            parsed.matches(name, version),
            *matches,
            "{rule} {name} {version}"
        );
    }
    let error = package_rule(packages, malformed).unwrap_err();
    assert!(error.contains(says), "{malformed}: {error}");
}
