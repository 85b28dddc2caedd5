//! py-rattler (pinned in `.ci/tools.sh`, in a venv of its own: the Rust
//! solver and installer behind pixi) through a `conda` remote, against two
//! fixture channels on 127.0.0.1 built on the spot: four tiny `noarch`
//! packages (`mc-top` depends on `mc-mid`, which depends on `mc-leaf`;
//! `mc-bad` is denied) packed as `.tar.bz2` with `info/index.json` and
//! `info/paths.json`, and the channel's `repodata.json` written here as
//! `conda-index` would (conda does not install here). What rattler asks for
//! is read off a fixture's request log (py-rattler 0.28): the sharded index
//! (`repodata_shards.msgpack.zst`, 404 here), `HEAD`s of `repodata.json.zst`
//! and `.bz2`, then `repodata.json` of `noarch` and of the machine's subdir,
//! then each package file. The first channel sends a tampered `mc-leaf`.
//! `solve` and `install` of `mc-top` run through the proxy, then with fresh
//! caches and every origin stopped; `mc-bad`'s refusal is printed by rattler
//! (the reason is the 403's status line).

use std::path::Path;
use std::process::Command;

use crate::support::{tampered, MirrorServer, TestProxy};
use crate::{outcome, report, run, write};

const RATTLER_VERSION: &str = "0.28.0";

/// Builds the packages and `repodata.json` of channel `mc` under `argv[1]`.
const MAKE_CHANNEL: &str = r#"
import hashlib, io, json, os, sys, tarfile
root = os.path.join(sys.argv[1], "mc")
for subdir in ("noarch", "linux-64"):
    os.makedirs(os.path.join(root, subdir), exist_ok=True)
records = {}
def package(name, depends):
    file = f"{name}-1.0-0.tar.bz2"
    content = f"{name} 1.0\n".encode()
    index = {"name": name, "version": "1.0", "build": "0", "build_number": 0,
             "depends": depends, "subdir": "noarch", "noarch": "generic"}
    paths = {"paths_version": 1, "paths": [{"_path": f"share/{name}.txt", "path_type": "hardlink",
             "sha256": hashlib.sha256(content).hexdigest(), "size_in_bytes": len(content)}]}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:bz2") as tar:
        for path, data in (("info/index.json", json.dumps(index).encode()),
                           ("info/files", f"share/{name}.txt\n".encode()),
                           ("info/paths.json", json.dumps(paths).encode()),
                           (f"share/{name}.txt", content)):
            info = tarfile.TarInfo(path)
            info.size, info.mtime = len(data), 1700000000
            tar.addfile(info, io.BytesIO(data))
    data = out.getvalue()
    open(os.path.join(root, "noarch", file), "wb").write(data)
    records[file] = dict(index, sha256=hashlib.sha256(data).hexdigest(),
                         md5=hashlib.md5(data).hexdigest(), size=len(data), timestamp=1700000000000)
package("mc-leaf", [])
package("mc-mid", ["mc-leaf >=1.0"])
package("mc-top", ["mc-mid"])
package("mc-bad", [])
for subdir, packages in (("noarch", records), ("linux-64", {})):
    doc = {"info": {"subdir": subdir}, "packages": packages, "packages.conda": {}, "repodata_version": 1}
    json.dump(doc, open(os.path.join(root, subdir, "repodata.json"), "w"))
"#;

/// Solves `spec` from `channel` for linux-64 and noarch and installs it,
/// then leaves without the interpreter's finalization: py-rattler's
/// threads were seen to abort it (`PyGILState_Release`, SIGABRT) after
/// the install had finished.
const SOLVE_AND_INSTALL: &str = r#"
import asyncio, os, sys, rattler
async def main(channel, spec, prefix, cache):
    records = await rattler.solve(sources=[rattler.Channel(channel)], specs=[spec],
                                  platforms=["linux-64", "noarch"])
    await rattler.install(records, target_prefix=prefix, cache_dir=cache)
asyncio.run(main(*sys.argv[1:]))
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"#;

