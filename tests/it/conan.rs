//! The `conan` kind against a fixture Conan v2 remote on 127.0.0.1 serving
//! what conan_server serves (`latest` and `revisions` JSON, a revision's
//! files): a revision's `conanfile.py` and `conaninfo.txt` checked against
//! the md5s its `conanmanifest.txt` declares (read by the proxy itself when
//! the client asks for the file first), a tampered first mirror passed over,
//! the archive pinned on first use and served as a hit; `latest`
//! revalidated, a revision's files never; the search keyed by its query; a
//! denied reference refused with the reason and taken out of the search;
//! `latest` restated as the newest revision out of its cooldown, a too-young
//! revision's files refused;
//! `warm` reading a `conan.lock`; the logins answered by the proxy (a
//! private remote's token handed back for conan to send as `Bearer`),
//! never by a mirror.

use md5::Digest as _;

use crate::support::proxy::{get, warm_fetches_all};
use crate::support::{sha256_hex, tampered, test_bytes, toml_urls, MirrorServer, TestProxy};

const RREV: &str = "331da349ab9fac573da2ca7ab4d98dfd";
const PKG: &str =
    "packages/da39a3ee5e6b4b0d3255bfef95601890afd80709/revisions/508de3fac7a74730f28ae46053df87ea";

fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"conan\"\nkind = \"conan\"\nmirrors = {}\nstrategy = \"single\"\n{extra}\n",
        toml_urls(mirrors, "/c")
    )
}

/// A recipe's path below the remote.
fn recipe(name: &str, rest: &str) -> String {
    format!("v2/conans/{name}/1.0/_/_/{rest}")
}

/// A manifest listing `files` (name, bytes) as Conan writes one.
fn manifest(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut text = "1796420318\n".to_string();
    for (name, bytes) in files {
        text.push_str(&format!(
            "{name}: {}\n",
            hex::encode(md5::Md5::digest(bytes))
        ));
    }
    text.into_bytes()
}

/// A `revisions` list of one revision published at `time`, as
/// conan_server answers it, and its `latest`.
fn revisions(time: &str) -> (String, String) {
    let one = format!("{{\"revision\": \"{RREV}\", \"time\": \"{time}\"}}");
    (format!("{{\"revisions\": [{one}]}}"), one)
}

