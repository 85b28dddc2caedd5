//! `mirrorcache check` on the new keys: a non-bcrypt htpasswd line and a
//! missing certificate or key are refused naming file and line (exit 2);
//! blank lines and comments pass; an `access` user the file lacks is a
//! warning (exit 0).

use super::htpasswd;

fn check(text: &str) -> (i32, String, String) {
    let out = crate::support::binary::check(text);
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn config(dir: &std::path::Path, server: &str, access: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:8080\"\n{server}\n[auth]\nhtpasswd = \"{}/users\"\n\n\
         [[remote]]\nname = \"r\"\nmirrors = [\"http://127.0.0.1:1/x\"]\naccess = {access}\n",
        dir.display()
    )
}

#[test]
fn htpasswd_lines_must_be_bcrypt_and_errors_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, htpasswd(&[("ci", "pw")])).unwrap();
    let (code, _, stderr) = check(&config(dir.path(), "", "[\"ci\"]"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");

    let good = htpasswd(&[("ci", "pw")]);
    for bad in [
        "dev:$apr1$xyz$0123456789abcdefghijkl",
        "dev:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=",
        "dev:plain",
        "nocolon",
    ] {
        std::fs::write(&users, format!("{good}{bad}\n")).unwrap();
        let (code, _, stderr) = check(&config(dir.path(), "", "[\"ci\"]"));
        assert_eq!(code, 2, "{bad}: {stderr}");
        assert!(
            stderr.contains(&format!("{}:4:", users.display())),
            "{bad}: {stderr}"
        );
        let hash = bad.split_once(':').map_or("", |(_, h)| h);
        assert!(
            hash.is_empty() || !stderr.contains(hash),
            "the hash is echoed: {stderr}"
        );
    }
    std::fs::remove_file(&users).unwrap();
    let (code, _, stderr) = check(&config(dir.path(), "", "[\"ci\"]"));
    assert_eq!(code, 2);
    assert!(
        stderr.contains(":5: `auth.htpasswd`") && stderr.contains("cannot read"),
        "{stderr}"
    );
}

#[test]
fn an_access_user_missing_from_the_file_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("users"), htpasswd(&[("ci", "pw")])).unwrap();
    let (code, stdout, stderr) = check(&config(dir.path(), "", "[\"ci\", \"release\"]"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("ok"));
    assert!(
        stderr.contains("warning:") && stderr.contains("\"release\""),
        "{stderr}"
    );
    // `access` without `[auth]` cannot work.
    let text = "[server]\nlisten = \"127.0.0.1:8080\"\n[[remote]]\nname = \"r\"\nmirrors = [\"http://127.0.0.1:1/x\"]\naccess = \"authenticated\"\n";
    let (code, _, stderr) = check(text);
    assert_eq!(code, 2);
    assert!(stderr.contains("remote[0].access"), "{stderr}");
}

#[test]
fn a_missing_certificate_or_key_is_refused_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("users"), htpasswd(&[("ci", "pw")])).unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.path().join("cert.pem"), cert.cert.pem()).unwrap();
    std::fs::write(dir.path().join("key.pem"), cert.signing_key.serialize_pem()).unwrap();
    let d = dir.path().display();
    let good = format!("tls_cert = \"{d}/cert.pem\"\ntls_key = \"{d}/key.pem\"\n");
    assert_eq!(check(&config(dir.path(), &good, "\"anonymous\"")).0, 0);
    let cases = [
        (
            format!("tls_cert = \"{d}/none.pem\"\ntls_key = \"{d}/key.pem\"\n"),
            ":3: `server.tls_cert`",
        ),
        (
            format!("tls_cert = \"{d}/cert.pem\"\ntls_key = \"{d}/none.pem\"\n"),
            ":4: `server.tls_key`",
        ),
        (
            format!("tls_cert = \"{d}/key.pem\"\ntls_key = \"{d}/key.pem\"\n"),
            ":3: `server.tls_cert`",
        ),
        (
            format!("tls_cert = \"{d}/cert.pem\"\ntls_key = \"{d}/cert.pem\"\n"),
            ":4: `server.tls_key`",
        ),
        (
            format!("tls_cert = \"{d}/cert.pem\"\n"),
            ":3: `server.tls_cert`",
        ),
    ];
    for (keys, expected) in cases {
        let (code, _, stderr) = check(&config(dir.path(), &keys, "\"anonymous\""));
        assert_eq!(code, 2, "{keys}");
        assert!(stderr.contains(expected), "{keys}: {stderr}");
    }
}