/// rattler solving and installing `spec` into `w/env{n}`, with a home and
/// caches of its own; (whether it succeeded, what it printed).
/// A run that ends by a signal, having printed nothing (py-rattler 0.28
/// was seen to once, under the whole suite's load), is the client's crash,
/// not an answer: it is run again once, with a note in the output.
fn install(python: &Path, w: &Path, n: usize, channel: &str, spec: &str) -> (bool, String) {
    let home = w.join(format!("home{n}"));
    std::fs::create_dir_all(&home).unwrap();
    let command = || {
        let mut cmd = Command::new(python);
        cmd.args(["-c", SOLVE_AND_INSTALL, channel, spec])
            .arg(w.join(format!("env{n}")))
            .arg(home.join("pkgs"))
            .env("HOME", &home)
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("RATTLER_CACHE_DIR", home.join("rattler"));
        cmd
    };
    let first = command().output().expect("python runs");
    if first.status.code().is_none() && first.stdout.is_empty() && first.stderr.is_empty() {
        println!("CLIENT-CRASH rattler ({}): run again", first.status);
        return outcome(&mut command());
    }
    let said = String::from_utf8_lossy(&first.stdout).into_owned()
        + &String::from_utf8_lossy(&first.stderr);
    (
        first.status.success(),
        format!("{said}(exit: {})", first.status),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rattler_installs_past_a_tampered_mirror_then_from_the_cache_alone() {
    let Some(python) = crate::fixtures::venv_python(
        "MIRRORCACHE_RATTLER_VENV",
        "rattler-venv",
        "import importlib.metadata as m; print(m.version('py-rattler'))",
        RATTLER_VERSION,
    ) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    write(&w.join("make.py"), MAKE_CHANNEL);
    run(Command::new("python3")
        .arg(w.join("make.py"))
        .arg(w.join("channels")));
    let (tampering, good) = (MirrorServer::start().await, MirrorServer::start().await);
    let channels = w.join("channels");
    for file in crate::files_below(&channels) {
        let relative = file.strip_prefix(&channels).unwrap().to_str().unwrap();
        let bytes = std::fs::read(&file).unwrap();
        tampering.put(&format!("/c/{relative}"), bytes.clone());
        good.put(&format!("/c/{relative}"), bytes);
    }
    let leaf = "/c/mc/noarch/mc-leaf-1.0-0.tar.bz2";
    tampering.put(
        leaf,
        tampered(&std::fs::read(channels.join("mc/noarch/mc-leaf-1.0-0.tar.bz2")).unwrap()),
    );
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"conda\"\nkind = \"conda\"\nmirrors = {}\nstrategy = \"single\"\ndeny = [\"mc-bad\"]\n",
        crate::support::toml_urls(&[&tampering, &good], "/c")
    ))
    .await;
    let channel = proxy.url("/conda/mc");
    let upstream = || tampering.total() + good.total();

    let (ok, said) = tokio::task::block_in_place(|| install(&python, w, 1, &channel, "mc-top"));
    assert!(ok, "{said}");
    for name in ["mc-top", "mc-mid", "mc-leaf"] {
        let file = w.join(format!("env1/share/{name}.txt"));
        assert!(file.exists(), "{name} not installed:\n{said}");
    }
    assert_eq!(good.hits(leaf), 1);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    let cold = upstream();
    // The denied package: listed (its every record is refused), its file
    // refused with the reason, which rattler prints.
    let (ok, said) = tokio::task::block_in_place(|| install(&python, w, 2, &channel, "mc-bad"));
    assert!(!ok, "{said}");
    let line = said
        .lines()
        .find(|l| l.contains("is refused by this proxy"))
        .unwrap_or_else(|| panic!("no reason in rattler's output:\n{said}"));
    println!("GUARD-OUTPUT rattler: {}", line.trim());
    let denied = "/c/mc/noarch/mc-bad-1.0-0.tar.bz2";
    assert_eq!(tampering.hits(denied) + good.hits(denied), 0);
    let first = upstream();

    tampering.stop();
    good.stop();
    let (ok, said) = tokio::task::block_in_place(|| install(&python, w, 3, &channel, "mc-top"));
    assert!(ok, "{said}");
    assert!(w.join("env3/share/mc-leaf.txt").exists(), "{said}");
    let second = upstream() - first;
    assert_eq!(second, 0);
    report("py-rattler", RATTLER_VERSION, cold, second);
    proxy.stop().await;
}
