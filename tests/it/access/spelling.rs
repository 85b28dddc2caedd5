//! The path spellings that must never reach a private remote's bytes: each
//! sent byte for byte (no URL library in between to tidy it), each answer's
//! status checked, and the private mirror asked nothing. Also the routes
//! that resolve a remote some other way: `~files/`, pass-through, `sumdb/`.

use super::{raw_get, AuthProxy};

/// (path as sent, the status it must get). A name no remote has (`SECRET`,
/// `secret%2Fhidden-package`) is answered as a private one: 401.
const SPELLINGS: &[(&str, u16)] = &[
    ("/secret/hidden-package/x", 401),
    ("/secre%74/hidden-package/x", 401),
    ("/SECRET/hidden-package/x", 401),
    ("//secret/hidden-package/x", 401),
    ("/./secret/hidden-package/x", 401),
    ("/pub/../secret/hidden-package/x", 400),
    ("/pub/%2e%2e/secret/hidden-package/x", 400),
    ("/pub%2F..%2Fsecret/hidden-package/x", 400),
    ("/pub/%2E%2E/secret/hidden-package/x", 400),
    ("/pub/%252e%252e/secret/hidden-package/x", 400),
    ("/secret%2Fhidden-package/x", 401),
    ("/secret/hidden-package/x?download=1", 401),
    ("/secret/~files/hidden-package/x", 401),
    ("/secret/hidden-package/x#frag", 401),
];

#[tokio::test]
async fn no_spelling_of_a_private_path_reaches_the_private_mirror() {
    let proxy = AuthProxy::start().await;
    let addr = proxy.running.local_addr;
    let mut table = Vec::new();
    for (path, expected) in SPELLINGS {
        let (status, answer) = raw_get(addr, path, "").await;
        table.push(format!("{path} -> {status}"));
        assert_eq!(status, *expected, "{path}: {answer}");
        assert!(
            !answer.contains("private bytes"),
            "{path} leaked the artifact: {answer}"
        );
        assert_eq!(
            proxy.private.total(),
            0,
            "{path} reached the private mirror"
        );
    }
    // The same spellings with a user the remote does not list: 404 (as for
    // a remote that does not exist), not bytes.
    let dev = format!("Authorization: {}\r\n", super::basic("dev", "dev-pass"));
    for (path, expected) in SPELLINGS {
        let (status, answer) = raw_get(addr, path, &dev).await;
        let expected = if *expected == 401 { 404 } else { *expected };
        assert_eq!(status, expected, "{path} as dev: {answer}");
    }
    assert_eq!(proxy.private.total(), 0);
    eprintln!("probes:\n{}", table.join("\n"));
}

#[tokio::test]
async fn pass_through_sumdb_and_files_routes_are_checked_on_their_remote() {
    let npm = crate::support::MirrorServer::start().await;
    let go = crate::support::MirrorServer::start().await;
    let remotes = format!(
        "[[remote]]\nname = \"inpm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n\n\
         [[remote]]\nname = \"igo\"\nkind = \"go\"\nmirrors = [\"{}\"]\nsumdb = [\"{}\"]\naccess = [\"ci\"]\n",
        npm.url(""),
        go.url(""),
        go.url("/sumdb-mirror")
    );
    let proxy = AuthProxy::start_with("", &remotes).await;
    let addr = proxy.running.local_addr;
    for (method, path) in [
        ("POST", "/inpm/-/npm/v1/security/audits/quick"),
        ("GET", "/inpm/-/v1/search?text=hidden"),
        ("GET", "/inpm/@scope%2fhidden"),
        ("PUT", "/inpm/hidden"),
        ("GET", "/igo/sumdb/sum.golang.org/supported"),
        (
            "GET",
            "/igo/sumdb/sum.golang.org/lookup/example.com/m@v1.0.0",
        ),
        ("GET", "/igo/example.com/m/@v/list"),
    ] {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{{}}"
        );
        let (status, answer) = super::raw(addr, request.as_bytes()).await;
        assert_eq!(status, 401, "{method} {path}: {answer}");
    }
    assert_eq!(npm.total() + go.total(), 0, "nothing went upstream");
}
