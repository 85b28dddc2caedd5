use super::*;
use crate::config::Config;

fn remote(kind: &str, mirrors: &str, files: &str) -> RemoteConfig {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:8080\"\n[[remote]]\nname = \"r\"\nkind = \"{kind}\"\nmirrors = [{mirrors}]\nfiles = [{files}]\n"
    );
    Config::parse(&text, "t.toml").unwrap().remotes.remove(0)
}

const A: &str = "aa00000000000000000000000000000000000000000000000000000000000000";
const B: &str = "bb00000000000000000000000000000000000000000000000000000000000000";

fn sha256(hex: &str) -> Declared {
    Declared::from_hex(Algo::Sha256, hex).unwrap()
}

#[test]
fn digests_parse_from_hex_sri_and_their_stored_form() {
    let d = sha256(A);
    assert_eq!(d.to_string(), format!("sha256:{A}"));
    assert_eq!(Declared::parse(&d.to_string()), Some(d));
    assert_eq!(Declared::from_hex(Algo::Sha256, "abcd"), None);
    assert_eq!(Declared::parse("md5:00"), None);
    // The strongest of several SRI values; unknown functions are skipped.
    let sha512 = base64::engine::general_purpose::STANDARD.encode([7u8; 64]);
    let sha1 = base64::engine::general_purpose::STANDARD.encode([1u8; 20]);
    let sri = format!("sha1-{sha1} sha512-{sha512} md5-AAAA");
    let d = Declared::from_sri(&sri).unwrap();
    assert_eq!(d.algo(), Algo::Sha512);
    assert!(d.matches(&[7u8; 64]));
    assert_eq!(Declared::from_sri("sha512-not base64!"), None);
}

#[test]
fn hashers_compute_the_declared_function_beside_sha256() {
    let body = b"hello";
    let sha512 = Declared::new(Algo::Sha512, sha2::Sha512::digest(body).to_vec()).unwrap();
    let mut h = Hashers::new(Some(&sha512));
    h.update(&body[..2]);
    h.update(&body[2..]);
    let (sha256, received) = h.finish();
    assert_eq!(received, sha512);
    assert_eq!(sha256.to_vec(), sha2::Sha256::digest(body).to_vec());
    let (_, received) = Hashers::new(None).finish();
    assert_eq!(received.algo(), Algo::Sha256);
}

#[test]
fn pypi_pages_declare_their_files_on_the_remotes_hosts_only() {
    let config = remote(
        "pypi",
        "\"https://pypi.org\"",
        "\"https://files.pythonhosted.org\"",
    );
    let html = format!(
        r#"<a href="https://files.pythonhosted.org/packages/ab/six-1.0-py3-none-any.whl#sha256={A}">six</a>
<a href='../../packages/x/six-1.0.tar.gz#sha256={B}'>rel</a>
<a href="https://evil.example/six.whl#sha256={A}">evil</a>
<a href="https://files.pythonhosted.org/packages/no-hash.whl">none</a>"#
    );
    let learned = learn(&config, "simple/six/", html.as_bytes());
    assert_eq!(
        learned,
        [
            (
                "~files/packages/ab/six-1.0-py3-none-any.whl".to_string(),
                sha256(A)
            ),
            ("packages/x/six-1.0.tar.gz".to_string(), sha256(B)),
        ]
    );
    let json = serde_json::json!({"files": [
        {"url": "https://files.pythonhosted.org/packages/ab/six.whl", "hashes": {"sha256": A}},
        {"url": "https://files.pythonhosted.org/packages/ab/six.zip", "hashes": {}},
    ]});
    let learned = learn(&config, "simple/six/", json.to_string().as_bytes());
    assert_eq!(
        learned,
        [("~files/packages/ab/six.whl".to_string(), sha256(A))]
    );
    let api = serde_json::json!({"urls": [], "releases": {"1.0": [
        {"url": "https://files.pythonhosted.org/packages/cd/six.whl", "digests": {"sha256": B}}
    ]}});
    let learned = learn(&config, "pypi/six/json", api.to_string().as_bytes());
    assert_eq!(
        learned,
        [("~files/packages/cd/six.whl".to_string(), sha256(B))]
    );
}

#[test]
fn keys_decode_escapes_but_not_slashes() {
    assert_eq!(canonical("a/torch-2.0%2Bcpu.whl"), "a/torch-2.0+cpu.whl");
    assert_eq!(canonical("@scope%2fname/-/x.tgz"), "@scope%2fname/-/x.tgz");
    assert_eq!(canonical("bad%zz%4"), "bad%zz%4");
    assert_eq!(
        artifact_key(RemoteKind::Pypi, "~files/packages/t-2.0%2Bcpu.whl"),
        artifact_key(RemoteKind::Pypi, "~files/packages/t-2.0+cpu.whl")
    );
}

