//! The rpm kind's rows and its learning: repomd.xml and primary.xml in every
//! compression, `xml:base`, and the bound on what a primary unpacks to.

use sha2::Digest as _;
use url::Url;

use super::*;
use crate::kind::conformance::{Class, Declares, Rows};

const A: &str = "aa00000000000000000000000000000000000000000000000000000000000000";
const B: &str = "bb00000000000000000000000000000000000000000000000000000000000000";
const MIRRORS: &[&str] = &["http://mirror.example/fedora/releases/40/Everything/x86_64/os"];
const FILES: &[&str] = &["http://files.example/pub"];

fn sha256(hex: &str) -> String {
    format!("sha256:{hex}")
}

pub(super) fn repomd() -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<repomd xmlns="http://linux.duke.edu/metadata/repo" xmlns:rpm="http://linux.duke.edu/metadata/rpm">
  <revision>1700000000</revision>
  <data type="primary">
    <checksum type="sha256">{A}</checksum>
    <open-checksum type="sha256">{B}</open-checksum>
    <location href="repodata/{A}-primary.xml.gz"/>
    <size>123</size>
  </data>
  <data type="filelists">
    <checksum type="sha256">{B}</checksum>
    <location href="repodata/{B}-filelists.xml.zst"/>
  </data>
</repomd>
"#
    )
}

pub(super) fn primary() -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<metadata xmlns="http://linux.duke.edu/metadata/common" xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="3">
<package type="rpm">
  <name>hello</name>
  <checksum type="sha256" pkgid="YES">{A}</checksum>
  <size package="1234" installed="4000" archive="4100"/>
  <location href="Packages/h/hello-1.0-1.x86_64.rpm"/>
  <format><rpm:license>MIT</rpm:license></format>
</package>
<package type="rpm">
  <name>bye</name>
  <checksum type="sha256" pkgid="YES">{B}</checksum>
  <location xml:base="http://files.example/pub/" href="b/bye-1.0-1.noarch.rpm"/>
</package>
<package type="rpm">
  <name>elsewhere</name>
  <checksum type="sha256" pkgid="YES">{B}</checksum>
  <location xml:base="http://other.example/" href="e/elsewhere-1.0-1.noarch.rpm"/>
</package>
</metadata>
"#
    )
}

fn primary_declared() -> Vec<(String, String)> {
    vec![
        (
            "Packages/h/hello-1.0-1.x86_64.rpm".into(),
            format!("{} (1234 bytes)", sha256(A)),
        ),
        ("~files/b/bye-1.0-1.noarch.rpm".into(), sha256(B)),
    ]
}

pub(super) fn rows() -> Rows {
    let hashed = Box::leak(format!("repodata/{A}-primary.xml.gz").into_boxed_str());
    Rows {
        paths: vec![
            ("repodata/repomd.xml", Class::Mutable),
            ("repodata/repomd.xml.asc", Class::Mutable),
            ("repodata/primary.xml.gz", Class::Mutable),
            (hashed, Class::Immutable),
            (
                "f/40/repodata/0123456789abcdef0123456789abcdef01234567-comps.xml.zck",
                Class::Immutable,
            ),
            ("Packages/h/hello-1.0-1.x86_64.rpm", Class::Immutable),
            ("hello-1.0-1.src.rpm", Class::Immutable),
            ("drpms/hello-0.9-1_1.0-1.noarch.drpm", Class::Immutable),
            ("Packages/h/README", Class::Mutable),
        ],
        keys: vec![
            ("repodata/repomd.xml", None),
            (hashed, None),
            ("repodata/primary.xml.gz", Some("repodata/primary.xml.gz")),
            (
                "Packages/h/hello%2B-1.0-1.x86_64.rpm",
                Some("Packages/h/hello+-1.0-1.x86_64.rpm"),
            ),
        ],
        declares: vec![
            Declares {
                mirrors: MIRRORS,
                files: FILES,
                path: "repodata/repomd.xml",
                body: repomd().into_bytes(),
                declared: vec![
                    (
                        format!("repodata/{A}-primary.xml.gz"),
                        format!("{} (123 bytes)", sha256(A)),
                    ),
                    (format!("repodata/{B}-filelists.xml.zst"), sha256(B)),
                ],
            },
            Declares {
                mirrors: MIRRORS,
                files: FILES,
                path: hashed,
                body: gzip(primary().as_bytes()),
                declared: primary_declared(),
            },
        ],
        ..Rows::default()
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, bytes).unwrap();
    gz.finish().unwrap()
}

