//! The hex kind's conformance rows and unit tests: path classes (an
//! organization's under `repos/<org>/` too), tarball names, each release's
//! `outer_checksum` declared by `packages/<name>`, publish times from
//! `published_at`, and Elixir's requirement syntax in rules.

use prost::Message as _;

use super::super::conformance::{Class, Declares, Rows};
use super::*;

/// A release as the tests list one: version, outer checksum, published at.
type Listed<'a> = (&'a str, Option<[u8; 32]>, Option<i64>);

/// `packages/<name>` as a repository serves it: a gzipped `Signed` whose
/// payload lists these releases.
fn registry_body(releases: &[Listed<'_>]) -> Vec<u8> {
    let package = registry::Package {
        releases: releases
            .iter()
            .map(|(version, outer, at)| registry::Release {
                version: Some(version.to_string()),
                outer_checksum: outer.map(|o| o.to_vec()),
                published_at: at.map(|seconds| registry::Timestamp {
                    seconds: Some(seconds),
                }),
            })
            .collect(),
    };
    let signed = registry::Signed {
        payload: Some(package.encode_to_vec()),
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &signed.encode_to_vec()).unwrap();
    gz.finish().unwrap()
}

pub(super) fn rows() -> Rows {
    Rows {
        paths: vec![
            ("names", Class::Mutable),
            ("versions", Class::Mutable),
            ("public_key", Class::Mutable),
            ("packages/cowboy", Class::Mutable),
            ("tarballs/cowboy-2.9.0.tar", Class::Immutable),
            ("tarballs/phoenix_html-4.0.0-rc.1.tar", Class::Immutable),
            ("repos/acme/tarballs/secret-1.0.0.tar", Class::Immutable),
            ("repos/acme/packages/secret", Class::Mutable),
            ("tarballs/cowboy.tar", Class::Mutable),
            ("tarballs/a/b-1.0.0.tar", Class::Mutable),
        ],
        artifacts: vec![
            ("tarballs/cowboy-2.9.0.tar", Some(("cowboy", "2.9.0"))),
            (
                "tarballs/phoenix_html-4.0.0-rc.1.tar",
                Some(("phoenix_html", "4.0.0-rc.1")),
            ),
            (
                "repos/acme/tarballs/secret-1.0.0.tar",
                Some(("secret", "1.0.0")),
            ),
            ("packages/cowboy", None),
        ],
        documents: vec![("packages/cowboy", None)],
        keys: vec![
            (
                "tarballs/cowboy-2.9.0.tar",
                Some("tarballs/cowboy-2.9.0.tar"),
            ),
            ("packages/cowboy", None),
        ],
        declares: vec![Declares {
            mirrors: &["https://repo.hex.pm"],
            files: &[],
            path: "packages/mc_leaf",
            body: registry_body(&[
                ("1.0.0", Some([0xab; 32]), None),
                ("0.9.0", None, None),
                ("1.1.0", Some([0xcd; 32]), Some(1_700_000_000)),
            ]),
            declared: vec![
                (
                    "tarballs/mc_leaf-1.0.0.tar".into(),
                    format!("sha256:{}", "ab".repeat(32)),
                ),
                (
                    "tarballs/mc_leaf-1.1.0.tar".into(),
                    format!("sha256:{}", "cd".repeat(32)),
                ),
            ],
        }],
        ..Rows::default()
    }
}

#[test]
fn an_organizations_registry_declares_its_own_tarballs() {
    let body = registry_body(&[("1.0.0", Some([0x11; 32]), None)]);
    let mirrors = [url::Url::parse("https://repo.hex.pm").unwrap()];
    let document = Document::new("r", &mirrors, &[], "repos/acme/packages/secret");
    let learned = Hex.learn(&document, &body);
    assert_eq!(learned.len(), 1);
    assert_eq!(learned[0].0, "repos/acme/tarballs/secret-1.0.0.tar");
    assert_eq!(
        Hex.declared_by("repos/acme/tarballs/secret-1.0.0.tar"),
        ["repos/acme/packages/secret"]
    );
    // Not a registry document: nothing, and no panic.
    assert!(Hex.learn(&document, b"not gzip").is_empty());
}

#[test]
fn publish_times_are_published_at_and_rules_read_elixir_requirements() {
    use super::super::conformance::check_rules;
    let body = registry_body(&[
        ("1.0.0", Some([0xab; 32]), Some(1_700_000_000)),
        ("1.1.0", Some([0xcd; 32]), None),
    ]);
    let times = Hex.publish_times(&body);
    assert_eq!(times.len(), 1);
    assert_eq!(times.get("1.0.0"), Some(&1_700_000_000_000));
    let artifact = Hex.artifact("tarballs/mc_leaf-1.0.0.tar").unwrap();
    let source = Hex.time_source(&artifact).unwrap();
    assert_eq!(source.document, "packages/mc_leaf");
    assert_eq!(source.key, TimeKey::Listed("1.0.0".into()));
    check_rules(
        &Hex,
        &[
            ("mc_leaf@~> 1.0", "mc_leaf", "1.5.0", true),
            ("mc_leaf@~> 1.0.0", "mc_leaf", "1.1.0", false),
            ("mc_*@>= 2.0.0 and < 3.0.0", "mc_top", "2.1.0", true),
            ("mc_leaf@1.0.0", "mc_leaf", "1.0.0", true),
        ],
        ("mc_leaf@^1.0", "Elixir version requirement"),
    );
}
