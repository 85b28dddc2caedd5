//! Real clients against a private remote (`access = ["ci"]`), each sending
//! credentials its own way: pip and uv (userinfo in the index URL; pip also
//! `~/.netrc`), npm (`_authToken` and `_auth` in `.npmrc`), cargo (a token
//! through `cargo:token`, asked for after the 401 on `config.json`), go
//! (`~/.netrc` over TLS), pnpm and yarn 1, apt-get (`auth.conf.d` over TLS);
//! the container clients are in `private_oci.rs`. Each also runs once
//! without credentials and must fail, with nothing sent upstream.

use std::path::Path;
use std::process::Command;

use base64::Engine as _;
use mirrorcache::http::server::Running;
use serde_json::json;

use crate::support::proxy::{config_text, start_text};
use crate::support::{available, sha256_hex, MirrorServer};
use crate::{run, version, write};

/// A proxy with `[auth]` (user `ci`, password `ci-pass`) and these remotes,
/// with a token made for `ci`: (work dir, proxy, token).
pub async fn private_proxy(w: &Path, remotes: &str, server_keys: &str) -> (Running, String) {
    let users = w.join("users.htpasswd");
    std::fs::write(
        &users,
        format!("ci:{}\n", bcrypt::hash("ci-pass", 4).unwrap()),
    )
    .unwrap();
    let text = config_text(&w.join("proxy"), remotes)
        .replace("[server]\n", &format!("[server]\n{server_keys}\n"))
        + &format!("\n[auth]\nhtpasswd = \"{}\"\n", users.display());
    let running = start_text(&text).await;
    let made = mirrorcache::access::token::generate().unwrap();
    mirrorcache::access::token_table::TokenTable::of(&running.proxy.cache.meta)
        .insert(&mirrorcache::access::token_table::TokenRow {
            id: made.id,
            user: "ci".into(),
            secret_hash: made.secret_hash,
            created_at_ms: 0,
            expires_at_ms: None,
        })
        .await
        .unwrap();
    (running, made.text)
}

