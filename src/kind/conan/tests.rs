//! The conan kind's conformance rows and unit tests: path classes below a
//! reference, the md5s a revision's `conanmanifest.txt` declares, publish
//! times from a `revisions` list, and Conan's version ranges in rules.

use super::super::conformance::{check_rules, Class, Declares, Expect, Filters, Rows};
use super::*;

const REF: &str = "v2/conans/liba/1.0/_/_/";
const RREV: &str = "331da349ab9fac573da2ca7ab4d98dfd";
const PKG: &str =
    "packages/da39a3ee5e6b4b0d3255bfef95601890afd80709/revisions/508de3fac7a74730f28ae46053df87ea";

fn at(rest: &str) -> &'static str {
    Box::leak(format!("{REF}{rest}").into_boxed_str())
}

pub(super) fn rows() -> Rows {
    let recipe_file = |f: &str| at(&format!("revisions/{RREV}/files/{f}"));
    let package_file = |f: &str| at(&format!("revisions/{RREV}/{PKG}/files/{f}"));
    Rows {
        paths: vec![
            ("v1/ping", Class::Mutable),
            ("v1/conans/liba/1.0/_/_/download_urls", Class::AnsweredHere),
            ("v2/conans/search?q=liba%2F*", Class::Mutable),
            ("v2/users/authenticate", Class::AnsweredHere),
            ("v2/users/check_credentials", Class::AnsweredHere),
            ("v2/users/other", Class::AnsweredHere),
            (at("latest"), Class::Mutable),
            (at("revisions"), Class::Mutable),
            (at(&format!("revisions/{RREV}/files")), Class::Mutable),
            (recipe_file("conanfile.py"), Class::Immutable),
            (recipe_file("conanmanifest.txt"), Class::Immutable),
            (recipe_file("metadata/sign/x.sig"), Class::Immutable),
            (at(&format!("revisions/{RREV}/packages/p/latest")), Class::Mutable),
            (at(&format!("revisions/{RREV}/{PKG}/files")), Class::Mutable),
            (package_file("conan_package.tgz"), Class::Immutable),
            (package_file("conaninfo.txt"), Class::Immutable),
            (at("revisions/latest/files/conanfile.py"), Class::Mutable),
            (at(&format!("revisions/{RREV}/files//x")), Class::Mutable),
            ("v2/conans/liba/1.0/_/revisions/r/files/conanfile.py", Class::Mutable),
        ],
        artifacts: vec![
            (at("latest"), Some(("liba", "1.0"))),
            (recipe_file("conanfile.py"), Some(("liba", "1.0"))),
            (package_file("conan_package.tgz"), Some(("liba", "1.0"))),
            (at("revisions"), None),
            ("v2/conans/search?q=liba", None),
            ("v1/ping", None),
        ],
        documents: vec![
            (at("latest"), Some(REF)),
            (at("revisions"), None),
            ("v2/conans/search?q=liba%2F*", Some("v2/conans/search")),
        ],
        keys: vec![
            (recipe_file("conanfile.py"), Some(recipe_file("conanfile.py"))),
            (package_file("conan_package.tgz"), Some(package_file("conan_package.tgz"))),
            (recipe_file("conanmanifest.txt"), None),
            (at("latest"), None),
        ],
        declares: vec![
            Declares {
                mirrors: &["https://conan.example"],
                files: &[],
                path: recipe_file("conanmanifest.txt"),
                body: b"1796420318\nconanfile.py: dd48bb0d1112974f6d71ad8d25a42e01\nexport_source/a.c: 00112233445566778899aabbccddeeff\n".to_vec(),
                declared: vec![(
                    recipe_file("conanfile.py").to_string(),
                    "md5:dd48bb0d1112974f6d71ad8d25a42e01".to_string(),
                )],
            },
            Declares {
                mirrors: &["https://conan.example"],
                files: &[],
                path: package_file("conanmanifest.txt"),
                body: b"1796420318\nconaninfo.txt: d41d8cd98f00b204e9800998ecf8427e\ninclude/liba.h: 44988304d1709a951b5db8bb87041e7c\nbad line\nx.txt: nothex\n".to_vec(),
                declared: vec![(
                    package_file("conaninfo.txt").to_string(),
                    "md5:d41d8cd98f00b204e9800998ecf8427e".to_string(),
                )],
            },
        ],
        filters: vec![Filters {
            deny: &["liba@>=1.1"],
            name: "v2/conans/search",
            suffix: "",
            body: br#"{"results": ["liba/1.0", "liba/1.1@acme/stable", "libb/2.0"]}"#.to_vec(),
            expected: Expect::Changed("liba/1.0", "liba/1.1"),
        }],
        ..Rows::default()
    }
}

