//! rebar3 (Debian's 3.19 on Erlang/OTP 25) through a `hex` remote, against
//! two fixture Hex repositories on 127.0.0.1 built on the spot: three tiny
//! packages (`mc_top` depends on `mc_leaf`; `mc_bad` is denied) packed as
//! Hex tarballs (version 3: `VERSION`, `CHECKSUM`, `metadata.config`,
//! `contents.tar.gz`), and each package's registry document
//! (`packages/<name>`: a gzipped `Signed` protobuf whose payload, a
//! `Package`, is signed with RSA and SHA-512 by a key made with `openssl`;
//! rebar3 is given its public key). What rebar3 asks for is read from its
//! source (`src/vendored/r3_hex_repo.erl`: `get_package` asks for
//! `packages/<name>` and checks the signature and the repository's name,
//! `get_tarball` for `tarballs/<name>-<version>.tar`, keeping its `etag`;
//! `src/rebar_pkg_resource.erl` checks the tarball against the release's
//! `outer_checksum`). The first repository sends a tampered `mc_leaf`.
//! `rebar3 compile` of a project depending on `mc_top` runs through the
//! proxy, then in fresh homes with every origin stopped; the denied
//! package's tarball is refused (rebar3 prints the status code with
//! `DEBUG=1`; the reason is in the proxy's status line and body).

use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message as _;
use sha2::Digest as _;

use crate::support::hex_registry::{gzip, signed, Dependency, Package, Release};
use crate::support::{available, tampered, MirrorServer, TestProxy};
use crate::{client, outcome, report, run, write};

/// A tar of `files` (name, bytes), gzipped when `gz`.
fn tar(files: &[(&str, &[u8])], gz: bool) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, bytes) in files {
        let mut header = tar::Header::new_ustar();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(1_700_000_000);
        header.set_cksum();
        builder.append_data(&mut header, name, *bytes).unwrap();
    }
    let out = builder.into_inner().unwrap();
    if gz {
        gzip(&out)
    } else {
        out
    }
}

/// A Hex tarball (version 3) of the OTP application `name` 1.0.0, and its
/// inner checksum (sha256 of `VERSION`, `metadata.config` and the contents).
fn hex_tarball(name: &str, deps: &[&str]) -> (Vec<u8>, Vec<u8>) {
    let app_src = format!(
        "{{application, {name}, [{{description, \"fixture\"}}, {{vsn, \"1.0.0\"}}, \
         {{applications, [kernel, stdlib{}]}}]}}.\n",
        deps.iter().map(|d| format!(", {d}")).collect::<String>()
    );
    let module = format!("-module({name}).\n-export([value/0]).\nvalue() -> 1.\n");
    let contents = tar(
        &[
            (&format!("src/{name}.app.src"), app_src.as_bytes()),
            (&format!("src/{name}.erl"), module.as_bytes()),
        ],
        true,
    );
    let requirements: Vec<String> = deps
        .iter()
        .map(|d| format!("{{<<\"{d}\">>,[{{<<\"app\">>,<<\"{d}\">>}},{{<<\"optional\">>,false}},{{<<\"requirement\">>,<<\"~> 1.0\">>}}]}}"))
        .collect();
    let metadata = format!(
        "{{<<\"name\">>,<<\"{name}\">>}}.\n{{<<\"version\">>,<<\"1.0.0\">>}}.\n\
         {{<<\"app\">>,<<\"{name}\">>}}.\n{{<<\"description\">>,<<\"fixture\">>}}.\n\
         {{<<\"licenses\">>,[<<\"MIT\">>]}}.\n{{<<\"build_tools\">>,[<<\"rebar3\">>]}}.\n\
         {{<<\"requirements\">>,[{}]}}.\n\
         {{<<\"files\">>,[<<\"src/{name}.app.src\">>,<<\"src/{name}.erl\">>]}}.\n",
        requirements.join(",")
    );
    let mut inner = sha2::Sha256::new();
    inner.update(b"3");
    inner.update(metadata.as_bytes());
    inner.update(&contents);
    let inner = inner.finalize().to_vec();
    let checksum = hex::encode_upper(&inner);
    let outer = tar(
        &[
            ("VERSION", b"3"),
            ("CHECKSUM", checksum.as_bytes()),
            ("metadata.config", metadata.as_bytes()),
            ("contents.tar.gz", &contents),
        ],
        false,
    );
    (outer, inner)
}

/// The repository's signing key (PEM files in `w`): (private, public).
fn signing_key(w: &Path) -> (PathBuf, String) {
    let key = w.join("repo-key.pem");
    run(Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&key)
        .arg("2048"));
    let public = run(Command::new("openssl")
        .args(["rsa", "-pubout", "-in"])
        .arg(&key));
    (key, public)
}

/// `packages/<name>` for one release, signed with `key`.
fn registry(
    w: &Path,
    key: &Path,
    name: &str,
    tarball: &[u8],
    inner: &[u8],
    deps: &[&str],
) -> Vec<u8> {
    let package = Package {
        releases: vec![Release {
            version: "1.0.0".into(),
            inner_checksum: inner.to_vec(),
            dependencies: deps
                .iter()
                .map(|d| Dependency {
                    package: d.to_string(),
                    requirement: "~> 1.0".into(),
                })
                .collect(),
            outer_checksum: Some(sha2::Sha256::digest(tarball).to_vec()),
            published_at: None,
        }],
        name: name.into(),
        repository: "hexpm".into(),
    };
    let payload = package.encode_to_vec();
    let file = w.join(format!("{name}.payload"));
    std::fs::write(&file, &payload).unwrap();
    let signature = w.join(format!("{name}.sig"));
    run(Command::new("openssl")
        .args(["dgst", "-sha512", "-sign"])
        .arg(key)
        .arg("-out")
        .arg(&signature)
        .arg(&file));
    signed(payload, std::fs::read(&signature).unwrap())
}

