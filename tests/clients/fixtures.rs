//! Tiny packages built on the spot with the real tools (npm pack, cargo
//! package, pip wheel), shared by the client tests.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{available, sha256_hex, MirrorServer, TestProxy};
use crate::{run, write};

/// `npm pack` of `name`@1.0.0 with these dependencies, in `w/src`; returns the
/// tarball and npm's report of it (`filename`, `shasum`, `integrity`).
pub fn npm_pack(w: &Path, name: &str, deps: &serde_json::Value) -> (Vec<u8>, serde_json::Value) {
    npm_pack_version(w, name, "1.0.0", deps)
}

/// [`npm_pack`] of another version than 1.0.0.
pub fn npm_pack_version(
    w: &Path,
    name: &str,
    version: &str,
    deps: &serde_json::Value,
) -> (Vec<u8>, serde_json::Value) {
    let dir = w
        .join("src")
        .join(format!("{}-{version}", name.replace('/', "__")));
    write(
        &dir.join("package.json"),
        &serde_json::json!({"name": name, "version": version, "dependencies": deps, "main": "index.js"})
            .to_string(),
    );
    write(&dir.join("index.js"), "module.exports = 1;\n");
    std::fs::create_dir_all(w.join("packs")).unwrap();
    let packed = run(Command::new("npm")
        .args(["pack", "--json", "--pack-destination"])
        .arg(w.join("packs"))
        .current_dir(&dir)
        .env("HOME", w.join("packhome")));
    let packed: serde_json::Value = serde_json::from_str(&packed).unwrap();
    let file_name = packed[0]["filename"].as_str().unwrap();
    let bytes = std::fs::read(w.join("packs").join(file_name)).unwrap();
    (bytes, packed[0].clone())
}

/// `cargo package` of the crate `mc_leaf` 0.1.0, in `w`; returns the .crate.
pub fn cargo_leaf(w: &Path) -> Vec<u8> {
    let leaf = w.join("mc_leaf");
    write(
        &leaf.join("Cargo.toml"),
        "[package]\nname = \"mc_leaf\"\nversion = \"0.1.0\"\nedition = \"2021\"\ndescription = \"test\"\nlicense = \"MIT\"\n",
    );
    write(&leaf.join("src/lib.rs"), "pub fn leaf() -> u32 { 1 }\n");
    run(Command::new("cargo")
        .args(["package", "--allow-dirty", "--no-verify", "--quiet"])
        .current_dir(&leaf)
        .env("CARGO_HOME", w.join("packhome"))
        .env("CARGO_TARGET_DIR", w.join("packtarget")));
    std::fs::read(w.join("packtarget/package/mc_leaf-0.1.0.crate")).unwrap()
}

/// Whether fixture wheels can be built (`wheel`, or setuptools >= 70); says
/// SKIPPED, or fails under MIRRORCACHE_REQUIRE_SERVICES, when not.
pub fn can_build_wheels() -> bool {
    let can_build = Command::new("python3")
        .args(["-c", "import setuptools, sys\ntry:\n import wheel\nexcept ImportError:\n sys.exit(int(setuptools.__version__.split('.')[0]) < 70)"])
        .status()
        .is_ok_and(|s| s.success());
    available(
        "python's `wheel` package (pip install wheel), to build fixture wheels",
        can_build,
    )
}

/// `pip wheel` of `name` 1.0 (module `name` with `_`) requiring `deps` (a
/// Python list), into `w/dist`; returns the wheel's file name and bytes.
pub fn pip_wheel(w: &Path, name: &str, deps: &str) -> (String, Vec<u8>) {
    pip_wheel_version(w, name, "1.0", deps)
}

/// [`pip_wheel`] of another version than 1.0.
pub fn pip_wheel_version(w: &Path, name: &str, version: &str, deps: &str) -> (String, Vec<u8>) {
    let module = name.replace('-', "_");
    let src = w.join(format!("{name}-{version}"));
    write(
        &src.join("setup.py"),
        &format!("from setuptools import setup\nsetup(name='{name}', version='{version}', py_modules=['{module}'], install_requires={deps})\n"),
    );
    write(&src.join(format!("{module}.py")), "VALUE = 1\n");
    run(Command::new("pip")
        .args([
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-q",
            "-w",
        ])
        .arg(w.join("dist"))
        .arg(&src)
        .env("PIP_CONFIG_FILE", "/dev/null"));
    let file = format!("{module}-{version}-py3-none-any.whl");
    let bytes = std::fs::read(w.join("dist").join(&file)).unwrap();
    (file, bytes)
}

