//! The nuget kind's rows and unit tests: v3 and v2 path classes, the
//! service index rewritten, `packageHash` declared from registrations and
//! v2 entries, interval rules, and documents filtered by `published`.

use super::super::conformance::{Class, Declares, Expect, Filters, Rewritten, Rows};
use super::*;

/// `packageHash` of the bytes `hello`: SHA-512, base64.
fn hash() -> (String, String) {
    use sha2::Digest as _;
    let digest = sha2::Sha512::digest(b"hello");
    (
        base64::engine::general_purpose::STANDARD.encode(digest),
        hex::encode(digest),
    )
}

fn registration_index() -> String {
    let (b64, _) = hash();
    serde_json::json!({"count": 1, "items": [{"count": 2, "items": [
        {"@id": "https://api.nuget.org/v3/registration5-gz-semver2/acme.hello/1.0.0.json",
         "catalogEntry": {"id": "Acme.Hello", "version": "1.0.0", "published": "2024-01-01T00:00:00+00:00",
                          "packageHash": b64, "packageHashAlgorithm": "SHA512"},
         "packageContent": "https://api.nuget.org/v3-flatcontainer/acme.hello/1.0.0/acme.hello.1.0.0.nupkg"},
        {"@id": "https://api.nuget.org/v3/registration5-gz-semver2/acme.hello/2.0.0.json",
         "catalogEntry": {"id": "Acme.Hello", "version": "2.0.0", "published": "2024-02-01T00:00:00+00:00"},
         "packageContent": "https://api.nuget.org/v3-flatcontainer/acme.hello/2.0.0/acme.hello.2.0.0.nupkg"}
    ]}]})
    .to_string()
}

fn v2_entry(version: &str, hash: &str) -> String {
    format!(
        "<entry><id>https://www.nuget.org/api/v2/Packages(Id='Acme.Hello',Version='{version}')</id><content type=\"application/zip\" src=\"https://www.nuget.org/api/v2/package/Acme.Hello/{version}\" /><m:properties><d:Id>Acme.Hello</d:Id><d:Version>{version}</d:Version><d:Published m:type=\"Edm.DateTime\">2024-01-01T00:00:00</d:Published><d:PackageHash>{hash}</d:PackageHash><d:PackageHashAlgorithm>SHA512</d:PackageHashAlgorithm></m:properties></entry>"
    )
}

