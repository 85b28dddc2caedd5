//! The cran kind's conformance rows and unit tests: path classes, package
//! files and their keys, `MD5sum` declared by `PACKAGES` (plain and
//! gzipped, `File:` and `Path:` honoured), publish times from
//! `Date/Publication`, and R's constraint syntax in rules.

use super::super::conformance::{Class, Declares, Rows};
use super::*;

const PACKAGES: &str = "Package: mcleaf\nVersion: 1.0.0\nLicense: MIT\nMD5sum: 56c364440e002fbc1c3033c64073fe7f\nNeedsCompilation: no\nDate/Publication: 2024-01-15 10:20:03 UTC\n\nPackage: mctop\nVersion: 2.1-3\nImports: mcleaf (>= 1.0),\n        utils\nMD5sum: 26f9261aec62d4fff4254028c866e443\n\nPackage: mcold\nVersion: 0.1\nPath: Older\nMD5sum: 00112233445566778899aabbccddeeff\n\nPackage: mcnosum\nVersion: 1.0\n";

pub(super) fn rows() -> Rows {
    Rows {
        paths: vec![
            ("src/contrib/PACKAGES", Class::Mutable),
            ("src/contrib/PACKAGES.gz", Class::Mutable),
            ("src/contrib/PACKAGES.rds", Class::Mutable),
            ("src/contrib/mctop_2.1-3.tar.gz", Class::Immutable),
            (
                "src/contrib/Archive/mctop/mctop_2.0-1.tar.gz",
                Class::Immutable,
            ),
            ("src/contrib/Archive/mctop/", Class::Mutable),
            ("src/contrib/Meta/archive.rds", Class::Mutable),
            ("bin/windows/contrib/4.2/PACKAGES", Class::Mutable),
            ("bin/windows/contrib/4.2/mctop_2.1-3.zip", Class::Immutable),
            (
                "bin/macosx/big-sur-arm64/contrib/4.3/mctop_2.1-3.tgz",
                Class::Immutable,
            ),
            ("src/contrib/a/b_1.0.tar.gz", Class::Mutable),
            ("src/contrib/_1.0.tar.gz", Class::Mutable),
            ("src/contrib/mctop.tar.gz", Class::Mutable),
        ],
        artifacts: vec![
            ("src/contrib/mctop_2.1-3.tar.gz", Some(("mctop", "2.1-3"))),
            ("src/contrib/R6_2.5.1.tar.gz", Some(("R6", "2.5.1"))),
            (
                "src/contrib/Archive/data.table/data.table_1.14.0.tar.gz",
                Some(("data.table", "1.14.0")),
            ),
            (
                "bin/windows/contrib/4.2/mctop_2.1-3.zip",
                Some(("mctop", "2.1-3")),
            ),
            ("src/contrib/PACKAGES.gz", None),
        ],
        documents: vec![("src/contrib/PACKAGES", None)],
        keys: vec![
            (
                "src/contrib/mctop_2.1-3.tar.gz",
                Some("src/contrib/mctop_2.1-3.tar.gz"),
            ),
            ("src/contrib/PACKAGES", None),
        ],
        declares: vec![Declares {
            mirrors: &["https://cloud.r-project.org"],
            files: &[],
            path: "src/contrib/PACKAGES",
            body: PACKAGES.as_bytes().to_vec(),
            declared: vec![
                (
                    "src/contrib/mcleaf_1.0.0.tar.gz".into(),
                    "md5:56c364440e002fbc1c3033c64073fe7f".into(),
                ),
                (
                    "src/contrib/mctop_2.1-3.tar.gz".into(),
                    "md5:26f9261aec62d4fff4254028c866e443".into(),
                ),
                (
                    "src/contrib/Older/mcold_0.1.tar.gz".into(),
                    "md5:00112233445566778899aabbccddeeff".into(),
                ),
            ],
        }],
        ..Rows::default()
    }
}

#[test]
fn a_gzipped_index_declares_the_same_and_binaries_take_their_extension() {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, PACKAGES.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let mirrors = [url::Url::parse("https://cloud.r-project.org").unwrap()];
    for (path, file) in [
        ("src/contrib/PACKAGES.gz", "src/contrib/mctop_2.1-3.tar.gz"),
        (
            "bin/windows/contrib/4.2/PACKAGES.gz",
            "bin/windows/contrib/4.2/mctop_2.1-3.zip",
        ),
        (
            "bin/macosx/contrib/4.2/PACKAGES",
            "bin/macosx/contrib/4.2/mctop_2.1-3.tgz",
        ),
    ] {
        assert!(Cran.declares(path), "{path}");
        let document = Document::new("r", &mirrors, &[], path);
        let learned = Cran.learn(&document, &gz);
        assert!(
            learned.iter().any(|(key, _)| key == file),
            "{path}: {learned:?}"
        );
    }
    assert!(!Cran.declares("src/contrib/PACKAGES.rds"));
    assert_eq!(
        Cran.declared_by("src/contrib/mctop_2.1-3.tar.gz"),
        ["src/contrib/PACKAGES.gz"]
    );
    assert!(Cran
        .declared_by("src/contrib/Archive/mctop/mctop_2.0-1.tar.gz")
        .is_empty());
}

#[test]
fn publish_times_are_date_publication_and_rules_read_r_constraints() {
    use super::super::conformance::check_rules;
    let times = Cran.publish_times(PACKAGES.as_bytes());
    assert_eq!(times.len(), 1);
    assert_eq!(
        times.get("mcleaf_1.0.0"),
        parse_time("2024-01-15T10:20:03Z").as_ref()
    );
    let artifact = Cran
        .artifact("src/contrib/Archive/mcleaf/mcleaf_0.9.tar.gz")
        .unwrap();
    let source = Cran.time_source(&artifact).unwrap();
    assert_eq!(source.document, "src/contrib/PACKAGES.gz");
    assert_eq!(source.key, TimeKey::Listed("mcleaf_0.9".into()));
    check_rules(
        &Cran,
        &[
            ("mctop@2.1-3", "mctop", "2.1-3", true),
            ("mctop@2.1-3", "mctop", "2.1-4", false),
            ("mctop@>= 2.0, < 3.0", "mctop", "2.1-3", true),
            ("mc*@(>= 3.0)", "mctop", "2.1-3", false),
            ("MCtop", "mctop", "2.1-3", false),
        ],
        ("mctop@~> 2", "R version constraint"),
    );
}
