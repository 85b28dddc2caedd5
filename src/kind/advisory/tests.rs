//! The index and the verdict, from records built here; reading zips
//! (good and broken) is tested end to end in `tests/it/quarantine.rs`.

use std::collections::HashMap;

use super::*;
use crate::kind::guard::{GuardConfig, Judge, Standing};

/// The index of `records()`, and what reading it found.
fn indexed() -> (AdvisoryIndex, IndexReport) {
    let records = records()
        .into_iter()
        .map(|r| serde_json::from_value(r).unwrap())
        .collect();
    AdvisoryIndex::from_records(records)
}

fn records() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({
            "schema_version": "1.6.0",
            "id": "MAL-2025-47000",
            "summary": "Malicious code in left-pad-worm (npm)",
            "affected": [{
                "package": {"ecosystem": "npm", "name": "left-pad-worm"},
                "versions": ["1.0.1"]
            }]
        }),
        serde_json::json!({
            "id": "GHSA-aaaa-bbbb-cccc",
            "aliases": ["CVE-2025-0001"],
            "summary": "Prototype pollution in lodash-like",
            "severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}],
            "affected": [{
                "package": {"ecosystem": "npm", "name": "lodash-like"},
                "ranges": [{"type": "SEMVER", "events": [{"introduced": "2.0.0"}, {"fixed": "2.1.3"}]}]
            }]
        }),
        serde_json::json!({
            "id": "GHSA-dddd-eeee-ffff",
            "summary": "ReDoS in Requests_Like",
            "database_specific": {"severity": "MODERATE"},
            "affected": [{
                "package": {"ecosystem": "PyPI", "name": "Requests_Like"},
                "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"last_affected": "2.0rc1"}]}]
            }]
        }),
        serde_json::json!({
            "id": "DSA-5000-1",
            "affected": [{"package": {"ecosystem": "Debian:12", "name": "openssl"}, "versions": ["3.0.1"]}]
        }),
    ]
}

#[test]
fn an_osv_export_is_indexed_by_kind_and_normalised_name() {
    let (index, report) = indexed();
    assert_eq!(report.records, 4);
    assert_eq!(report.unmapped.get("Debian"), Some(&1));
    assert_eq!(report.packages.get("npm"), Some(&2));
    let (npm, pypi) = (&crate::kind::npm::Npm, &crate::kind::pypi::Pypi);
    let ids = |p: &dyn Packages, n: &str, v: &str| -> Vec<String> {
        index.affecting(p, n, v).map(|a| a.id.clone()).collect()
    };
    assert_eq!(ids(npm, "left-pad-worm", "1.0.1"), ["MAL-2025-47000"]);
    assert!(ids(npm, "left-pad-worm", "1.0.0").is_empty());
    assert_eq!(ids(npm, "lodash-like", "2.1.2"), ["GHSA-aaaa-bbbb-cccc"]);
    assert!(ids(npm, "lodash-like", "2.1.3").is_empty());
    assert!(ids(npm, "lodash-like", "1.9.0").is_empty());
    // PEP 503 names, PEP 440 order: 2.0rc1 is the last affected.
    assert_eq!(ids(pypi, "requests-like", "1.5"), ["GHSA-dddd-eeee-ffff"]);
    assert_eq!(
        ids(pypi, "requests-like", "2.0rc1"),
        ["GHSA-dddd-eeee-ffff"]
    );
    assert!(ids(pypi, "requests-like", "2.0").is_empty());
    let classes: Vec<Option<Class>> = index.advisories.iter().map(|a| a.class).collect();
    assert_eq!(
        classes,
        [
            Some(Class::Malicious),
            Some(Class::Critical),
            Some(Class::Medium)
        ]
    );
}

#[test]
fn a_feed_that_is_not_a_zip_says_so() {
    let error = AdvisoryIndex::from_zip(b"<html>").err().unwrap();
    assert!(error.starts_with("not a readable zip"), "{error}");
}

