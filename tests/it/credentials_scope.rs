//! A remote's upstream credentials go to the origins of its mirrors only: a
//! `files` or `sumdb` host elsewhere (a CDN, `sum.golang.org`) gets no
//! `Authorization` unless the operator lists it in `credentials_for`.

use crate::support::proxy::get;
use crate::support::{MirrorServer, TestProxy};

const CREDENTIALS: &str = "username = \"alice\"\npassword = \"upstream-secret\"\n";

/// The `Authorization` header of the last request `mirror` received.
fn authorization(mirror: &MirrorServer) -> Option<String> {
    let last = mirror.last_request().expect("the mirror was asked");
    last.headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_string())
}

/// Fetches `path` through `proxy` and checks it was served.
async fn fetch(proxy: &TestProxy, path: &str) {
    let (status, _, body) = get(&reqwest::Client::new(), &proxy.url(path)).await;
    assert_eq!(status, 200, "{path}");
    body.unwrap();
}

#[tokio::test]
async fn a_files_host_on_another_origin_gets_no_credentials() {
    let index = MirrorServer::start().await;
    let cdn = MirrorServer::start().await;
    index.put("/simple/six/", b"<html></html>".to_vec());
    cdn.put("/files/packages/six-1.0.tar.gz", b"sdist".to_vec());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"p\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n{CREDENTIALS}",
        index.url(""),
        cdn.url("/files"),
    ))
    .await;
    fetch(&proxy, "/p/simple/six/").await;
    assert!(authorization(&index).is_some_and(|a| a.starts_with("Basic ")));
    fetch(&proxy, "/p/~files/packages/six-1.0.tar.gz").await;
    assert_eq!(cdn.hits("/files/packages/six-1.0.tar.gz"), 1);
    assert_eq!(authorization(&cdn), None);
    proxy.stop().await;
}

#[tokio::test]
async fn a_files_base_on_the_mirrors_origin_or_listed_gets_them() {
    let index = MirrorServer::start().await;
    let cdn = MirrorServer::start().await;
    index.put("/files/a.tar.gz", b"same origin".to_vec());
    cdn.put("/files/b.tar.gz", b"listed".to_vec());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"same\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n{CREDENTIALS}\n\
         [[remote]]\nname = \"listed\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n\
         credentials_for = [\"{}\"]\n{CREDENTIALS}",
        index.url("/simple"),
        index.url("/files"),
        index.url("/simple"),
        cdn.url("/files"),
        cdn.url("/files"),
    ))
    .await;
    fetch(&proxy, "/same/~files/a.tar.gz").await;
    assert!(authorization(&index).is_some_and(|a| a.starts_with("Basic ")));
    fetch(&proxy, "/listed/~files/b.tar.gz").await;
    assert!(authorization(&cdn).is_some_and(|a| a.starts_with("Basic ")));
    proxy.stop().await;
}

#[tokio::test]
async fn a_sumdb_host_on_another_origin_gets_no_credentials() {
    let goproxy = MirrorServer::start().await;
    let sumdb = MirrorServer::start().await;
    goproxy.put("/example.com/m/@v/list", b"v1.0.0\n".to_vec());
    sumdb.put("/sumdb/supported", Vec::new());
    sumdb.put("/sumdb/latest", b"go.sum database tree\n1\nhash\n".to_vec());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"g\"\nkind = \"go\"\nmirrors = [\"{}\"]\nsumdb = [\"{}\"]\n{CREDENTIALS}",
        goproxy.url(""),
        sumdb.url("/sumdb"),
    ))
    .await;
    fetch(&proxy, "/g/example.com/m/@v/list").await;
    assert!(authorization(&goproxy).is_some_and(|a| a.starts_with("Basic ")));
    fetch(&proxy, "/g/sumdb/sum.golang.org/latest").await;
    assert_eq!(sumdb.hits("/sumdb/latest"), 1);
    assert_eq!(authorization(&sumdb), None);
    proxy.stop().await;
}

#[test]
fn credentials_for_names_only_the_remotes_own_bases() {
    let out = crate::support::binary::check(
        "[[remote]]\nname = \"p\"\nkind = \"pypi\"\nmirrors = [\"http://127.0.0.1:1/simple\"]\n\
         files = [\"http://127.0.0.1:2/files\"]\nusername = \"alice\"\npassword = \"x\"\n\
         credentials_for = [\"http://127.0.0.1:2/files\", \"http://127.0.0.1:3/elsewhere\"]\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for needle in [
        ":8:",
        "remote[0].credentials_for[1]",
        "http://127.0.0.1:3/elsewhere",
        "not one of this remote's mirrors, files or sumdb",
    ] {
        assert!(stderr.contains(needle), "{needle} not in {stderr}");
    }
}