/// Runs `cmd` and returns whether it succeeded, and its stderr.
pub fn attempt(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

pub fn outcome(client: &str, version: &str, how: &str) {
    println!("PRIVATE-CLIENT {client} ({version}): {how}: ok; without credentials: refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_and_uv_with_userinfo_and_netrc() {
    let Some(pip) = version("pip", "--version") else {
        available("pip", false);
        return;
    };
    if !crate::fixtures::can_build_wheels() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (file_name, wheel) = crate::fixtures::pip_wheel(w, "mc-solo", "[]");
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let url = files.url(&format!("/packages/{file_name}"));
    index.put_typed(
        "/simple/mc-solo/",
        format!(
            "<!DOCTYPE html><html><body><a href=\"{url}#sha256={}\">{file_name}</a></body></html>",
            sha256_hex(&wheel)
        ),
        "text/html",
    );
    files.put_typed(
        &format!("/packages/{file_name}"),
        wheel,
        "application/octet-stream",
    );
    let remotes = format!(
        "[[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\naccess = [\"ci\"]\n",
        index.url(""),
        files.url("")
    );
    let (running, token) = private_proxy(w, &remotes, "").await;
    let port = running.local_addr.port();
    let pip_download = |index_url: &str, n: usize, home: &Path| {
        let mut cmd = Command::new("pip");
        cmd.args(["download", "--no-deps", "--no-cache-dir", "--no-input"])
            .args([
                "--disable-pip-version-check",
                "--index-url",
                index_url,
                "-d",
            ])
            .arg(w.join(format!("dl{n}")))
            .arg("mc-solo")
            .env("HOME", home)
            .env("PIP_CONFIG_FILE", "/dev/null");
        cmd
    };
    tokio::task::block_in_place(|| {
        let bare = format!("http://127.0.0.1:{port}/pypi/simple/");
        let (ok, said) = attempt(&mut pip_download(&bare, 0, &w.join("home0")));
        assert!(!ok, "pip without credentials: {said}");
        assert_eq!(index.total() + files.total(), 0);

        let with_password = format!("http://ci:ci-pass@127.0.0.1:{port}/pypi/simple/");
        run(&mut pip_download(&with_password, 1, &w.join("home1")));
        assert!(w.join(format!("dl1/{file_name}")).exists());

        let home = w.join("home2");
        write(
            &home.join(".netrc"),
            "machine 127.0.0.1\nlogin ci\npassword ci-pass\n",
        );
        std::fs::set_permissions(
            home.join(".netrc"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        run(&mut pip_download(&bare, 2, &home));
        assert!(w.join(format!("dl2/{file_name}")).exists());
    });
    outcome("pip", &pip, "userinfo in --index-url, and ~/.netrc");

    let Some(uv) = crate::client("uv", "--version") else {
        return;
    };
    tokio::task::block_in_place(|| {
        let uv_install = |index_url: &str, n: usize| {
            let mut cmd = Command::new("uv");
            cmd.args([
                "pip",
                "install",
                "--no-cache",
                "--python",
                "python3",
                "--target",
            ])
            .arg(w.join(format!("uvtarget{n}")))
            .args(["--index-url", index_url, "mc-solo"])
            .env("HOME", w.join(format!("uvhome{n}")))
            .env("UV_NO_CONFIG", "1");
            cmd
        };
        let bare = format!("http://127.0.0.1:{port}/pypi/simple/");
        let (ok, said) = attempt(&mut uv_install(&bare, 0));
        assert!(!ok, "uv without credentials: {said}");
        let with_token = format!("http://ci:{token}@127.0.0.1:{port}/pypi/simple/");
        run(&mut uv_install(&with_token, 1));
        assert!(w.join("uvtarget1/mc_solo.py").exists());
    });
    outcome("uv", &uv, "a token as the password in the index URL");
}

/// `mc-solo` on a registry behind a private `npm` remote: the registry, the
/// proxy, a token, and the remote's URL as `.npmrc` keys name it (`//host/npm/`).
async fn private_npm(w: &Path) -> (MirrorServer, Running, String, String) {
    let registry = MirrorServer::start().await;
    crate::npm::publish(w, &registry, &[("mc-solo", json!({}))]);
    let remotes = format!(
        "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n",
        registry.url("")
    );
    let (running, token) = private_proxy(w, &remotes, "").await;
    let nerf = format!("//127.0.0.1:{}/npm/", running.local_addr.port());
    (registry, running, token, nerf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_with_auth_token_and_auth() {
    let Some(npm) = version("npm", "--version") else {
        available("npm", false);
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (registry, _running, token, nerf) = private_npm(w).await;
    let auth = base64::engine::general_purpose::STANDARD.encode("ci:ci-pass");
    let install = |n: usize, credentials: &str| {
        let project = crate::npm::consumer_project(w, n);
        write(
            &project.join(".npmrc"),
            &format!("registry=http:{nerf}\n{credentials}"),
        );
        let mut cmd = Command::new("npm");
        cmd.args(["install", "--no-audit", "--no-fund", "--cache"])
            .arg(w.join(format!("cache{n}")))
            .arg("mc-solo")
            .current_dir(&project)
            .env("HOME", w.join(format!("home{n}")));
        (cmd, project)
    };
    tokio::task::block_in_place(|| {
        let (mut cmd, _) = install(0, "");
        let (ok, said) = attempt(&mut cmd);
        assert!(!ok, "npm without credentials: {said}");
        assert_eq!(registry.total(), 0);
        for (n, line) in [
            (1, format!("{nerf}:_authToken={token}\n")),
            (2, format!("{nerf}:_auth={auth}\n")),
        ] {
            let (mut cmd, project) = install(n, &line);
            run(&mut cmd);
            crate::fixtures::assert_npm_installed(&project, &["mc-solo"]);
        }
    });
    outcome(
        "npm",
        &npm,
        "_authToken (a token) and _auth (user:password) in .npmrc",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_with_a_token_after_the_401_on_config_json() {
    let cargo_version = version("cargo", "--version").expect("cargo runs the tests");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let krate = crate::fixtures::cargo_leaf(w);
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    index.put_typed(
        "/config.json",
        json!({"dl": files.url("/crates")}).to_string(),
        "application/json",
    );
    let line = json!({"name": "mc_leaf", "vers": "0.1.0", "deps": [], "cksum": sha256_hex(&krate), "features": {}, "yanked": false});
    index.put_typed("/mc/_l/mc_leaf", format!("{line}\n"), "text/plain");
    files.put_typed("/crates/mc_leaf/0.1.0/download", krate, "application/x-tar");
    let remotes = format!(
        "[[remote]]\nname = \"crates\"\nkind = \"cargo\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\naccess = [\"ci\"]\n",
        index.url(""),
        files.url("/crates")
    );
    let (running, token) = private_proxy(w, &remotes, "").await;
    let registry = format!(
        "sparse+http://127.0.0.1:{}/crates/",
        running.local_addr.port()
    );
    let fetch = |n: usize, token: Option<&str>| {
        let project = w.join(format!("project{n}"));
        write(
            &project.join("Cargo.toml"),
            "[package]\nname = \"consumer\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nmc_leaf = { version = \"0.1\", registry = \"private\" }\n",
        );
        write(&project.join("src/lib.rs"), "");
        let home = w.join(format!("cargohome{n}"));
        write(
            &home.join("config.toml"),
            &format!("[registries.private]\nindex = \"{registry}\"\ncredential-provider = \"cargo:token\"\n"),
        );
        let mut cmd = Command::new("cargo");
        cmd.arg("fetch")
            .current_dir(&project)
            .env("CARGO_HOME", &home)
            .env_remove("CARGO_REGISTRIES_PRIVATE_TOKEN");
        if let Some(token) = token {
            cmd.env("CARGO_REGISTRIES_PRIVATE_TOKEN", token);
        }
        (cmd, home)
    };
    tokio::task::block_in_place(|| {
        let (mut cmd, _) = fetch(0, None);
        let (ok, said) = attempt(&mut cmd);
        assert!(!ok, "cargo without a token: {said}");
        assert_eq!(index.total() + files.total(), 0);
        let (mut cmd, home) = fetch(1, Some(&token));
        run(&mut cmd);
        crate::fixtures::assert_leaf_downloaded(&home);
    });
    assert_eq!(files.hits("/crates/mc_leaf/0.1.0/download"), 1);
    outcome(
        "cargo",
        &cargo_version,
        "auth-required in config.json, a token through cargo:token",
    );
}

/// A CA and a certificate for 127.0.0.1 it signed, written to `w`:
/// returns the CA's PEM file and the `[server]` TLS keys.
fn tls_files(w: &Path) -> (std::path::PathBuf, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    write(&w.join("ca.pem"), &ca_cert.pem());
    write(&w.join("cert.pem"), &leaf.pem());
    write(&w.join("key.pem"), &key.serialize_pem());
    let keys = format!(
        "tls_cert = \"{d}/cert.pem\"\ntls_key = \"{d}/key.pem\"",
        d = w.display()
    );
    (w.join("ca.pem"), keys)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_with_netrc_over_tls() {
    let Some(go) = version("go", "version") else {
        available("go (Debian's golang-go)", false);
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (origin, _, _) = crate::go::module_origin().await;
    let (ca, tls_keys) = tls_files(w);
    let remotes = format!(
        "[[remote]]\nname = \"igo\"\nkind = \"go\"\nmirrors = [\"{}\"]\nsumdb = []\naccess = [\"ci\"]\n",
        origin.url("")
    );
    let (running, token) = private_proxy(w, &remotes, &tls_keys).await;
    let goproxy = format!("https://127.0.0.1:{}/igo/", running.local_addr.port());
    let download = |n: usize, netrc: Option<&str>| {
        let project = w.join(format!("project{n}"));
        write(
            &project.join("go.mod"),
            &format!(
                "module consumer\n\ngo 1.19\n\nrequire {} v1.0.0\n",
                crate::go::MODULE
            ),
        );
        let home = w.join(format!("home{n}"));
        std::fs::create_dir_all(&home).unwrap();
        if let Some(netrc) = netrc {
            write(&home.join(".netrc"), netrc);
        }
        let mut cmd = Command::new("go");
        cmd.args(["mod", "download", "-json", crate::go::MODULE])
            .current_dir(&project)
            .env("GOPROXY", &goproxy)
            .env("GOSUMDB", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("SSL_CERT_FILE", &ca)
            .env("NETRC", home.join(".netrc"))
            .env("GOPATH", w.join(format!("gopath{n}")))
            .env("GOMODCACHE", w.join(format!("gomodcache{n}")))
            .env("GOCACHE", w.join(format!("gocache{n}")))
            .env("HOME", &home);
        cmd
    };
    tokio::task::block_in_place(|| {
        let (ok, said) = attempt(&mut download(0, None));
        assert!(!ok, "go without credentials: {said}");
        assert_eq!(origin.total(), 0);
        let out = run(&mut download(
            1,
            Some(&format!("machine 127.0.0.1 login ci password {token}\n")),
        ));
        assert!(out.contains("\"Version\": \"v1.0.0\""), "{out}");
    });
    outcome("go", &go, "~/.netrc (a token as password) over https");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pnpm_and_yarn_with_auth_token_in_npmrc() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (registry, _running, token, nerf) = private_npm(w).await;
    for tool in ["pnpm", "yarn"] {
        let Some(tool_version) = crate::client(tool, "--version") else {
            continue;
        };
        let add = |n: usize, credentials: &str| {
            let project = crate::npm::consumer_project(&w.join(tool), n);
            write(
                &project.join(".npmrc"),
                &format!("registry=http:{nerf}\n{credentials}"),
            );
            let home = w.join(format!("{tool}home{n}"));
            let mut cmd = Command::new(tool);
            cmd.args(["add", "mc-solo"])
                .current_dir(&project)
                .env("HOME", &home)
                .env("XDG_CACHE_HOME", home.join(".cache"))
                .env("CI", "true")
                .env("YARN_IGNORE_PATH", "1");
            if tool == "pnpm" {
                cmd.arg("--store-dir")
                    .arg(w.join(format!("store{n}")))
                    .arg("--state-dir")
                    .arg(w.join(format!("pnpmstate{n}")));
            } else {
                cmd.args(["--non-interactive", "--no-progress", "--cache-folder"])
                    .arg(w.join(format!("yarncache{n}")));
            }
            (cmd, project)
        };
        tokio::task::block_in_place(|| {
            let (mut cmd, _) = add(0, "");
            let (ok, said) = attempt(&mut cmd);
            assert!(!ok, "{tool} without credentials: {said}");
            // yarn 1 sends a path-scoped token for unscoped packages only
            // with `always-auth` (its own rule; npm and pnpm do without).
            let (mut cmd, project) = add(
                1,
                &format!("{nerf}:_authToken={token}\n{nerf}:always-auth=true\n"),
            );
            run(&mut cmd);
            assert!(
                project.join("node_modules/mc-solo/index.js").exists(),
                "{tool} installed mc-solo"
            );
        });
        outcome(tool, &tool_version, "_authToken in .npmrc");
    }
    assert_eq!(registry.hits("/mc-solo/-/mc-solo-1.0.0.tgz"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apt_with_auth_conf_over_https() {
    let Some(apt) = crate::apt::apt_tools() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let repo = crate::apt::AptRepo::build(w);
    let origin = MirrorServer::start().await;
    repo.serve(&origin);
    let (ca, tls_keys) = tls_files(w);
    let remotes = format!(
        "[[remote]]\nname = \"debian\"\nkind = \"apt\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n",
        origin.url("/debian")
    );
    let (running, token) = private_proxy(w, &remotes, &tls_keys).await;
    let port = running.local_addr.port();
    let source = format!("https://127.0.0.1:{port}/debian");
    let auth_dir = w.join("auth.conf.d");
    write(
        &auth_dir.join("mirrorcache.conf"),
        &format!("machine 127.0.0.1:{port}/debian login ci password {token}\n"),
    );
    let ca_option = format!("Acquire::https::CAInfo={}", ca.display());
    tokio::task::block_in_place(|| {
        let none = [
            ca_option.clone(),
            "Dir::Etc::netrcparts=/nonexistent".to_string(),
        ];
        let refused = crate::apt::apt_get_from(&w.join("apt0"), &source, &none, &["update"]);
        let said = match refused {
            Ok(text) | Err(text) => text,
        };
        assert!(said.contains("401"), "apt without credentials: {said}");
        assert_eq!(origin.total(), 0);
        let with = [
            ca_option.clone(),
            format!("Dir::Etc::netrcparts={}", auth_dir.display()),
        ];
        let root = w.join("apt1");
        crate::apt::apt_get_from(&root, &source, &with, &["update"]).unwrap();
        crate::apt::apt_get_from(&root, &source, &with, &["download", "mc-hello"]).unwrap();
        let got = std::fs::read(root.join("download/mc-hello_1.0_all.deb")).unwrap();
        assert_eq!(sha256_hex(&got), sha256_hex(&repo.deb));
    });
    outcome(
        "apt-get",
        &apt,
        "auth.conf.d over https (a token as password)",
    );
}
