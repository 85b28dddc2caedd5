//! The composer kind's rows and unit tests: path classes, the minified
//! format expanded (with `__unset`) before `dist.url` is rewritten,
//! root-relative templates moved under the remote, declared `shasum`s.

use super::super::conformance::{Class, Declares, Rewritten, Rows};
use super::super::declared::Document;
use super::*;

const SHA1: &str = "0123456789abcdef0123456789abcdef01234567";

/// A minified p2 file: 1.1.0 inherits 1.0.0's keys, drops `require-dev`.
fn minified() -> Value {
    serde_json::json!({"minified": "composer/2.0", "packages": {"acme/hello": [
        {"name": "acme/hello", "version": "1.0.0", "require-dev": {"phpunit/phpunit": "^9"},
         "dist": {"type": "zip", "url": "https://api.github.com/repos/acme/hello/zipball/aaa",
                  "reference": "aaa", "shasum": SHA1}},
        {"version": "1.1.0", "require-dev": "__unset",
         "dist": {"type": "zip", "url": "https://api.github.com/repos/acme/hello/zipball/bbb",
                  "reference": "bbb", "shasum": ""}}
    ]}})
}

pub(super) fn rows() -> Rows {
    Rows {
        paths: vec![
            ("packages.json", Class::Document),
            ("p2/acme/hello.json", Class::Document),
            ("p2/acme/hello~dev.json", Class::Document),
            ("p2/acme.json", Class::Mutable),
            ("~files/repos/acme/hello/zipball/aaa", Class::Immutable),
            ("api/security-advisories/", Class::Pass { post: true }),
        ],
        keys: vec![
            (
                "~files/repos/acme/hello/zipball/aaa",
                Some("~files/repos/acme/hello/zipball/aaa"),
            ),
            ("p2/acme/hello.json", None),
        ],
        declares: vec![Declares {
            mirrors: &["https://repo.packagist.org"],
            files: &["https://api.github.com"],
            path: "p2/acme/hello.json",
            body: minified().to_string().into_bytes(),
            // 1.1.0's empty shasum declares nothing (it is pinned on first use).
            declared: vec![(
                "~files/repos/acme/hello/zipball/aaa".into(),
                format!("sha1:{SHA1}"),
            )],
        }],
        rewrites: vec![Rewritten {
            mirrors: &["https://repo.packagist.org"],
            files: &["https://api.github.com"],
            path: "packages.json",
            body: r#"{"metadata-url":"/p2/%package%.json","notify-batch":"https://packagist.org/downloads/","search":"https://repo.packagist.org/search.json?q=%query%"}"#,
            expected: r#"{"metadata-url":"http://proxy/r/p2/%package%.json","search":"http://proxy/r/search.json?q=%query%"}"#,
        }],
        documents: vec![
            ("p2/acme/hello.json", Some("acme/hello")),
            ("p2/acme/hello~dev.json", Some("acme/hello")),
            ("packages.json", None),
        ],
        artifacts: vec![("~files/repos/acme/hello/zipball/aaa", None)],
        ..Rows::default()
    }
}

fn rewrite() -> Rewrite {
    let mirrors = [url::Url::parse("https://repo.packagist.org").unwrap()];
    let files = [url::Url::parse("https://api.github.com").unwrap()];
    Rewrite::new("r", &mirrors, &files, "http://proxy")
}

#[test]
fn a_minified_document_is_expanded_then_its_dist_urls_rewritten() {
    let text = minified().to_string().replace('/', "\\/");
    let out: Value =
        serde_json::from_str(&Composer.rewrite("p2/acme/hello.json", &text, &rewrite())).unwrap();
    assert!(out.get("minified").is_none());
    let versions = out["packages"]["acme/hello"].as_array().unwrap();
    assert_eq!(versions[1]["name"], "acme/hello");
    assert_eq!(versions[0]["require-dev"]["phpunit/phpunit"], "^9");
    assert!(versions[1].get("require-dev").is_none());
    assert_eq!(
        versions[1]["dist"]["url"],
        "http://proxy/r/~files/repos/acme/hello/zipball/bbb"
    );
    assert_eq!(versions[0]["dist"]["reference"], "aaa");
}