/// The version line of `tool`, or `None` after a loud skip (or a failure
/// under MIRRORCACHE_REQUIRE_SERVICES) when it is missing.
pub fn tool(tool: &str, arg: &str) -> Option<String> {
    let found = crate::version(tool, arg);
    if found.is_none() {
        available(tool, false);
    }
    found
}

/// A sparse cargo registry serving `mc_leaf` 0.1.0 as crates.io is laid out:
/// the index (with `config.json`) on one origin, downloads on another
/// (`/crates/{name}/{version}/download`). Returns (index, files).
pub async fn cargo_origins(krate: &[u8]) -> (MirrorServer, MirrorServer) {
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    index.put_typed(
        "/config.json",
        serde_json::json!({"dl": files.url("/crates"), "api": index.url("")}).to_string(),
        "application/json",
    );
    let line = serde_json::json!({"name": "mc_leaf", "vers": "0.1.0", "deps": [], "cksum": sha256_hex(krate), "features": {}, "yanked": false});
    index.put_typed("/mc/_l/mc_leaf", format!("{line}\n"), "text/plain");
    files.put_typed(
        "/crates/mc_leaf/0.1.0/download",
        krate.to_vec(),
        "application/x-tar",
    );
    (index, files)
}

/// A proxy with one `cargo` remote over [`cargo_origins`].
pub async fn cargo_proxy(index: &MirrorServer, files: &MirrorServer) -> TestProxy {
    TestProxy::start(&format!(
        "[[remote]]\nname = \"cargo\"\nkind = \"cargo\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n",
        index.url(""),
        files.url("/crates")
    ))
    .await
}

/// Fails unless each of `packages` is installed in `project/node_modules`.
pub fn assert_npm_installed(project: &Path, packages: &[&str]) {
    for installed in packages {
        assert!(
            project
                .join("node_modules")
                .join(installed)
                .join("index.js")
                .exists(),
            "{installed} not installed"
        );
    }
}

/// A project depending on `mc_leaf` 0.1 and a `CARGO_HOME` whose crates.io
/// source is replaced by `registry` (`sparse+…`), both in `w`, numbered `n`;
/// `extra` is appended to the home's `config.toml`. Returns (project, home).
pub fn cargo_consumer(w: &Path, n: usize, registry: &str, extra: &str) -> (PathBuf, PathBuf) {
    let project = w.join(format!("project{n}"));
    write(
        &project.join("Cargo.toml"),
        "[package]\nname = \"consumer\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[dependencies]\nmc_leaf = \"0.1\"\n",
    );
    write(&project.join("src/lib.rs"), "");
    let home = w.join(format!("cargohome{n}"));
    write(
        &home.join("config.toml"),
        &format!("[source.crates-io]\nreplace-with = \"mc\"\n\n[source.mc]\nregistry = \"{registry}\"\n{extra}"),
    );
    (project, home)
}