fn xz(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut liblzma::read::XzEncoder::new(bytes, 1), &mut out).unwrap();
    out
}

fn urls(list: &[&str]) -> Vec<Url> {
    list.iter().map(|u| Url::parse(u).unwrap()).collect()
}

fn learned(path: &str, body: &[u8], max: u64) -> Vec<(String, String)> {
    let (mirrors, files) = (urls(MIRRORS), urls(FILES));
    let document = Document::new("r", &mirrors, &files, path);
    learn(&document, body, max)
        .into_iter()
        .map(|(k, d)| (k, d.to_string()))
        .collect()
}

#[test]
fn primary_declares_whether_plain_gzip_xz_or_zstd() {
    let text = primary();
    let xz = xz(text.as_bytes());
    let zst = zstd::stream::encode_all(text.as_bytes(), 3).unwrap();
    for (name, body) in [
        ("primary.xml", text.clone().into_bytes()),
        ("primary.xml.gz", gzip(text.as_bytes())),
        ("primary.xml.xz", xz),
        ("primary.xml.zst", zst),
    ] {
        let path = format!("sub/repodata/{A}-{name}");
        assert!(Rpm.declares(&path), "{name}");
        let expected: Vec<(String, String)> = primary_declared()
            .into_iter()
            .map(|(k, d)| match k.strip_prefix("Packages/") {
                Some(rest) => (format!("sub/Packages/{rest}"), d),
                None => (k, d),
            })
            .collect();
        assert_eq!(
            learned(&path, &body, crate::kind::unpack::DEFAULT_MAX_UNPACKED),
            expected,
            "{name}"
        );
    }
}

#[test]
fn a_primary_that_unpacks_past_the_bound_declares_nothing() {
    let mut text = primary();
    let padding = format!("<!-- {} -->\n", "x".repeat(100_000));
    text.insert_str(text.find("<metadata").unwrap(), &padding);
    for body in [
        gzip(text.as_bytes()),
        zstd::stream::encode_all(text.as_bytes(), 3).unwrap(),
        xz(text.as_bytes()),
    ] {
        let path = format!("repodata/{A}-primary.xml.gz");
        assert_eq!(learned(&path, &body, 50_000), []);
        assert_eq!(learned(&path, &body, 1_000_000).len(), 2);
    }
}

#[test]
fn data_files_named_by_their_digest_declare_themselves() {
    let path = format!("repodata/{A}-primary.xml.gz");
    assert_eq!(Rpm.in_path(&path), Declared::from_hex(Algo::Sha256, A));
    assert_eq!(Rpm.in_path("repodata/primary.xml.gz"), None);
    assert_eq!(Rpm.in_path("repodata/repomd.xml"), None);
    let sha1 = "repodata/0123456789abcdef0123456789abcdef01234567-other.xml.gz";
    assert_eq!(Rpm.in_path(sha1), None);
    assert_eq!(Rpm.artifact_key(sha1).as_deref(), Some(sha1));
    assert!(!Rpm.declares(&format!("repodata/{A}-primary.xml.zck")));
    assert!(!Rpm.declares(&format!("repodata/{A}-filelists.xml.gz")));
    assert!(!Rpm.plan("repodata/repomd.xml", &HeaderMap::new()).immutable);
}

#[test]
fn deny_and_allow_are_refused_on_rpm_remotes() {
    assert!(Rpm.refuses_key("deny").unwrap().contains("rpm remote"));
    assert!(Rpm.refuses_key("allow").is_some());
    assert_eq!(Rpm.refuses_key("require_declared_hash"), None);
    assert!(Rpm.refuses_key("version_policy").is_some());
}

fn files_rewrite() -> Rewrite {
    Rewrite::new("r", &urls(MIRRORS), &urls(FILES), "http://proxy")
}

fn gunzip(bytes: &[u8]) -> String {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(bytes), &mut text).unwrap();
    text
}