#[test]
fn the_quarantine_refuses_by_class_and_id_and_lets_the_allowed_through() {
    let npm = &crate::kind::npm::Npm;
    let (index, _) = indexed();
    let set = vec![Arc::new(index)];
    let guard = GuardConfig {
        quarantine: Quarantine {
            classes: vec![Class::Malicious],
            ids: vec!["CVE-2025-0001".to_string()],
            ..Quarantine::default()
        },
        ..GuardConfig::default()
    };
    assert!(guard.is_active());
    let judge = Judge::new(&guard, npm, 0).with_advisories(&set);
    assert_eq!(
        judge.refusal("left-pad-worm", "1.0.1", None).unwrap(),
        "left-pad-worm@1.0.1 is quarantined by this proxy: MAL-2025-47000 (malicious): Malicious code in left-pad-worm (npm)"
    );
    assert!(judge
        .refusal("lodash-like", "2.0.0", None)
        .unwrap()
        .contains("GHSA-aaaa-bbbb-cccc (critical)"));
    assert_eq!(judge.standing("lodash-like"), Standing::ByVersion);
    assert_eq!(judge.standing("express"), Standing::Served);
    // Without the indexes, nothing is known.
    assert_eq!(
        Judge::new(&guard, npm, 0).refusal("left-pad-worm", "1.0.1", None),
        None
    );

    let allowed = GuardConfig {
        quarantine: Quarantine {
            allow_ids: vec!["CVE-2025-0001".to_string()],
            allow_versions: vec![("left-pad-worm".to_string(), "1.0.1".to_string())],
            since_ms: Some(1000),
            ..guard.quarantine.clone()
        },
        ..GuardConfig::default()
    };
    let judge = Judge::new(&allowed, npm, 0).with_advisories(&set);
    assert_eq!(judge.refusal("left-pad-worm", "1.0.1", None), None);
    assert_eq!(judge.refusal("lodash-like", "2.0.0", None), None);
    let since = GuardConfig {
        quarantine: Quarantine {
            since_ms: Some(1000),
            ..guard.quarantine.clone()
        },
        ..GuardConfig::default()
    };
    let judge = Judge::new(&since, npm, 0).with_advisories(&set);
    assert_eq!(judge.refusal("left-pad-worm", "1.0.1", Some(999)), None);
    assert!(judge
        .refusal("left-pad-worm", "1.0.1", Some(1000))
        .is_some());
    assert!(judge.refusal("left-pad-worm", "1.0.1", None).is_some());
}

#[test]
fn cargo_and_maven_ranges_follow_their_own_version_order() {
    let record = serde_json::json!({
        "id": "RUSTSEC-2025-0001",
        "affected": [
            {"package": {"ecosystem": "crates.io", "name": "mc_crate"},
             "ranges": [{"type": "SEMVER", "events": [{"introduced": "0.8.0"}, {"fixed": "0.8.10"}]}]},
            {"package": {"ecosystem": "Maven", "name": "org.example:mc-lib"},
             "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "1.0-alpha-2"}, {"fixed": "1.0.1"}]}]}
        ]
    });
    let (index, report) =
        AdvisoryIndex::from_records(vec![serde_json::from_value(record).unwrap()]);
    assert_eq!(report.packages.get("crates.io"), Some(&1));
    let (cargo, maven) = (&crate::kind::cargo::Cargo, &crate::kind::maven::Maven);
    let hit = |p: &dyn Packages, n: &str, v: &str| index.affecting(p, n, v).count() == 1;
    // cargo names: `_` and `-` alike; 0.8.9 < 0.8.10 numerically.
    assert!(hit(cargo, "mc-crate", "0.8.9"));
    assert!(!hit(cargo, "mc-crate", "0.8.10"));
    assert!(!hit(cargo, "mc-crate", "0.7.99"));
    // Maven: 1.0-alpha-2 < 1.0 < 1.0.1.
    assert!(hit(maven, "org.example:mc-lib", "1.0"));
    assert!(hit(maven, "org.example:mc-lib", "1.0-beta-1"));
    assert!(!hit(maven, "org.example:mc-lib", "1.0-alpha-1"));
    assert!(!hit(maven, "org.example:mc-lib", "1.0.1"));
    // A kind without a version order: only listed versions (none here).
    assert!(!hit(&crate::kind::go::Go, "mc-crate", "0.8.9"));
}

#[test]
fn quarantined_versions_stay_listed_marked_so_only_an_exact_pin_picks_them() {
    let record = serde_json::json!({
        "id": "MAL-2025-47009",
        "summary": "Malicious code",
        "affected": [
            {"package": {"ecosystem": "npm", "name": "mc-worm"}, "versions": ["1.0.1"]},
            {"package": {"ecosystem": "PyPI", "name": "mc-worm"}, "versions": ["1.1"]},
            {"package": {"ecosystem": "crates.io", "name": "mc_worm"}, "versions": ["0.1.1"]}
        ]
    });
    let (index, _) = AdvisoryIndex::from_records(vec![serde_json::from_value(record).unwrap()]);
    let set = vec![Arc::new(index)];
    let guard = GuardConfig {
        quarantine: Quarantine {
            classes: vec![Class::Malicious],
            ..Quarantine::default()
        },
        ..GuardConfig::default()
    };
    let changed = |packages: &dyn Packages, body: &str, suffix: &str| {
        let judge = Judge::new(&guard, packages, 0).with_advisories(&set);
        match packages.filter(&judge, "mc-worm", body.as_bytes(), &HashMap::new(), suffix) {
            crate::kind::guard::Filtered::Changed(out) => String::from_utf8(out).unwrap(),
            other => panic!("{other:?}"),
        }
    };
    // npm: deprecated with the reason; `latest` moves down.
    let packument = serde_json::json!({"name": "mc-worm", "dist-tags": {"latest": "1.0.1"},
        "versions": {"1.0.0": {"version": "1.0.0"}, "1.0.1": {"version": "1.0.1"}}});
    let out: serde_json::Value =
        serde_json::from_str(&changed(&crate::kind::npm::Npm, &packument.to_string(), "")).unwrap();
    assert_eq!(out["dist-tags"]["latest"], "1.0.0");
    let deprecated = out["versions"]["1.0.1"]["deprecated"].as_str().unwrap();
    assert!(
        deprecated.contains("MAL-2025-47009 (malicious)"),
        "{deprecated}"
    );
    assert!(out["versions"]["1.0.0"].get("deprecated").is_none());
    // PyPI: yanked (PEP 592) with the reason, in HTML and JSON.
    let pypi = &crate::kind::pypi::Pypi;
    let html = "<a href=\"/p/mc_worm-1.0-py3-none-any.whl\">a</a>\n<a href=\"/p/mc_worm-1.1-py3-none-any.whl\">b</a>\n";
    let out = changed(pypi, html, "html");
    assert!(
        out.contains("<a data-yanked=\"mc-worm@1.1 is quarantined by this proxy: MAL-2025-47009 (malicious): Malicious code\" href=\"/p/mc_worm-1.1"),
        "{out}"
    );
    assert!(out.contains("<a href=\"/p/mc_worm-1.0"), "{out}");
    let json = serde_json::json!({"files": [{"filename": "mc_worm-1.0-py3-none-any.whl"},
        {"filename": "mc_worm-1.1-py3-none-any.whl"}]});
    let out: serde_json::Value =
        serde_json::from_str(&changed(pypi, &json.to_string(), "json")).unwrap();
    assert!(out["files"][1]["yanked"]
        .as_str()
        .unwrap()
        .contains("MAL-2025-47009"));
    // cargo: a dependency no registry can hold names the advisory.
    let line = |v: &str| {
        format!("{{\"name\":\"mc_worm\",\"vers\":\"{v}\",\"deps\":[],\"cksum\":\"00\",\"features\":{{}},\"yanked\":false}}\n")
    };
    let out = changed(
        &crate::kind::cargo::Cargo,
        &(line("0.1.0") + &line("0.1.1")),
        "",
    );
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["deps"], serde_json::json!([]));
    assert_eq!(lines[1]["deps"][0]["name"], "quarantined.MAL-2025-47009");
}

