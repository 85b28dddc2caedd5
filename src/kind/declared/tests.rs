use super::*;

const A: &str = "aa00000000000000000000000000000000000000000000000000000000000000";

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
fn keys_decode_escapes_but_not_slashes() {
    assert_eq!(canonical("a/torch-2.0%2Bcpu.whl"), "a/torch-2.0+cpu.whl");
    assert_eq!(canonical("@scope%2fname/-/x.tgz"), "@scope%2fname/-/x.tgz");
    assert_eq!(canonical("bad%zz%4"), "bad%zz%4");
}

#[test]
fn documents_locate_links_on_the_remotes_hosts_only() {
    let mirrors = [Url::parse("https://pypi.org/simple").unwrap()];
    let files = [Url::parse("https://files.pythonhosted.org").unwrap()];
    let document = Document::new("r", &mirrors, &files, "six/");
    assert_eq!(
        document
            .path_of("https://files.pythonhosted.org/packages/a.whl#sha256=00")
            .as_deref(),
        Some("~files/packages/a.whl")
    );
    assert_eq!(
        document.path_of("../x/b.tar.gz?q=1").as_deref(),
        Some("x/b.tar.gz")
    );
    assert_eq!(document.path_of("https://evil.example/a.whl"), None);
    assert_eq!(sha256(A).hex(), A);
}

#[test]
fn a_stated_length_is_kept_and_a_body_of_another_length_is_not_the_declared_one() {
    let sized = sha256(A).with_size(Some(5));
    assert_eq!(sized.to_string(), format!("sha256:{A} (5 bytes)"));
    assert_eq!(Declared::parse(&sized.to_string()), Some(sized.clone()));
    assert_eq!(Declared::parse(&sized.to_string()).unwrap().size(), Some(5));
    assert_eq!(Declared::parse(&format!("sha256:{A} (x bytes)")), None);
    // A length only one side knows does not tell them apart; two do.
    assert_eq!(sized, sha256(A));
    assert_ne!(sized, sha256(A).with_size(Some(6)));
    // What a body hashes to carries its length.
    let body = b"hello";
    let declared = Declared::new(Algo::Sha256, sha2::Sha256::digest(body).to_vec()).unwrap();
    let mut h = Hashers::new(Some(&declared));
    h.update(body);
    let (_, received) = h.finish();
    assert_eq!(received.size(), Some(5));
    assert_eq!(received, declared.clone().with_size(Some(5)));
    assert_ne!(received, declared.with_size(Some(4)));
}