/// A project depending on `dep` 1.0.0, hexpm's public key the fixture's.
fn project(w: &Path, n: usize, dep: &str, public_key: &str) -> PathBuf {
    let dir = w.join(format!("app{n}"));
    write(
        &dir.join("rebar.config"),
        &format!(
            "{{deps, [{{{dep}, \"1.0.0\"}}]}}.\n\
             {{hex, [{{repos, replace, [#{{name => <<\"hexpm\">>, repo_public_key => <<\"{}\">>}}]}}]}}.\n",
            public_key.trim()
        ),
    );
    write(
        &dir.join("src/app.app.src"),
        &format!("{{application, app, [{{vsn, \"0.1.0\"}}, {{applications, [kernel, stdlib, {dep}]}}]}}.\n"),
    );
    dir
}

/// `rebar3 compile` in `dir` with a home and cache of its own, hexpm at
/// `repo_url` (`HEX_CDN`: rebar3 replaces hexpm's `repo_url` by it); (whether
/// it succeeded, what it printed).
fn rebar3(w: &Path, n: usize, dir: &Path, repo_url: &str) -> (bool, String) {
    let home = w.join(format!("rebar-home{n}"));
    outcome(
        Command::new("rebar3")
            .arg("compile")
            .current_dir(dir)
            .env("HOME", &home)
            .env("REBAR_CACHE_DIR", home.join("cache"))
            .env("REBAR_GLOBAL_CONFIG_DIR", home.join("config"))
            .env("HEX_CDN", repo_url)
            .env("DEBUG", "1")
            .env("REBAR_COLOR", "none"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebar3_compiles_past_a_tampered_mirror_then_from_the_cache_alone() {
    let Some(version) = client("rebar3", "--version") else {
        return;
    };
    if !available(
        "openssl (installed by .ci/tools.sh)",
        crate::version("openssl", "version").is_some(),
    ) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (key, public_key) = tokio::task::block_in_place(|| signing_key(w));
    let (tampering, good) = (MirrorServer::start().await, MirrorServer::start().await);
    let mut leaf_tarball = Vec::new();
    for (name, deps) in [
        ("mc_leaf", &[][..]),
        ("mc_top", &["mc_leaf"][..]),
        ("mc_bad", &[][..]),
    ] {
        let (tarball, inner) = hex_tarball(name, deps);
        let document = registry(w, &key, name, &tarball, &inner, deps);
        for mirror in [&tampering, &good] {
            mirror.put(&format!("/h/packages/{name}"), document.clone());
            mirror.put(&format!("/h/tarballs/{name}-1.0.0.tar"), tarball.clone());
        }
        if name == "mc_leaf" {
            leaf_tarball = tarball;
        }
    }
    tampering.put("/h/tarballs/mc_leaf-1.0.0.tar", tampered(&leaf_tarball));
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"hex\"\nkind = \"hex\"\nmirrors = {}\nstrategy = \"single\"\ndeny = [\"mc_bad\"]\n",
        crate::support::toml_urls(&[&tampering, &good], "/h")
    ))
    .await;
    let repo_url = proxy.url("/hex");
    let upstream = || tampering.total() + good.total();

    let dir = project(w, 1, "mc_top", &public_key);
    let (ok, said) = tokio::task::block_in_place(|| rebar3(w, 1, &dir, &repo_url));
    assert!(ok, "{said}");
    for app in ["mc_top", "mc_leaf"] {
        let beam = dir.join(format!("_build/default/lib/{app}/ebin/{app}.beam"));
        assert!(beam.exists(), "{app} not compiled:\n{said}");
    }
    assert_eq!(good.hits("/h/tarballs/mc_leaf-1.0.0.tar"), 1);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    let cold = upstream();
    // The denied package: its tarball refused, the registry served as signed.
    let dir = project(w, 2, "mc_bad", &public_key);
    let (ok, said) = tokio::task::block_in_place(|| rebar3(w, 2, &dir, &repo_url));
    assert!(!ok, "{said}");
    let line = said
        .lines()
        .find(|l| l.contains("mc_bad") && l.contains("403"))
        .unwrap_or_else(|| panic!("no 403 in rebar3's output:\n{said}"));
    println!("GUARD-OUTPUT rebar3: {}", line.trim());
    let refusal = reqwest::get(proxy.url("/hex/tarballs/mc_bad-1.0.0.tar"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(refusal.contains("is refused by this proxy"), "{refusal}");
    let denied = "/h/tarballs/mc_bad-1.0.0.tar";
    assert_eq!(tampering.hits(denied) + good.hits(denied), 0);
    let first = upstream();

    tampering.stop();
    good.stop();
    let dir = project(w, 3, "mc_top", &public_key);
    let (ok, said) = tokio::task::block_in_place(|| rebar3(w, 3, &dir, &repo_url));
    assert!(ok, "{said}");
    assert!(dir
        .join("_build/default/lib/mc_leaf/ebin/mc_leaf.beam")
        .exists());
    let second = upstream() - first;
    assert_eq!(second, 0);
    report("rebar3", &version, cold, second);
    proxy.stop().await;
}