#[test]
fn a_listed_file_is_declared_by_its_manifest_and_an_archive_by_none() {
    let file = format!("{REF}revisions/{RREV}/{PKG}/files/conaninfo.txt");
    assert_eq!(
        Conan.declared_by(&file),
        [format!(
            "{REF}revisions/{RREV}/{PKG}/files/conanmanifest.txt"
        )]
    );
    let archive = format!("{REF}revisions/{RREV}/{PKG}/files/conan_package.tgz");
    assert!(Conan.declared_by(&archive).is_empty());
    assert!(Conan.pins_on_first_use(&archive));
    assert_eq!(
        Conan.kept_headers("v1/ping"),
        ["x-conan-server-capabilities"]
    );
}

#[test]
fn publish_times_are_each_revisions_time_and_rules_read_conan_ranges() {
    let body = br#"{"revisions": [
        {"revision": "new", "time": "2026-12-04T21:38:45.771960+00:00"},
        {"revision": "old", "time": "2024-01-15T10:20:03.123+0000"},
        {"revision": "undated"}]}"#;
    let times = Conan.publish_times(body);
    assert_eq!(times.get("new"), Some(&1_796_420_325_771));
    assert_eq!(times.get(NEWEST), times.get("new"));
    assert_eq!(times.get("old"), Some(&1_705_314_003_123));
    assert_eq!(times.len(), 3);
    assert!(Conan.publish_times(b"not json").is_empty());
    // `latest` is dated by its filter, from the revisions list.
    let latest = Conan.artifact(&format!("{REF}latest")).unwrap();
    assert!(Conan.time_source(&latest).is_none());
    assert_eq!(
        Conan.times_from(REF, ""),
        Some(TimesFrom::Document(format!("{REF}revisions")))
    );
    assert_eq!(Conan.normalise(REF), "liba");
    let search = Conan.artifact(&format!("{REF}search")).unwrap();
    let source = Conan.time_source(&search).unwrap();
    assert_eq!(source.document, format!("{REF}revisions"));
    assert_eq!(source.key, TimeKey::Listed(NEWEST.into()));
    let file = format!("{REF}revisions/{RREV}/{PKG}/files/conaninfo.txt");
    let source = Conan.time_source(&Conan.artifact(&file).unwrap()).unwrap();
    assert_eq!(source.key, TimeKey::Listed(RREV.into()));
    check_rules(
        &Conan,
        &[
            ("liba@[>=1.0 <2]", "liba", "1.5", true),
            ("liba@~1.0", "liba", "1.1", false),
            ("lib*@1.0", "libb", "1.0.0", true),
            ("liba", "liba", "3.0", true),
        ],
        ("liba@!1.0", "Conan version range"),
    );
}

#[test]
fn latest_under_a_cooldown_is_the_newest_revision_old_enough() {
    use super::super::conformance::{guard, DAY, NOW};
    let config = guard("conan", Some(7), &[]);
    let judge = Judge::new(&config, &Conan, NOW);
    let times: HashMap<String, i64> = [
        ("young".to_string(), NOW - DAY),
        ("old".to_string(), NOW - 30 * DAY),
        ("older".to_string(), NOW - 60 * DAY),
        (NEWEST.to_string(), NOW - DAY),
    ]
    .into();
    let body = br#"{"revision": "young", "time": "2027-01-01T00:00:00+00:00"}"#;
    let Filtered::Changed(restated) = Conan.filter(&judge, REF, body, &times, "") else {
        panic!("not restated");
    };
    let restated: serde_json::Value = serde_json::from_slice(&restated).unwrap();
    assert_eq!(restated["revision"], "old");
    let when = restated["time"].as_str().unwrap();
    assert_eq!(revision_time(when), Some(NOW - 30 * DAY));
    // Old enough already: as sent; none old enough: refused.
    let old = br#"{"revision": "old", "time": "x"}"#;
    assert_eq!(
        Conan.filter(&judge, REF, old, &times, ""),
        Filtered::Unchanged
    );
    let only_young: HashMap<String, i64> = [("young".to_string(), NOW - DAY)].into();
    let refused = Conan.filter(&judge, REF, body, &only_young, "");
    assert!(matches!(refused, Filtered::Refused(r) if r.contains("min_release_age")));
}
