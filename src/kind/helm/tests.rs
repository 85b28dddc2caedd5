//! The helm kind's rows and unit tests: path classes, chart URLs rewritten
//! on the remote's hosts, digests declared for relative and absolute URLs,
//! constraints and the index filtered by `created`.

use super::super::conformance::{Class, Declares, Expect, Filters, Rewritten, Rows};
use super::*;

const DIGEST: &str = "515c58e5f79d8b2913a10cb400ebb6fa9c77fe813287afbacf1a0b897cd78727";

fn index() -> String {
    format!(
        "apiVersion: v1\nentries:\n  alpine:\n  - created: \"2024-01-05T10:00:00Z\"\n    digest: {DIGEST}\n    name: alpine\n    urls:\n    - https://github.com/acme/charts/releases/download/alpine-0.2.0/alpine-0.2.0.tgz\n    version: 0.2.0\n  - digest: {DIGEST}\n    name: alpine\n    urls:\n    - charts/alpine-0.1.0.tgz\n    version: 0.1.0\n"
    )
}

pub(super) fn rows() -> Rows {
    Rows {
        paths: vec![
            ("index.yaml", Class::Document),
            ("index.json", Class::Document),
            ("charts/alpine-0.1.0.tgz", Class::Immutable),
            ("alpine-0.1.0.tgz.prov", Class::Immutable),
            ("~files/acme/charts/alpine-0.2.0.tgz", Class::Immutable),
            ("charts/README.md", Class::Mutable),
        ],
        artifacts: vec![
            ("charts/alpine-0.1.0.tgz", Some(("alpine", "0.1.0"))),
            ("cert-manager-v1.14.0.tgz", Some(("cert-manager", "v1.14.0"))),
            ("my-app-2-1.0.0-rc.1.tgz", Some(("my-app", "2-1.0.0-rc.1"))),
            ("alpine-0.1.0.tgz.prov", None),
            ("index.yaml", None),
        ],
        documents: vec![
            ("index.yaml", Some("index.yaml")),
            ("alpine-0.1.0.tgz", None),
        ],
        keys: vec![
            ("charts/alpine-0.1.0.tgz", Some("charts/alpine-0.1.0.tgz")),
            ("alpine-0.1.0.tgz.prov", None),
        ],
        declares: vec![Declares {
            mirrors: &["https://charts.example.com/stable"],
            files: &["https://github.com"],
            path: "index.yaml",
            body: index().into_bytes(),
            declared: vec![
                (
                    "~files/acme/charts/releases/download/alpine-0.2.0/alpine-0.2.0.tgz".into(),
                    format!("sha256:{DIGEST}"),
                ),
                (
                    "charts/alpine-0.1.0.tgz".into(),
                    format!("sha256:{DIGEST}"),
                ),
            ],
        }],
        rewrites: vec![Rewritten {
            mirrors: &["https://charts.example.com/stable"],
            files: &["https://github.com"],
            path: "index.yaml",
            body: "entries:\n  a:\n  - urls:\n    - https://charts.example.com/stable/a-1.0.0.tgz\n    - https://github.com/acme/a-1.0.0.tgz\n    - https://elsewhere.example/a-1.0.0.tgz\n    - a-1.0.0.tgz\n    version: 1.0.0\n",
            expected: "entries:\n  a:\n  - urls:\n    - http://proxy/r/a-1.0.0.tgz\n    - http://proxy/r/~files/acme/a-1.0.0.tgz\n    - https://elsewhere.example/a-1.0.0.tgz\n    - a-1.0.0.tgz\n    version: 1.0.0\n",
        }],
        filters: vec![Filters {
            deny: &["alpine@<0.2"],
            name: "index.yaml",
            suffix: "",
            body: index().into_bytes(),
            expected: Expect::Changed("version: 0.2.0", "version: 0.1.0"),
        }],
        ..Rows::default()
    }
}

#[test]
fn rules_read_helm_constraints_and_the_index_loses_young_versions() {
    use super::super::conformance::{check_rules, guard, iso, DAY, NOW};
    check_rules(
        &Helm,
        &[
            ("alpine@^1.2", "alpine", "1.3.0", true),
            ("alpine@>= 1.2, < 2", "alpine", "2.0.0", false),
            ("alpine@>= 1.2, < 2", "alpine", "1.9.9", true),
            ("alpine@1.2.x || ^3", "alpine", "3.1.0", true),
            ("cert-manager@<v1.15", "cert-manager", "v1.14.0", true),
            ("alp*", "alpine", "0.1.0", true),
        ],
        ("alpine@[1.0,2.0)", "Helm version constraint"),
    );
    let body = format!(
        "entries:\n  alpine:\n  - created: {}\n    version: 2.0.0\n  - created: {}\n    version: 1.0.0\ngenerated: x\n",
        iso(NOW - DAY),
        iso(NOW - 30 * DAY)
    );
    let config = guard("helm", Some(7), &[]);
    let judge = Judge::new(&config, &Helm, NOW);
    let Filtered::Changed(out) =
        Helm.filter(&judge, "index.yaml", body.as_bytes(), &HashMap::new(), "")
    else {
        panic!("not changed");
    };
    let out = String::from_utf8(out).unwrap();
    assert!(!out.contains("2.0.0") && out.contains("1.0.0"), "{out}");
    let times = Helm.publish_times(body.as_bytes());
    assert_eq!(times.get("alpine 2.0.0"), Some(&(NOW - DAY)));
    let artifact = Helm.artifact("alpine-2.0.0.tgz").unwrap();
    assert_eq!(
        Helm.time_source(&artifact).unwrap().key,
        TimeKey::Listed("alpine 2.0.0".into())
    );
}