#[test]
fn empty_shasums_pin_archives_and_documents_do_not() {
    assert!(Composer.pins_on_first_use("~files/repos/acme/hello/zipball/bbb"));
    assert!(!Composer.pins_on_first_use("p2/acme/hello.json"));
    let mirrors = [url::Url::parse("http://127.0.0.1:1/m").unwrap()];
    let doc = Document::new("r", &mirrors, &[], "p2/acme/hello.json");
    assert!(Composer.learn(&doc, b"not json").is_empty());
}

#[test]
fn rules_read_composer_constraints_and_filter_p2_versions_by_their_time() {
    use super::super::conformance::{check_rules, guard, iso, DAY, NOW};
    check_rules(
        &Composer,
        &[
            ("acme/hello@^1.2", "acme/hello", "1.3.0", true),
            ("acme/hello@^1.2", "acme/hello", "2.0.0", false),
            ("acme/hello@>=1.0 <2.0 || ^3.0", "acme/hello", "3.1.0", true),
            ("acme/*", "acme/hello", "1.0.0", true),
            ("Acme/Hello", "acme/hello", "1.0.0", true),
        ],
        ("acme/hello@~> 1", "Composer version constraint"),
    );
    // Minified: 1.1.0 and 2.0.0 inherit 1.0.0's keys, so filtering comes
    // after expanding; 2.0.0 is a day old.
    let doc = serde_json::json!({"minified": "composer/2.0", "packages": {"acme/hello": [
        {"name": "acme/hello", "version": "1.0.0", "time": iso(NOW - 30 * DAY),
         "dist": {"type": "zip", "url": "https://api.github.com/a", "reference": "a"}},
        {"version": "1.1.0", "time": iso(NOW - 20 * DAY),
         "dist": {"type": "zip", "url": "https://api.github.com/b", "reference": "b"}},
        {"version": "2.0.0", "time": iso(NOW - DAY),
         "dist": {"type": "zip", "url": "https://api.github.com/c", "reference": "c"}}
    ]}});
    let body = doc.to_string().into_bytes();
    assert_eq!(
        Composer.publish_times(&body).get("2.0.0"),
        Some(&(NOW - DAY))
    );
    let config = guard("composer", Some(7), &["acme/hello@~1.1.0"]);
    let judge = Judge::new(&config, &Composer, NOW);
    let Filtered::Changed(out) = Composer.filter(&judge, "acme/hello", &body, &HashMap::new(), "")
    else {
        panic!("not changed");
    };
    let out: Value = serde_json::from_slice(&out).unwrap();
    let versions = out["packages"]["acme/hello"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["version"], "1.0.0");
    assert_eq!(versions[0]["name"], "acme/hello");
    let config = guard("composer", None, &["acme/hello"]);
    let judge = Judge::new(&config, &Composer, NOW);
    assert!(matches!(
        Composer.filter(&judge, "acme/hello", &body, &HashMap::new(), ""),
        Filtered::Refused(_)
    ));
    let config = guard("composer", None, &["other/pkg"]);
    let judge = Judge::new(&config, &Composer, NOW);
    assert!(matches!(
        Composer.filter(&judge, "acme/hello", &body, &HashMap::new(), ""),
        Filtered::Unchanged
    ));
}

#[test]
fn the_advisories_api_url_goes_through_the_proxy_or_is_left_out() {
    let served = |advisories: Value| {
        let text =
            serde_json::json!({"packages": [], "security-advisories": advisories}).to_string();
        let out: Value =
            serde_json::from_str(&Composer.rewrite("packages.json", &text, &rewrite())).unwrap();
        out["security-advisories"].clone()
    };
    let on_mirror = served(
        serde_json::json!({"metadata": false, "api-url": "https://repo.packagist.org/api/security-advisories/"}),
    );
    assert_eq!(
        on_mirror["api-url"],
        "http://proxy/r/api/security-advisories/"
    );
    let relative = served(serde_json::json!({"api-url": "/api/security-advisories/"}));
    assert_eq!(
        relative["api-url"],
        "http://proxy/r/api/security-advisories/"
    );
    // Another host, the advisories in the p2 files: read there instead.
    let elsewhere = served(
        serde_json::json!({"metadata": true, "api-url": "https://packagist.org/api/security-advisories/"}),
    );
    assert_eq!(elsewhere, serde_json::json!({"metadata": true}));
    let only_api = served(serde_json::json!({"api-url": "https://advisories.example/v1/"}));
    assert_eq!(
        only_api["api-url"],
        "http://proxy/r/api/security-advisories/"
    );
}
