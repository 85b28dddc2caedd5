//! The conda kind's conformance rows and unit tests: path classes below a
//! channel and subdir, package names, each record's `sha256` declared by
//! `repodata.json` (plain and `.zst`), publish times from `timestamp`, and
//! the filter that keeps a package's last records.

use super::super::conformance::{
    check_rules, guard, Class, Declares, Expect, Filters, Rows, DAY, NOW,
};
use super::*;

fn repodata(records: &[(&str, &str, &str, i64)]) -> String {
    let mut packages = Map::new();
    for (file, name, version, at) in records {
        packages.insert(
            file.to_string(),
            serde_json::json!({"name": name, "version": version, "build": "0", "build_number": 0,
                "depends": [], "sha256": "ab".repeat(32), "timestamp": at}),
        );
    }
    serde_json::json!({"info": {"subdir": "noarch"}, "packages": {}, "packages.conda": packages})
        .to_string()
}

pub(super) fn rows() -> Rows {
    let doc = repodata(&[
        ("mc-leaf-1.0-0.conda", "mc-leaf", "1.0", 1_700_000_000_000),
        ("mc-leaf-2.0-0.conda", "mc-leaf", "2.0", 1_700_000_000_000),
        ("mc-bad-1.0-0.conda", "mc-bad", "1.0", 1_700_000_000_000),
    ]);
    Rows {
        paths: vec![
            ("conda-forge/noarch/repodata.json", Class::Mutable),
            ("conda-forge/linux-64/repodata.json.zst", Class::Mutable),
            ("conda-forge/linux-64/repodata.json.bz2", Class::Mutable),
            ("conda-forge/linux-64/current_repodata.json", Class::Mutable),
            ("conda-forge/channeldata.json", Class::Mutable),
            (
                "conda-forge/linux-64/repodata_shards.msgpack.zst",
                Class::Mutable,
            ),
            (
                "conda-forge/linux-64/shards/0123abcd.msgpack.zst",
                Class::Immutable,
            ),
            (
                "conda-forge/linux-64/numpy-1.26.4-py311h64a7726_0.conda",
                Class::Immutable,
            ),
            (
                "bioconda/noarch/samtools-1.19-h50ea8bc_0.tar.bz2",
                Class::Immutable,
            ),
            (
                "conda-forge/label/main/noarch/x-1.0-0.conda",
                Class::Immutable,
            ),
            ("numpy-1.26.4-0.conda", Class::Mutable),
            ("conda-forge/noarch/numpy.conda", Class::Mutable),
        ],
        artifacts: vec![
            (
                "conda-forge/linux-64/numpy-1.26.4-py311h64a7726_0.conda",
                Some(("numpy", "1.26.4")),
            ),
            (
                "conda-forge/noarch/typing-extensions-4.9.0-hd8ed1ab_0.tar.bz2",
                Some(("typing-extensions", "4.9.0")),
            ),
            ("conda-forge/noarch/repodata.json", None),
        ],
        documents: vec![
            (
                "conda-forge/noarch/repodata.json",
                Some("conda-forge/noarch/repodata.json"),
            ),
            ("conda-forge/noarch/mc-leaf-1.0-0.conda", None),
        ],
        keys: vec![
            (
                "conda-forge/noarch/mc-leaf-1.0-0.conda",
                Some("conda-forge/noarch/mc-leaf-1.0-0.conda"),
            ),
            ("conda-forge/noarch/repodata.json", None),
        ],
        declares: vec![Declares {
            mirrors: &["https://conda.anaconda.org"],
            files: &[],
            path: "conda-forge/noarch/repodata.json",
            body: doc.clone().into_bytes(),
            declared: [
                "mc-leaf-1.0-0.conda",
                "mc-leaf-2.0-0.conda",
                "mc-bad-1.0-0.conda",
            ]
            .iter()
            .map(|f| {
                (
                    format!("conda-forge/noarch/{f}"),
                    format!("sha256:{}", "ab".repeat(32)),
                )
            })
            .collect(),
        }],
        filters: vec![
            Filters {
                deny: &["mc-leaf@>=2"],
                name: "conda-forge/noarch/repodata.json",
                suffix: "",
                body: doc.clone().into_bytes(),
                expected: Expect::Changed("mc-leaf-1.0-0.conda", "mc-leaf-2.0-0.conda"),
            },
            // Every record of mc-bad refused: it stays, its file refused.
            Filters {
                deny: &["mc-bad"],
                name: "conda-forge/noarch/repodata.json",
                suffix: "",
                body: doc.into_bytes(),
                expected: Expect::Unchanged,
            },
        ],
        ..Rows::default()
    }
}

#[test]
fn a_zstd_repodata_declares_and_is_filtered_in_zstd() {
    let doc = repodata(&[
        ("mc-leaf-1.0-0.conda", "mc-leaf", "1.0", NOW - 30 * DAY),
        // Seconds, as old records have them.
        (
            "mc-leaf-1.1-0.conda",
            "mc-leaf",
            "1.1",
            (NOW - 20 * DAY) / 1000,
        ),
        ("mc-leaf-2.0-0.conda", "mc-leaf", "2.0", NOW - DAY),
    ]);
    let zst = zstd::stream::encode_all(doc.as_bytes(), 3).unwrap();
    let mirrors = [url::Url::parse("https://conda.anaconda.org").unwrap()];
    let path = "conda-forge/noarch/repodata.json.zst";
    let document = Document::new("r", &mirrors, &[], path);
    assert_eq!(Conda.learn(&document, &zst).len(), 3);
    let times = Conda.publish_times(&zst);
    assert_eq!(
        times.get("mc-leaf-1.1-0.conda"),
        Some(&((NOW - 20 * DAY) / 1000 * 1000))
    );
    let config = guard("conda", Some(7), &[]);
    let judge = Judge::new(&config, &Conda, NOW);
    let Filtered::Changed(out) = Conda.filter(&judge, path, &zst, &HashMap::new(), "") else {
        panic!("not changed");
    };
    let out = zstd::stream::decode_all(&out[..]).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("mc-leaf-1.1-0.conda") && !out.contains("mc-leaf-2.0-0.conda"),
        "{out}"
    );
    let artifact = Conda
        .artifact("conda-forge/noarch/mc-leaf-2.0-0.conda")
        .unwrap();
    let source = Conda.time_source(&artifact).unwrap();
    assert_eq!(source.document, "conda-forge/noarch/repodata.json");
    assert_eq!(source.key, TimeKey::Listed("mc-leaf-2.0-0.conda".into()));
}

#[test]
fn rules_read_conda_version_specs() {
    check_rules(
        &Conda,
        &[
            ("numpy@>=1.20,<2", "numpy", "1.26.4", true),
            ("numpy@1.26.*", "numpy", "1.26.4", true),
            ("NumPy@<1.0", "numpy", "1.26.4", false),
            ("mc-*", "mc-leaf", "1.0", true),
        ],
        ("numpy@~=1.2", "conda version spec"),
    );
}