#[test]
fn locations_on_a_files_host_are_relocated_in_the_compression_they_came_in() {
    let text = primary();
    let mut xz = Vec::new();
    std::io::Read::read_to_end(
        &mut liblzma::read::XzEncoder::new(text.as_bytes(), 6),
        &mut xz,
    )
    .unwrap();
    let zst = zstd::stream::encode_all(text.as_bytes(), 3).unwrap();
    for body in [text.clone().into_bytes(), gzip(text.as_bytes()), xz, zst] {
        let relocated = relocate::relocate(&body, &files_rewrite(), Algo::Sha256, MAX_PRIMARY)
            .unwrap()
            .unwrap();
        assert_eq!(&relocated.bytes[..2], &body[..2], "the same compression");
        let mut out = String::new();
        decompress(&relocated.bytes, MAX_PRIMARY)
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        // Only the files host moved; the other host and everything else is as it was.
        let expected = text.replace(
            "xml:base=\"http://files.example/pub/\"",
            "xml:base=\"http://proxy/r/~files/\"",
        );
        assert_eq!(out, expected);
        assert_eq!(relocated.open.size(), Some(out.len() as u64));
        let sha = sha2::Sha256::digest(out.as_bytes());
        assert!(relocated.open.matches(&sha));
    }
    // Nothing on the remote's hosts: served as stored.
    let stay = text.replace("http://files.example/pub/", "http://other.example/");
    let none = relocate::relocate(
        &gzip(stay.as_bytes()),
        &files_rewrite(),
        Algo::Sha256,
        MAX_PRIMARY,
    );
    assert!(none.unwrap().is_none());
}

#[test]
fn repomd_restates_a_relocated_primary_and_leaves_its_zchunk_out() {
    let primary_gz = gzip(primary().as_bytes());
    let repomd = repomd().replace(
        "  <data type=\"filelists\">",
        &format!("  <data type=\"primary_zck\">\n    <checksum type=\"sha256\">{A}</checksum>\n    <location href=\"repodata/{A}-primary.xml.zck\"/>\n  </data>\n  <data type=\"filelists\">"),
    );
    let path = "f/repodata/repomd.xml";
    let primary_path = format!("f/repodata/{A}-primary.xml.gz");
    assert_eq!(
        Rpm.rewritten_with(path, repomd.as_bytes()),
        std::slice::from_ref(&primary_path)
    );
    let relocated = |path: &str| Rpm.plan(path, &HeaderMap::new()).document == Rewritten::WithFiles;
    assert!(relocated(path) && relocated(&primary_path));
    assert!(!relocated(&format!("f/repodata/{A}-primary.xml.zck")));
    let rewrite = files_rewrite();
    let served_primary = Rpm.rewrite_body(&primary_path, primary_gz.clone(), &rewrite, &[]);
    assert!(gunzip(&served_primary).contains("http://proxy/r/~files/"));
    let others = [(primary_path.clone(), primary_gz.clone())];
    let served = Rpm.rewrite_body(path, repomd.clone().into_bytes(), &rewrite, &others);
    let served = String::from_utf8(served).unwrap();
    let open = gunzip(&served_primary);
    let sha = |b: &[u8]| hex::encode(sha2::Sha256::digest(b));
    assert!(
        served.contains(&format!(
            "<checksum type=\"sha256\">{}</checksum>",
            sha(&served_primary)
        )),
        "{served}"
    );
    assert!(served.contains(&format!(
        "<open-checksum type=\"sha256\">{}</open-checksum>",
        sha(open.as_bytes())
    )));
    assert!(served.contains(&format!("<size>{}</size>", served_primary.len())));
    assert!(
        !served.contains("primary_zck") && !served.contains(".zck"),
        "{served}"
    );
    // The rest as it was: filelists, the revision.
    assert!(served.contains(&format!(
        "<location href=\"repodata/{B}-filelists.xml.zst\"/>"
    )));
    assert!(served.contains("<revision>1700000000</revision>"));
    // Without the primary's bytes, or with nothing to relocate: as stored.
    let unchanged = Rpm.rewrite_body(path, repomd.clone().into_bytes(), &rewrite, &[]);
    assert_eq!(unchanged, repomd.as_bytes());
    let elsewhere = gzip(
        primary()
            .replace("files.example/pub", "other.example")
            .as_bytes(),
    );
    let unchanged = Rpm.rewrite_body(
        path,
        repomd.clone().into_bytes(),
        &rewrite,
        &[(primary_path, elsewhere)],
    );
    assert_eq!(unchanged, repomd.as_bytes());
}