#[test]
fn npm_packuments_declare_integrity_else_shasum() {
    let config = remote("npm", "\"https://registry.npmjs.org\"", "");
    let sri = format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode([9u8; 64])
    );
    let packument = serde_json::json!({"versions": {
        "1.0.0": {"dist": {"tarball": "https://registry.npmjs.org/a/-/a-1.0.0.tgz", "integrity": sri, "shasum": "00"}},
        "0.9.0": {"dist": {"tarball": "https://registry.npmjs.org/a/-/a-0.9.0.tgz", "shasum": "0101010101010101010101010101010101010101"}},
    }});
    let mut learned = learn(&config, "a", packument.to_string().as_bytes());
    learned.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(learned[0].0, "a/-/a-0.9.0.tgz");
    assert_eq!(learned[0].1.algo(), Algo::Sha1);
    assert_eq!(learned[1].0, "a/-/a-1.0.0.tgz");
    assert_eq!(learned[1].1, Declared::from_sri(&sri).unwrap());
}

#[test]
fn cargo_index_lines_declare_by_name_and_version() {
    let config = remote("cargo", "\"https://index.crates.io\"", "");
    let index = format!(
        "{{\"name\":\"Serde_Json\",\"vers\":\"1.0.1\",\"cksum\":\"{A}\"}}\nnot json\n{{\"name\":\"x\",\"vers\":\"2.0.0\",\"cksum\":\"{B}\"}}\n"
    );
    let learned = learn(&config, "se/rd/serde_json", index.as_bytes());
    assert_eq!(
        learned,
        [
            ("serde_json/1.0.1".to_string(), sha256(A)),
            ("x/2.0.0".to_string(), sha256(B)),
        ]
    );
    for (path, key) in [
        ("~files/Serde_Json/1.0.1/download", Some("serde_json/1.0.1")),
        ("api/v1/crates/x/2.0.0/download", Some("x/2.0.0")),
        (
            "~files/se/rd/serde-json2-1.0.0-rc.1.crate",
            Some("serde-json2/1.0.0-rc.1"),
        ),
        ("se/rd/serde_json", None),
    ] {
        assert_eq!(
            artifact_key(RemoteKind::Cargo, path).as_deref(),
            key,
            "{path}"
        );
    }
    assert!(declares(RemoteKind::Cargo, "se/rd/serde_json"));
    assert!(!declares(RemoteKind::Cargo, "config.json"));
}

#[test]
fn apt_release_and_packages_declare_their_files() {
    let config = remote("apt", "\"http://deb.debian.org/debian\"", "");
    let release = format!(
        "Origin: Debian\nMD5Sum:\n 00 1 main/binary-amd64/Packages\nSHA256:\n {A} 123 main/binary-amd64/Packages\n {B} 45 main/binary-amd64/Packages.gz\n"
    );
    let learned = learn(&config, "dists/stable/InRelease", release.as_bytes());
    assert_eq!(
        learned,
        [
            (
                "dists/stable/main/binary-amd64/Packages".to_string(),
                sha256(A)
            ),
            (
                "dists/stable/main/binary-amd64/Packages.gz".to_string(),
                sha256(B)
            ),
        ]
    );
    let packages = format!(
        "Package: hello\nFilename: pool/main/h/hello/hello_1_amd64.deb\nSHA256: {A}\n\nPackage: bye\nSHA256: {B}\nFilename: pool/main/b/bye/bye_1_all.deb\n"
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, packages.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let mut xz = Vec::new();
    lzma_rs::xz_compress(&mut packages.as_bytes(), &mut xz).unwrap();
    for body in [packages.as_bytes(), &gz[..], &xz[..]] {
        let learned = learn(&config, "dists/stable/main/binary-amd64/Packages.gz", body);
        assert_eq!(
            learned,
            [
                ("pool/main/h/hello/hello_1_amd64.deb".to_string(), sha256(A)),
                ("pool/main/b/bye/bye_1_all.deb".to_string(), sha256(B)),
            ]
        );
    }
    let by_hash = format!("dists/stable/main/binary-amd64/by-hash/SHA256/{A}");
    assert_eq!(in_path(RemoteKind::Apt, &by_hash), Some(sha256(A)));
    assert_eq!(artifact_key(RemoteKind::Apt, &by_hash), None);
    assert_eq!(
        artifact_key(RemoteKind::Apt, "dists/stable/InRelease"),
        None
    );
    assert_eq!(
        artifact_key(RemoteKind::Apt, "dists/stable/main/binary-amd64/Packages").as_deref(),
        Some("dists/stable/main/binary-amd64/Packages")
    );
}