#[tokio::test]
async fn revision_files_are_checked_against_their_manifest_and_a_tampered_mirror_passed_over() {
    let (tampering, good) = (MirrorServer::start().await, MirrorServer::start().await);
    let (conanfile, info, archive) = (
        test_bytes(900, 81),
        test_bytes(300, 82),
        test_bytes(5_000, 83),
    );
    let recipe_dir = recipe("liba", &format!("revisions/{RREV}/files/"));
    let package_dir = recipe("liba", &format!("revisions/{RREV}/{PKG}/files/"));
    for mirror in [&tampering, &good] {
        let put = |path: &str, bytes: Vec<u8>| mirror.put(&format!("/c/{path}"), bytes);
        put(
            &format!("{recipe_dir}conanmanifest.txt"),
            manifest(&[("conanfile.py", &conanfile)]),
        );
        put(
            &format!("{package_dir}conanmanifest.txt"),
            manifest(&[("conaninfo.txt", &info), ("include/liba.h", b"#define A\n")]),
        );
        put(&format!("{package_dir}conan_package.tgz"), archive.clone());
        put(
            "v2/conans/search?q=liba%2F%2A",
            br#"{"results": ["liba/1.0"]}"#.to_vec(),
        );
        put(
            "v2/users/authenticate",
            b"a-token-for-the-remotes-account".to_vec(),
        );
    }
    tampering.put(
        &format!("/c/{recipe_dir}conanfile.py"),
        tampered(&conanfile),
    );
    tampering.put(&format!("/c/{package_dir}conaninfo.txt"), tampered(&info));
    good.put(&format!("/c/{recipe_dir}conanfile.py"), conanfile.clone());
    good.put(&format!("/c/{package_dir}conaninfo.txt"), info.clone());
    let proxy = TestProxy::start(&remote(&[&tampering, &good], "")).await;
    let client = reqwest::Client::new();
    let at = |path: &str| proxy.url(&format!("/conan/{path}"));

    // conan fetches the manifest and the conanfile in parallel: the
    // conanfile first here, so the proxy reads the manifest itself.
    let (status, _, body) = get(&client, &at(&format!("{recipe_dir}conanfile.py"))).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&conanfile));
    assert_eq!(
        tampering.hits(&format!("/c/{recipe_dir}conanmanifest.txt")),
        1
    );
    assert_eq!(good.hits(&format!("/c/{recipe_dir}conanfile.py")), 1);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    // A package's conaninfo.txt the same way, after its manifest.
    for file in ["conanmanifest.txt", "conaninfo.txt", "conan_package.tgz"] {
        let (status, _, _) = get(&client, &at(&format!("{package_dir}{file}"))).await;
        assert_eq!(status, 200, "{file}");
    }
    assert_eq!(good.hits(&format!("/c/{package_dir}conaninfo.txt")), 1);
    assert_eq!(good.hits(&format!("/c/{package_dir}conan_package.tgz")), 0);
    proxy.settle().await;
    // Immutable: hits, never asked again.
    for file in ["conaninfo.txt", "conan_package.tgz"] {
        let (status, cache, _) = get(&client, &at(&format!("{package_dir}{file}"))).await;
        assert_eq!((status, cache.as_str()), (200, "HIT"), "{file}");
    }
    assert_eq!(
        tampering.hits(&format!("/c/{package_dir}conan_package.tgz")),
        1
    );

    // The search reaches the mirror with its query.
    let (status, _, body) = get(&client, &at("v2/conans/search?q=liba%2F%2A")).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), br#"{"results": ["liba/1.0"]}"#.to_vec());
    // A login is never fetched with the remote's credentials.
    let (status, _, _) = get(&client, &at("v2/users/authenticate")).await;
    assert_eq!(status, 404);
    assert_eq!(tampering.hits("/c/v2/users/authenticate"), 0);
}