/// The resident set size of this process, in KiB (Linux).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The index of a generated export the size of OSV's npm `all.zip`
/// (200,000 records, one package each, a range and a versions list):
/// `cargo test --release --lib index_of_a_full_size_export -- --ignored --nocapture`.
/// The RSS growth is an upper bound (freed parse buffers may stay mapped).
#[test]
#[ignore]
fn index_of_a_full_size_export() {
    use std::io::Write;
    const RECORDS: usize = 200_000;
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for i in 0..RECORDS {
        let record = serde_json::json!({
            "id": format!("GHSA-gen{i:06}"),
            "summary": format!("Generated advisory {i}"),
            "database_specific": {"severity": "HIGH"},
            "affected": [{
                "package": {"ecosystem": "npm", "name": format!("mc-gen-{i}")},
                "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "1.2.3"}]}],
                "versions": ["1.0.0", "1.1.0", "1.2.0"]
            }]
        });
        out.start_file(format!("GHSA-gen{i:06}.json"), options)
            .unwrap();
        out.write_all(record.to_string().as_bytes()).unwrap();
    }
    let bytes = out.finish().unwrap().into_inner();
    let before = rss_kib();
    let started = std::time::Instant::now();
    let (index, report) = AdvisoryIndex::from_zip(&bytes).unwrap();
    let took = started.elapsed();
    drop(bytes);
    let after = rss_kib();
    assert_eq!(report.packages.get("npm"), Some(&RECORDS));
    let set = arc_swap::ArcSwap::from_pointee(Vec::<Arc<AdvisoryIndex>>::new());
    let swap_started = std::time::Instant::now();
    set.store(Arc::new(vec![Arc::new(index)]));
    let swapped = swap_started.elapsed();
    println!(
        "ADVISORY-INDEX {RECORDS} records: built in {took:?}, swapped in {swapped:?}, RSS +{} MiB",
        after.saturating_sub(before) / 1024
    );
}
