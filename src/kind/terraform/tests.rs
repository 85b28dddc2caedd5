//! The terraform kind's rows and unit tests: path classes, the registry's
//! answers re-pointed, digests a download answer and a `SHA256SUMS` file
//! declare, constraints, the mirror protocol's documents made from the
//! registry's, and its hostname and upstream path.

use super::super::conformance::{Class, Declares, Expect, Filters, Rewritten, Rows};
use super::*;

const DIGEST: &str = "515c58e5f79d8b2913a10cb400ebb6fa9c77fe813287afbacf1a0b897cd78727";
const OTHER: &str = "0000000000000000000000000000000000000000000000000000000000000001";

const VERSIONS: &str = r#"{"id":"hashicorp/null","versions":[{"version":"3.2.0","protocols":["5.0"],"platforms":[{"os":"linux","arch":"amd64"},{"os":"darwin","arch":"arm64"}]},{"version":"3.1.0","protocols":["5.0"],"platforms":[{"os":"linux","arch":"amd64"}]}],"warnings":null}"#;

fn download(os: &str, arch: &str, shasum: &str) -> String {
    format!(
        r#"{{"protocols":["5.0"],"os":"{os}","arch":"{arch}","filename":"terraform-provider-null_3.2.0_{os}_{arch}.zip","download_url":"https://releases.hashicorp.com/terraform-provider-null/3.2.0/terraform-provider-null_3.2.0_{os}_{arch}.zip","shasums_url":"https://releases.hashicorp.com/terraform-provider-null/3.2.0/terraform-provider-null_3.2.0_SHA256SUMS","shasums_signature_url":"https://releases.hashicorp.com/terraform-provider-null/3.2.0/terraform-provider-null_3.2.0_SHA256SUMS.72D7468F.sig","shasum":"{shasum}","signing_keys":{{"gpg_public_keys":[]}}}}"#
    )
}

pub(super) fn rows() -> Rows {
    Rows {
        paths: vec![
            (".well-known/terraform.json", Class::Document),
            ("v1/providers/hashicorp/null/versions", Class::Document),
            (
                "v1/providers/hashicorp/null/3.2.0/download/linux/amd64",
                Class::Document,
            ),
            ("v1/modules/hashicorp/consul/aws/versions", Class::Document),
            (
                "v1/modules/hashicorp/consul/aws/0.1.0/download",
                Class::Document,
            ),
            (
                "registry.terraform.io/hashicorp/null/index.json",
                Class::Document,
            ),
            (
                "registry.terraform.io/hashicorp/null/3.2.0.json",
                Class::Document,
            ),
            (
                "~files/terraform-provider-null/3.2.0/terraform-provider-null_3.2.0_linux_amd64.zip",
                Class::Immutable,
            ),
            (
                "downloads/terraform-provider-null_3.2.0_linux_amd64.zip",
                Class::Immutable,
            ),
            ("~files/p/terraform-provider-null_3.2.0_SHA256SUMS.sig", Class::Immutable),
            ("v1/providers/hashicorp", Class::Mutable),
        ],
        artifacts: vec![
            (
                "v1/providers/hashicorp/null/3.2.0/download/linux/amd64",
                Some(("hashicorp/null", "3.2.0")),
            ),
            (
                "registry.opentofu.org/hashicorp/null/3.2.0.json",
                Some(("hashicorp/null", "3.2.0")),
            ),
            ("registry.terraform.io/hashicorp/null/index.json", None),
            ("v1/providers/hashicorp/null/versions", None),
        ],
        documents: vec![
            (
                "v1/providers/hashicorp/null/versions",
                Some("hashicorp/null"),
            ),
            (
                "registry.terraform.io/hashicorp/null/index.json",
                Some("hashicorp/null"),
            ),
            ("registry.terraform.io/hashicorp/null/3.2.0.json", None),
        ],
        keys: vec![
            (
                "~files/p/3.2.0/terraform-provider-null_3.2.0_linux_amd64.zip",
                Some("~files/p/3.2.0/terraform-provider-null_3.2.0_linux_amd64.zip"),
            ),
            ("~files/p/3.2.0/terraform-provider-null_3.2.0_SHA256SUMS", None),
        ],
        declares: vec![
            Declares {
                mirrors: &["https://registry.terraform.io"],
                files: &["https://releases.hashicorp.com"],
                path: "v1/providers/hashicorp/null/3.2.0/download/linux/amd64",
                body: download("linux", "amd64", DIGEST).into_bytes(),
                declared: vec![(
                    "~files/terraform-provider-null/3.2.0/terraform-provider-null_3.2.0_linux_amd64.zip".into(),
                    format!("sha256:{DIGEST}"),
                )],
            },
            Declares {
                mirrors: &["https://registry.terraform.io"],
                files: &["https://releases.hashicorp.com"],
                path: "~files/p/3.2.0/terraform-provider-null_3.2.0_SHA256SUMS",
                body: format!("{DIGEST}  terraform-provider-null_3.2.0_linux_amd64.zip\n{OTHER}  terraform-provider-null_3.2.0_darwin_arm64.zip\n").into_bytes(),
                declared: vec![
                    (
                        "~files/p/3.2.0/terraform-provider-null_3.2.0_linux_amd64.zip".into(),
                        format!("sha256:{DIGEST}"),
                    ),
                    (
                        "~files/p/3.2.0/terraform-provider-null_3.2.0_darwin_arm64.zip".into(),
                        format!("sha256:{OTHER}"),
                    ),
                ],
            },
        ],
        rewrites: vec![Rewritten {
            mirrors: &["https://registry.terraform.io"],
            files: &["https://releases.hashicorp.com"],
            path: ".well-known/terraform.json",
            body: r#"{"modules.v1":"/v1/modules/","providers.v1":"https://registry.terraform.io/v1/providers/"}"#,
            expected: r#"{"modules.v1":"/r/v1/modules/","providers.v1":"http://proxy/r/v1/providers/"}"#,
        }],
        filters: vec![Filters {
            deny: &["hashicorp/null@>= 3.2"],
            name: "hashicorp/null",
            suffix: "",
            body: VERSIONS.as_bytes().to_vec(),
            expected: Expect::Changed("\"3.1.0\"", "\"3.2.0\""),
        }],
        ..Rows::default()
    }
}

