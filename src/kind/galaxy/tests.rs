//! The galaxy kind's conformance rows and the unit tests of its documents.

use super::*;
use crate::kind::conformance::{
    changed_json, guard, iso, Class, Declares, Expect, Filters, Rewritten as Rewrites, Rows, DAY,
    NOW,
};

const SHA: &str = "aa00000000000000000000000000000000000000000000000000000000000000";
const MIRRORS: &[&str] = &["https://galaxy.example"];
const FILES: &[&str] = &["https://cdn.example/dl"];
const DETAIL: &str = "api/v3/collections/acme/web/versions/1.2.0/";

fn detail(created: &str) -> Value {
    serde_json::json!({
        "namespace": {"name": "acme"}, "collection": {"name": "web"}, "version": "1.2.0",
        "href": "/api/v3/collections/acme/web/versions/1.2.0/",
        "download_url": "https://cdn.example/dl/acme-web-1.2.0.tar.gz",
        "artifact": {"filename": "acme-web-1.2.0.tar.gz", "sha256": SHA, "size": 42},
        "metadata": {"dependencies": {"acme.base": ">=1.0.0"}},
        "created_at": created,
    })
}

fn page(times: &[(&str, i64)]) -> Vec<u8> {
    let data: Vec<Value> = times
        .iter()
        .map(|(v, at)| serde_json::json!({"version": v, "created_at": iso(*at), "href": "/x/"}))
        .collect();
    serde_json::json!({"meta": {"count": data.len()}, "links": {"next": null}, "data": data})
        .to_string()
        .into_bytes()
}

pub(super) fn rows() -> Rows {
    Rows {
        paths: vec![
            ("api/", Class::Document),
            ("api", Class::Document),
            ("api/v3/collections/acme/web/", Class::Document),
            ("api/v3/collections/acme/web/versions/", Class::Document),
            (DETAIL, Class::Document),
            (
                "api/v3/plugin/ansible/content/published/collections/index/acme/web/versions/",
                Class::Document,
            ),
            (
                "api/v3/plugin/ansible/content/published/collections/artifacts/acme-web-1.2.0.tar.gz",
                Class::Immutable,
            ),
            ("download/acme-web-1.2.0-beta.1.tar.gz", Class::Immutable),
            ("api/v1/roles/", Class::Pass { post: false }),
        ],
        artifacts: vec![
            ("download/acme-web-1.2.0.tar.gz", Some(("acme.web", "1.2.0"))),
            ("download/acme-web-1.0.0-rc.1.tar.gz", Some(("acme.web", "1.0.0-rc.1"))),
            ("download/Acme-web-1.0.0.tar.gz", None),
            (DETAIL, None),
        ],
        documents: vec![
            ("api/v3/collections/acme/web/", Some("acme.web")),
            ("api/v3/collections/acme/web/versions/?limit=100", Some("acme.web")),
            (DETAIL, Some("acme.web")),
            ("api/", None),
            ("api/v3/collections/", None),
        ],
        keys: vec![
            ("download/acme-web-1.2.0.tar.gz", Some("download/acme-web-1.2.0.tar.gz")),
            (DETAIL, None),
        ],
        declares: vec![Declares {
            mirrors: MIRRORS,
            files: FILES,
            path: DETAIL,
            body: detail("2024-01-01T00:00:00Z").to_string().into_bytes(),
            declared: vec![(
                "~files/acme-web-1.2.0.tar.gz".into(),
                format!("sha256:{SHA} (42 bytes)"),
            )],
        }],
        rewrites: vec![Rewrites {
            mirrors: MIRRORS,
            files: FILES,
            path: DETAIL,
            body: r#"{"description":"/not/a/link","download_url":"https://cdn.example/dl/acme-web-1.2.0.tar.gz","links":{"next":"/api/v3/collections/acme/web/versions/?limit=1&offset=1"}}"#,
            expected: r#"{"description":"/not/a/link","download_url":"http://proxy/r/~files/acme-web-1.2.0.tar.gz","links":{"next":"/r/api/v3/collections/acme/web/versions/?limit=1&offset=1"}}"#,
        }],
        filters: vec![
            Filters {
                deny: &["acme.web@>=1.1.0,<2.0.0"],
                name: "acme.web",
                suffix: "",
                body: page(&[("1.0.0", NOW), ("1.2.0", NOW), ("2.0.0", NOW)]),
                expected: Expect::Changed("\"2.0.0\"", "\"1.2.0\""),
            },
            Filters {
                deny: &["acme.web@1.2.0"],
                name: "acme.web",
                suffix: "",
                body: detail("2024-01-01T00:00:00Z").to_string().into_bytes(),
                expected: Expect::Refused,
            },
            Filters {
                deny: &["acme.*"],
                name: "acme.web",
                suffix: "",
                body: br#"{"namespace":"acme","name":"web","highest_version":{"version":"2.0.0"}}"#
                    .to_vec(),
                expected: Expect::Refused,
            },
            Filters {
                deny: &["other.web"],
                name: "acme.web",
                suffix: "",
                body: page(&[("1.0.0", NOW)]),
                expected: Expect::Unchanged,
            },
        ],
        ..Rows::default()
    }
}

#[test]
fn the_cooldown_dates_each_version_by_created_at_and_the_page_count_follows() {
    let guard = guard("galaxy", Some(7), &[]);
    let judge = Judge::new(&guard, &Galaxy, NOW);
    let body = page(&[("1.0.0", NOW - 30 * DAY), ("1.1.0", NOW - DAY)]);
    let served = changed_json(Galaxy.filter(&judge, "acme.web", &body, &HashMap::new(), ""));
    assert_eq!(served["data"].as_array().unwrap().len(), 1);
    assert_eq!(served["data"][0]["version"], "1.0.0");
    assert_eq!(served["meta"]["count"], 1);
    let young = detail(&iso(NOW - DAY)).to_string();
    assert!(matches!(
        Galaxy.filter(&judge, "acme.web", young.as_bytes(), &HashMap::new(), ""),
        Filtered::Refused(_)
    ));
    let times = Galaxy.publish_times(young.as_bytes());
    assert_eq!(times.get("1.2.0"), Some(&(NOW - DAY)));
}

#[test]
fn the_api_root_is_one_key_with_or_without_its_slash() {
    let plan = Galaxy.plan("api", &HeaderMap::new());
    assert_eq!(
        plan.respelled.map(|r| r.apply("api")).as_deref(),
        Some("api/")
    );
    assert_eq!(Galaxy.plan("api/", &HeaderMap::new()).respelled, None);
    assert_eq!(Galaxy.plan("api/v3/", &HeaderMap::new()).respelled, None);
}

#[test]
fn a_tarball_is_dated_by_its_detail() {
    let artifact = Galaxy.artifact("download/acme-web-1.2.0.tar.gz").unwrap();
    let source = Galaxy.time_source(&artifact).unwrap();
    assert_eq!(source.document, DETAIL);
    assert_eq!(source.key, TimeKey::Listed("1.2.0".into()));
    assert_eq!(
        Galaxy.document(&source.document).as_deref(),
        Some("acme.web")
    );
}