pub(super) fn rows() -> Rows {
    let (b64, hex) = hash();
    Rows {
        paths: vec![
            ("v3/index.json", Class::Document),
            ("v3-flatcontainer/acme.hello/index.json", Class::Document),
            (
                "v3-flatcontainer/acme.hello/1.0.0/acme.hello.1.0.0.nupkg",
                Class::Immutable,
            ),
            (
                "v3-flatcontainer/acme.hello/1.0.0/acme.hello.nuspec",
                Class::Immutable,
            ),
            (
                "v3/registration5-gz-semver2/acme.hello/index.json",
                Class::Document,
            ),
            (
                "v3/registration5-semver1/acme.hello/page/1.0.0/2.0.0.json",
                Class::Document,
            ),
            ("~files/query", Class::Pass { post: false }),
            ("~files/autocomplete", Class::Pass { post: false }),
            ("api/v2/", Class::Document),
            ("api/v2/$metadata", Class::Document),
            (
                "api/v2/Packages(Id='Acme.Hello',Version='1.0.0')",
                Class::Document,
            ),
            ("api/v2/FindPackagesById()", Class::Document),
            ("api/v2/package/Acme.Hello/1.0.0", Class::Immutable),
            ("api/v2/readme.txt", Class::Mutable),
        ],
        artifacts: vec![
            (
                "v3-flatcontainer/acme.hello/1.0.0/acme.hello.1.0.0.nupkg",
                Some(("acme.hello", "1.0.0")),
            ),
            (
                "api/v2/package/Acme.Hello/1.0.0",
                Some(("Acme.Hello", "1.0.0")),
            ),
            ("v3/index.json", None),
        ],
        documents: vec![
            ("v3-flatcontainer/acme.hello/index.json", Some("acme.hello")),
            (
                "v3/registration5-gz-semver2/acme.hello/index.json",
                Some("acme.hello"),
            ),
            (
                "api/v2/Packages(Id='Acme.Hello',Version='1.0.0')",
                Some("Acme.Hello"),
            ),
            (
                "api/v2/FindPackagesById()?id='Acme.Hello'",
                Some("Acme.Hello"),
            ),
            ("v3/index.json", None),
        ],
        keys: vec![
            (
                "v3-flatcontainer/acme.hello/1.0.0/acme.hello.1.0.0.nupkg",
                Some("v3-flatcontainer/acme.hello/1.0.0/acme.hello.1.0.0.nupkg"),
            ),
            ("v3-flatcontainer/acme.hello/1.0.0/acme.hello.nuspec", None),
        ],
        declares: vec![
            Declares {
                mirrors: &["https://api.nuget.org"],
                files: &["https://azuresearch-usnc.nuget.org"],
                path: "v3/registration5-gz-semver2/acme.hello/index.json",
                body: registration_index().into_bytes(),
                declared: vec![(
                    "v3-flatcontainer/acme.hello/1.0.0/acme.hello.1.0.0.nupkg".into(),
                    format!("sha512:{hex}"),
                )],
            },
            Declares {
                mirrors: &["https://www.nuget.org"],
                files: &[],
                path: "api/v2/FindPackagesById()",
                body: format!("<feed>{}</feed>", v2_entry("1.0.0", &b64)).into_bytes(),
                declared: vec![(
                    "api/v2/package/Acme.Hello/1.0.0".into(),
                    format!("sha512:{hex}"),
                )],
            },
        ],
        rewrites: vec![Rewritten {
            mirrors: &["https://api.nuget.org"],
            files: &["https://azuresearch-usnc.nuget.org"],
            path: "v3/index.json",
            body: r#"{"resources":[{"@id":"https://api.nuget.org/v3-flatcontainer/","@type":"PackageBaseAddress/3.0.0"},{"@id":"https://azuresearch-usnc.nuget.org/query","@type":"SearchQueryService"},{"@id":"https://www.nuget.org/packages/{id}","@type":"PackageDetailsUriTemplate/5.1.0"}]}"#,
            expected: r#"{"resources":[{"@id":"http://proxy/r/v3-flatcontainer/","@type":"PackageBaseAddress/3.0.0"},{"@id":"http://proxy/r/~files/query","@type":"SearchQueryService"},{"@id":"https://www.nuget.org/packages/{id}","@type":"PackageDetailsUriTemplate/5.1.0"}]}"#,
        }],
        filters: vec![
            Filters {
                deny: &["Acme.Hello@[2.0,)"],
                name: "acme.hello",
                suffix: "",
                body: registration_index().into_bytes(),
                expected: Expect::Changed("1.0.0.nupkg", "2.0.0.nupkg"),
            },
            Filters {
                deny: &["acme.hello@1.0.0"],
                name: "Acme.Hello",
                suffix: "",
                body: format!("<feed>{}</feed>", v2_entry("1.0.0", &b64)).into_bytes(),
                expected: Expect::Refused,
            },
        ],
        ..Rows::default()
    }
}

#[test]
fn rules_read_nuget_intervals_and_version_lists_are_dated_by_registration_leaves() {
    use super::super::conformance::{check_rules, guard, iso, DAY, NOW};
    check_rules(
        &Nuget,
        &[
            ("Acme.Hello@[1.0,2.0)", "acme.hello", "1.5.0", true),
            ("Acme.Hello@[1.0,2.0)", "acme.hello", "2.0.0-beta", true),
            ("Acme.Hello@[1.0,2.0)", "acme.hello", "2.0.0", false),
            ("Acme.*", "acme.hello", "1.0.0", true),
            ("Acme.Hello@1.0", "acme.hello", "1.0.0", true),
        ],
        ("Acme.Hello@[1.0", "NuGet version range"),
    );
    let versions = Nuget.dated_versions(
        "Acme.Hello",
        br#"{"versions":["1.0.0","10.0.0","2.0.0-rc.1"]}"#,
    );
    let order: Vec<&str> = versions.iter().map(|a| a.version.as_str()).collect();
    assert_eq!(order, ["10.0.0", "2.0.0-rc.1", "1.0.0"]);
    assert_eq!(
        Nuget.time_source(&versions[0]).unwrap().document,
        "v3/registration5-gz-semver2/acme.hello/10.0.0.json"
    );
    let config = guard("nuget", Some(7), &[]);
    let judge = Judge::new(&config, &Nuget, NOW);
    let times = HashMap::from([
        ("1.0.0".to_string(), NOW - 30 * DAY),
        ("2.0.0".to_string(), NOW - DAY),
    ]);
    let Filtered::Changed(out) = Nuget.filter(
        &judge,
        "acme.hello",
        br#"{"versions":["1.0.0","2.0.0"]}"#,
        &times,
        "",
    ) else {
        panic!("not changed");
    };
    assert_eq!(out, br#"{"versions":["1.0.0"]}"#);
    // v2 times carry no zone: UTC.
    let feed = format!("<feed>{}</feed>", v2_entry("1.0.0", "x"));
    let published = Nuget.publish_times(feed.as_bytes());
    assert_eq!(
        published.get("1.0.0"),
        Some(&parse_time("2024-01-01T00:00:00Z").unwrap())
    );
    assert!(iso(NOW).ends_with('Z'));
}