/// Fails unless cargo, with `CARGO_HOME=home`, downloaded `mc_leaf` 0.1.0.
pub fn assert_leaf_downloaded(home: &Path) {
    let cached = std::fs::read_dir(home.join("registry/cache"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(cached.join("mc_leaf-0.1.0.crate").exists());
}

/// A Go module zip: each file as `{module}@{version}/{name}`.
pub fn module_zip(module: &str, version: &str, files: &[(&str, &str)]) -> Vec<u8> {
    let named: Vec<(String, &str)> = files
        .iter()
        .map(|(name, text)| (format!("{module}@{version}/{name}"), *text))
        .collect();
    let named: Vec<(&str, &str)> = named.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    zip(&named)
}

/// A zip of `files` (name, text), written by python's zipfile, which is on
/// every machine that runs these tests (pip needs it).
pub fn zip(files: &[(&str, &str)]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.zip");
    let mut script = String::from("import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w')\n");
    for (name, text) in files {
        script.push_str(&format!("z.writestr({name:?}, {text:?})\n"));
    }
    script.push_str("z.close()\n");
    let mut child = Command::new("python3")
        .arg("-")
        .arg(&out)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    std::fs::read(out).unwrap()
}

/// An npm project in `project` depending on `mc-a` 1.0.0 (which depends on
/// `mc-b`), with its `package-lock.json`; both tarballs on `registry`.
pub fn npm_locked_project(w: &Path, project: &Path, registry: &MirrorServer) {
    let mut locked = serde_json::Map::new();
    locked.insert(
        "".into(),
        serde_json::json!({"name": "consumer", "version": "0.0.0", "dependencies": {"mc-a": "1.0.0"}}),
    );
    for (name, deps) in [
        ("mc-a", serde_json::json!({"mc-b": "^1.0.0"})),
        ("mc-b", serde_json::json!({})),
    ] {
        let (bytes, packed) = npm_pack(w, name, &deps);
        let tarball = format!("/{name}/-/{name}-1.0.0.tgz");
        registry.put(&tarball, bytes);
        // As npm writes it against the public registry; npm itself maps that
        // host onto --registry (replace-registry-host), warm onto the remote.
        locked.insert(
            format!("node_modules/{name}"),
            serde_json::json!({
                "version": "1.0.0",
                "resolved": format!("https://registry.npmjs.org{tarball}"),
                "integrity": packed["integrity"],
                "dependencies": deps,
            }),
        );
    }
    write(
        &project.join("package.json"),
        &serde_json::json!({"name": "consumer", "version": "0.0.0", "private": true,
                "dependencies": {"mc-a": "1.0.0"}})
        .to_string(),
    );
    write(
        &project.join("package-lock.json"),
        &serde_json::to_string_pretty(&serde_json::json!({
            "name": "consumer", "version": "0.0.0", "lockfileVersion": 3,
            "requires": true, "packages": locked,
        }))
        .unwrap(),
    );
}

/// Wheels of `mc-gamma` and `mc-delta` 1.0 (simple pages on `index`, files
/// on `files`); returns the hashed requirements naming both.
pub fn pip_hashed_requirements(w: &Path, index: &MirrorServer, files: &MirrorServer) -> String {
    let mut requirements = String::new();
    for name in ["mc-gamma", "mc-delta"] {
        let (file, bytes) = pip_wheel(w, name, "[]");
        let sha = sha256_hex(&bytes);
        index.put_typed(
            &format!("/simple/{name}/"),
            format!(
                "<html><body><a href=\"{}/packages/{file}#sha256={sha}\">{file}</a></body></html>",
                files.url("")
            ),
            "text/html",
        );
        files.put(&format!("/packages/{file}"), bytes);
        requirements += &format!("{name}==1.0 \\\n    --hash=sha256:{sha}\n");
    }
    requirements
}

/// `pip install --require-hashes -r requirements` from `index_url` into
/// `target`, with `home` as pip's home and no user config or cache.
pub fn pip_install_hashed(index_url: &str, requirements: &Path, target: &Path, home: &Path) {
    run(Command::new("pip")
        .args([
            "install",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--require-hashes",
            "--index-url",
            index_url,
            "--target",
        ])
        .arg(target)
        .arg("-r")
        .arg(requirements)
        .env("HOME", home)
        .env("PIP_CONFIG_FILE", "/dev/null"));
}

/// The python of a client's venv made by `.ci/tools.sh` (at `$env`, else
/// `~/.cache/mirrorcache/{dir}`) when `version_code` prints `expected` there;
/// `None` after a loud skip (a failure under MIRRORCACHE_REQUIRE_SERVICES).
pub fn venv_python(env: &str, dir: &str, version_code: &str, expected: &str) -> Option<PathBuf> {
    let venv = std::env::var_os(env).map(PathBuf::from).or_else(|| {
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/mirrorcache").join(dir))
    })?;
    let python = venv.join("bin/python");
    let version = Command::new(&python)
        .args(["-c", version_code])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let ok = version.as_deref() == Some(expected);
    available(
        &format!("{dir} {expected} in {} (.ci/tools.sh)", venv.display()),
        ok,
    );
    ok.then_some(python)
}