#[tokio::test]
async fn a_denied_reference_is_refused_and_latest_is_the_newest_revision_out_of_its_cooldown() {
    let mirror = MirrorServer::start().await;
    let young = humantime::format_rfc3339_micros(
        std::time::SystemTime::now() - std::time::Duration::from_secs(3600),
    )
    .to_string()
    .replace('Z', "+00:00");
    for (name, time) in [
        ("liba", "2024-01-15T10:20:03.123000+00:00"),
        ("libbad", "2024-01-15T10:20:03.123000+00:00"),
        ("libnew", young.as_str()),
    ] {
        let (list, latest) = revisions(time);
        mirror.put(&format!("/c/{}", recipe(name, "revisions")), list);
        mirror.put(&format!("/c/{}", recipe(name, "latest")), latest);
    }
    // libtwo: a revision from last year, and a newer one an hour old.
    let newer = "fedcba9876543210fedcba9876543210";
    let list = format!(
        "{{\"revisions\": [{{\"revision\": \"{newer}\", \"time\": \"{young}\"}}, \
         {{\"revision\": \"{RREV}\", \"time\": \"2025-06-01T08:00:00.000000+00:00\"}}]}}"
    );
    mirror.put(&format!("/c/{}", recipe("libtwo", "revisions")), list);
    mirror.put(
        &format!("/c/{}", recipe("libtwo", "latest")),
        format!("{{\"revision\": \"{newer}\", \"time\": \"{young}\"}}"),
    );
    mirror.put(
        "/c/v2/conans/search?q=libbad%2F%2A",
        r#"{"results": ["libbad/1.0", "libbad/2.0"]}"#,
    );
    let extra = "deny = [\"libbad@[>=1.0 <2]\"]\nmin_release_age = \"7d\"";
    let proxy = TestProxy::start(&remote(&[&mirror], extra)).await;
    let client = reqwest::Client::new();
    let at = |name: &str| proxy.url(&format!("/conan/{}", recipe(name, "latest")));

    let (status, _, body) = get(&client, &at("libbad")).await;
    assert_eq!(status, 403);
    let body = String::from_utf8_lossy(&body.unwrap()).into_owned();
    assert!(
        body.contains("libbad@1.0 is refused by this proxy: it matches the deny rule"),
        "{body}"
    );
    assert_eq!(
        mirror.hits(&format!("/c/{}", recipe("libbad", "latest"))),
        0
    );
    // Its only revision too young: refused with the reason.
    let (status, _, body) = get(&client, &at("libnew")).await;
    assert_eq!(status, 403);
    let body = String::from_utf8_lossy(&body.unwrap()).into_owned();
    assert!(body.contains("libnew@1.0 was published"), "{body}");
    // Its newest too young: `latest` is the one before.
    let (status, _, body) = get(&client, &at("libtwo")).await;
    assert_eq!(status, 200);
    let latest: serde_json::Value = serde_json::from_slice(&body.unwrap()).unwrap();
    assert_eq!(latest["revision"], RREV);
    assert_eq!(latest["time"], "2025-06-01T08:00:00.000000+00:00");
    let young_file = format!(
        "/conan/{}",
        recipe("libtwo", &format!("revisions/{newer}/files"))
    );
    let (status, _, _) = get(&client, &proxy.url(&young_file)).await;
    assert_eq!(status, 403);
    // A version range is resolved from the search: the denied one is gone.
    let search = proxy.url("/conan/v2/conans/search?q=libbad%2F%2A");
    let (status, _, body) = get(&client, &search).await;
    assert_eq!(status, 200);
    let listed: serde_json::Value = serde_json::from_slice(&body.unwrap()).unwrap();
    assert_eq!(listed["results"], serde_json::json!(["libbad/2.0"]));
    let (status, _, body) = get(&client, &at("liba")).await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body.unwrap())
        .into_owned()
        .contains(RREV));
}

#[tokio::test]
async fn warm_fetches_the_recipe_revisions_a_conan_lock_names() {
    let mirror = MirrorServer::start().await;
    let conanfile = test_bytes(700, 84);
    let dir = recipe("liba", &format!("revisions/{RREV}/files/"));
    mirror.put(
        &format!("/c/{dir}conanmanifest.txt"),
        manifest(&[("conanfile.py", &conanfile)]),
    );
    mirror.put(&format!("/c/{dir}conanfile.py"), conanfile);
    let proxy = TestProxy::start(&remote(&[&mirror], "")).await;
    let work = tempfile::tempdir().unwrap();
    let lock = work.path().join("conan.lock");
    let text = format!(
        "{{\"version\": \"0.5\", \"requires\": [\"liba/1.0#{RREV}%1796420318.5\"], \"build_requires\": [], \"python_requires\": []}}"
    );
    std::fs::write(&lock, text).unwrap();
    warm_fetches_all(&proxy.url(""), "conan", vec![lock], 1).await;
    assert_eq!(mirror.hits(&format!("/c/{dir}conanfile.py")), 1);
    assert_eq!(mirror.hits(&format!("/c/{dir}conanmanifest.txt")), 1);
}