#[test]
fn rules_read_terraform_constraints() {
    use super::super::conformance::check_rules;
    check_rules(
        &Terraform,
        &[
            ("hashicorp/null@~> 3.1", "hashicorp/null", "3.9.0", true),
            ("hashicorp/null@~> 3.1", "hashicorp/null", "4.0.0", false),
            ("hashicorp/null@~> 3.1.0", "hashicorp/null", "3.1.7", true),
            ("hashicorp/null@~> 3.1.0", "hashicorp/null", "3.2.0", false),
            (
                "hashicorp/null@>= 1.2, < 2",
                "hashicorp/null",
                "1.9.9",
                true,
            ),
            (
                "hashicorp/null@>= 1.2, < 2",
                "hashicorp/null",
                "2.0.0",
                false,
            ),
            ("hashicorp/null@!= 3.2.0", "hashicorp/null", "3.2.0", false),
            ("hashicorp/null@3.2", "hashicorp/null", "3.2.0", true),
            ("HashiCorp/Null@3.2.0", "hashicorp/null", "3.2.0", true),
            ("hashicorp/*", "hashicorp/aws", "5.0.0", true),
        ],
        ("hashicorp/null@^1.2", "Terraform version constraint"),
    );
}

#[test]
fn the_mirror_documents_are_made_from_the_registry_answers() {
    let plan = Terraform.plan(
        "registry.opentofu.org/hashicorp/null/index.json",
        &HeaderMap::new(),
    );
    assert_eq!(plan.registry_host, Some("registry.opentofu.org"));
    assert_eq!(
        Terraform.upstream_path("registry.opentofu.org/hashicorp/null/3.2.0.json"),
        Some("v1/providers/hashicorp/null/versions".to_string())
    );
    assert_eq!(
        Terraform.upstream_path("v1/providers/hashicorp/null/versions"),
        None
    );
    let rewrite = super::super::rewrite::Rewrite::new(
        "tf",
        &[url::Url::parse("https://registry.terraform.io").unwrap()],
        &[url::Url::parse("https://releases.hashicorp.com").unwrap()],
        "http://proxy",
    );
    let index = Terraform.rewrite_body(
        "registry.terraform.io/hashicorp/null/index.json",
        VERSIONS.as_bytes().to_vec(),
        &rewrite,
        &[],
    );
    assert_eq!(
        String::from_utf8(index).unwrap(),
        r#"{"versions":{"3.1.0":{},"3.2.0":{}}}"#
    );
    let path = "registry.terraform.io/hashicorp/null/3.2.0.json";
    let others: Vec<(String, Vec<u8>)> = Terraform
        .rewritten_with(path, VERSIONS.as_bytes())
        .into_iter()
        .map(|other| {
            let (os, arch) = if other.ends_with("linux/amd64") {
                ("linux", "amd64")
            } else {
                ("darwin", "arm64")
            };
            let body = download(os, arch, if os == "linux" { DIGEST } else { OTHER });
            (other, body.into_bytes())
        })
        .collect();
    assert_eq!(
        others.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        [
            "v1/providers/hashicorp/null/3.2.0/download/linux/amd64",
            "v1/providers/hashicorp/null/3.2.0/download/darwin/arm64"
        ]
    );
    let version = Terraform.rewrite_body(path, VERSIONS.as_bytes().to_vec(), &rewrite, &others);
    let version: serde_json::Value = serde_json::from_slice(&version).unwrap();
    assert_eq!(
        version["archives"]["linux_amd64"],
        serde_json::json!({
            "url": "http://proxy/tf/~files/terraform-provider-null/3.2.0/terraform-provider-null_3.2.0_linux_amd64.zip",
            "hashes": [format!("zh:{DIGEST}")],
        })
    );
    assert_eq!(
        version["archives"]["darwin_arm64"]["hashes"][0],
        format!("zh:{OTHER}")
    );
}

#[test]
fn a_list_with_every_version_refused_is_the_refusal_and_min_release_age_is_refused() {
    use super::super::conformance::{guard, NOW};
    let config = guard("terraform", None, &["hashicorp/null"]);
    let judge = Judge::new(&config, &Terraform, NOW);
    let filtered = Terraform.filter(
        &judge,
        "hashicorp/null",
        VERSIONS.as_bytes(),
        &HashMap::new(),
        "",
    );
    assert!(matches!(filtered, Filtered::Refused(_)), "{filtered:?}");
    assert!(Terraform.refuses_key("min_release_age").is_some());
    assert_eq!(Terraform.refuses_key("hostnames"), None);
    assert!(super::super::Kind::named("helm")
        .unwrap()
        .ecosystem()
        .refuses_key("hostnames")
        .is_some());
}