#[tokio::test]
async fn a_private_remotes_login_trades_a_token_for_itself_and_never_reaches_a_mirror() {
    use crate::access::{basic, tokens, AuthProxy};
    let mirror = MirrorServer::start().await;
    let (_, latest) = revisions("2024-01-15T10:20:03.123000+00:00");
    mirror.put(&format!("/c/{}", recipe("liba", "latest")), latest);
    mirror.put(
        "/c/v2/users/authenticate",
        b"the-remotes-own-token".to_vec(),
    );
    let conan = format!(
        "[[remote]]\nname = \"conan\"\nkind = \"conan\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n",
        mirror.url("/c")
    );
    let proxy = AuthProxy::start_with("", &conan).await;
    let token = tokens::add(&proxy, "ci");
    let latest = format!("/conan/{}", recipe("liba", "latest"));
    let (login, whoami) = (
        "/conan/v2/users/authenticate",
        "/conan/v2/users/check_credentials",
    );

    // conan's first request is refused, so it logs in with Basic.
    let (status, _, _) = proxy.get(&latest, &[]).await;
    assert_eq!(status, 401);
    let (status, head, body) = proxy
        .get(login, &[("authorization", &basic("ci", &token))])
        .await;
    assert_eq!((status, &body[..]), (200, token.as_bytes()));
    assert_eq!(head["cache-control"], "no-store");
    // A password is not a token: said so, never echoed.
    let (status, _, body) = proxy
        .get(login, &[("authorization", &basic("ci", "ci-pass"))])
        .await;
    let said = String::from_utf8_lossy(&body);
    assert_eq!(status, 403);
    assert!(
        said.contains("tokens as the password") && !said.contains("ci-pass"),
        "{said}"
    );
    let (status, _, _) = proxy
        .get(login, &[("authorization", &basic("ci", "wrong"))])
        .await;
    assert_eq!(status, 401);
    // Then the token as Bearer, as conan sends it.
    let bearer = format!("Bearer {token}");
    let (status, _, body) = proxy.get(&latest, &[("authorization", &bearer)]).await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains(RREV));
    let (status, _, body) = proxy.get(whoami, &[("authorization", &bearer)]).await;
    assert_eq!((status, &body[..]), (200, &b"ci"[..]));
    let (status, _, _) = proxy.get(whoami, &[]).await;
    assert_eq!(status, 401);
    assert_eq!(mirror.hits("/c/v2/users/authenticate"), 0);
    assert_eq!(mirror.hits("/c/v2/users/check_credentials"), 0);
}

#[tokio::test]
async fn latest_is_revalidated_and_a_revisions_files_never_are() {
    let mirror = MirrorServer::start().await;
    let (_, latest) = revisions("2024-01-15T10:20:03.123000+00:00");
    let conanfile = test_bytes(500, 85);
    let dir = recipe("liba", &format!("revisions/{RREV}/files/"));
    mirror.put(&format!("/c/{}", recipe("liba", "latest")), latest);
    mirror.put(
        &format!("/c/{dir}conanmanifest.txt"),
        manifest(&[("conanfile.py", &conanfile)]),
    );
    mirror.put(&format!("/c/{dir}conanfile.py"), conanfile);
    let proxy = TestProxy::start(&remote(&[&mirror], "revalidate_after = \"0s\"")).await;
    let client = reqwest::Client::new();
    let at = |path: &str| proxy.url(&format!("/conan/{path}"));

    for _ in 0..2 {
        for file in ["conanmanifest.txt", "conanfile.py"] {
            let (status, _, _) = get(&client, &at(&format!("{dir}{file}"))).await;
            assert_eq!(status, 200, "{file}");
        }
        proxy.settle().await;
    }
    assert_eq!(mirror.hits(&format!("/c/{dir}conanfile.py")), 1);
    assert_eq!(mirror.hits(&format!("/c/{dir}conanmanifest.txt")), 1);
    // A new revision uploaded: the next `latest` names it.
    let latest = recipe("liba", "latest");
    let (status, _, _) = get(&client, &at(&latest)).await;
    assert_eq!(status, 200);
    proxy.settle().await;
    let newer =
        r#"{"revision": "0123456789abcdef0123456789abcdef", "time": "2024-02-01T00:00:00+00:00"}"#;
    mirror.put(&format!("/c/{latest}"), newer.to_string());
    let (status, _, body) = get(&client, &at(&latest)).await;
    assert_eq!(
        (status, body.unwrap()),
        (200, newer.as_bytes().to_vec().into())
    );
    assert_eq!(mirror.hits(&format!("/c/{latest}")), 2);
}
