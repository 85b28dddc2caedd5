//! Nix (Debian's 2.8) through a `nix` remote, against two fixture binary
//! caches on 127.0.0.1 made on the spot by Nix itself: three store paths
//! (`mc-top` refers to `mc-mid` and `mc-leaf`, `mc-mid` to `mc-leaf`) put in
//! a throwaway store, then `nix copy --to file://…?secret-key=…` signs their
//! narinfos with a key the test makes and trusts. The narinfos lose their
//! `CA:` line, so Nix takes them for input-addressed paths and accepts them
//! only on a trusted signature. What the client asks for is what
//! `libstore/binary-cache-store.cc` (`nix-cache-info`, `{hash}.narinfo`, the
//! narinfo's `URL`) and `libstore/http-binary-cache-store.cc` (a 404 or 403
//! is "no such file") say. The first cache lacks `mc-mid`'s narinfo and
//! serves other bytes for `mc-leaf`'s NAR; the proxy asks the second.
//! `nix-store --realise` runs through the proxy cold, a client trusting
//! another key refuses the same paths (their signatures pass untouched),
//! and `nix copy --from` the proxy runs with both caches stopped.

use std::path::Path;
use std::process::Command;

use crate::support::{tampered, MirrorServer, TestProxy};
use crate::{client, files_below, report, run, write};

/// A `nix` command in `w`'s throwaway configuration, with a home (and so a
/// narinfo disk cache) of its own for `round`.
fn nix(w: &Path, round: &str, program: &str) -> Command {
    let mut cmd = Command::new(program);
    let home = w.join(format!("home-{round}"));
    cmd.env("HOME", &home)
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("NIX_CONF_DIR", w.join("conf"))
        .env_remove("NIX_REMOTE");
    cmd
}

/// `local?root=…`: a store of its own below `w`.
fn store(w: &Path, name: &str) -> String {
    format!("local?root={}", w.join(name).display())
}

/// The fixture cache's files, signed by `w/secret-key`, and the path of
/// `mc-top`: made with Nix and copied to a `file://` binary cache.
fn make_cache(w: &Path) -> (Vec<(String, Vec<u8>)>, String) {
    write(
        &w.join("conf/nix.conf"),
        "build-users-group =\nsandbox = false\nexperimental-features = nix-command\nsubstituters =\n",
    );
    run(nix(w, "make", "nix-store").args([
        "--generate-binary-cache-key",
        "mc-test-1",
        &w.join("secret-key").display().to_string(),
        &w.join("public-key").display().to_string(),
    ]));
    let expr = r#"let leaf = builtins.toFile "mc-leaf" "leaf data\n";
        mid = builtins.toFile "mc-mid" "uses ${leaf}\n";
    in builtins.toFile "mc-top" "uses ${mid} and ${leaf}\n""#;
    let top = run(nix(w, "make", "nix-instantiate").args([
        "--store",
        &store(w, "source"),
        "--eval",
        "--read-write-mode",
        "-E",
        expr,
    ]));
    let top = top.trim().trim_matches('"').to_string();
    let to = format!(
        "file://{}?secret-key={}&compression=xz",
        w.join("cache").display(),
        w.join("secret-key").display()
    );
    run(nix(w, "make", "nix").args(["copy", "--from", &store(w, "source"), "--to", &to, &top]));
    let files = files_below(&w.join("cache"))
        .into_iter()
        .map(|file| {
            let name = file
                .strip_prefix(w.join("cache"))
                .unwrap()
                .display()
                .to_string();
            let mut bytes = std::fs::read(&file).unwrap();
            if name.ends_with(".narinfo") {
                let text = String::from_utf8(bytes).unwrap();
                let kept: Vec<&str> = text.lines().filter(|l| !l.starts_with("CA:")).collect();
                bytes = format!("{}\n", kept.join("\n")).into_bytes();
            }
            (name, bytes)
        })
        .collect();
    (files, top)
}

/// The narinfo of the store path named `name` among `files`, and the NAR its `URL:` names.
fn narinfo_of<'a>(files: &'a [(String, Vec<u8>)], name: &str) -> (&'a str, String) {
    let (path, text) = files
        .iter()
        .find(|(path, bytes)| {
            path.ends_with(".narinfo")
                && String::from_utf8_lossy(bytes).contains(&format!("-{name}\n"))
        })
        .unwrap();
    let text = String::from_utf8_lossy(text);
    let url = text.lines().find_map(|l| l.strip_prefix("URL: ")).unwrap();
    (path, url.to_string())
}

/// `mc-top`'s closure is in the store at `root`, with its bytes.
fn assert_realised(w: &Path, root: &str, top: &str, said: &str) {
    let store = w.join(root).join("nix/store");
    let names: Vec<String> = std::fs::read_dir(&store)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    for name in ["mc-top", "mc-mid", "mc-leaf"] {
        assert!(names.iter().any(|n| n.ends_with(name)), "{name}: {said}");
    }
    let leaf = names.iter().find(|n| n.ends_with("mc-leaf")).unwrap();
    assert_eq!(std::fs::read(store.join(leaf)).unwrap(), b"leaf data\n");
    let top_name = top.strip_prefix("/nix/store/").unwrap();
    let top_text = std::fs::read_to_string(store.join(top_name)).unwrap();
    assert!(
        top_text.contains(&format!("/nix/store/{leaf}")),
        "{top_text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nix_realises_a_signed_closure_past_a_tampered_cache_then_copies_it_offline() {
    let Some(version) = client("nix-store", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (files, top) = tokio::task::block_in_place(|| make_cache(w));
    let public_key = std::fs::read_to_string(w.join("public-key")).unwrap();
    let (mid_info, _) = narinfo_of(&files, "mc-mid");
    let (_, leaf_nar) = narinfo_of(&files, "mc-leaf");
    let (first, second) = (MirrorServer::start().await, MirrorServer::start().await);
    for (path, bytes) in &files {
        second.put(&format!("/cache/{path}"), bytes.clone());
        if path == &leaf_nar {
            first.put(&format!("/cache/{path}"), tampered(bytes));
        } else if path != mid_info {
            first.put(&format!("/cache/{path}"), bytes.clone());
        }
    }
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"nix\"\nkind = \"nix\"\nmirrors = {}\nstrategy = \"single\"\nrequire_declared_hash = true\n",
        crate::support::toml_urls(&[&first, &second], "/cache")
    ))
    .await;
    let url = proxy.url("/nix");
    let upstream = || first.total() + second.total();

    let realise = |round: &str, root: &str, key: &str| {
        nix(w, round, "nix-store")
            .args(["--store", &store(w, root), "--realise", &top])
            .args(["--option", "substituters", &url])
            .args(["--option", "trusted-public-keys", key])
            .output()
            .unwrap()
    };
    let out = tokio::task::block_in_place(|| realise("cold", "cold", public_key.trim()));
    let said = format!("{out:?}");
    assert!(out.status.success(), "{said}");
    assert_realised(w, "cold", &top, &said);
    assert_eq!(first.hits(&format!("/cache/{mid_info}")), 1);
    assert_eq!(second.hits(&format!("/cache/{leaf_nar}")), 1);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);

    // Signatures reach the client untouched: one that trusts another key
    // refuses the same narinfos.
    let other = "mc-other-1:15Xk1XTJwrLxeBdVe8nmwZc8X9Q6cqBIZ2hD2/vPVFY=";
    let out = tokio::task::block_in_place(|| realise("untrusted", "untrusted", other));
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("is not signed by any of the keys"), "{said}");
    proxy.settle().await;
    let cold = upstream();

    first.stop();
    second.stop();
    let out = tokio::task::block_in_place(|| {
        nix(w, "offline", "nix")
            .args(["copy", "--from", &url, "--to", &store(w, "offline"), &top])
            .args(["--option", "trusted-public-keys", public_key.trim()])
            .output()
            .unwrap()
    });
    let said = format!("{out:?}");
    assert!(out.status.success(), "{said}");
    assert_realised(w, "offline", &top, &said);
    assert_eq!(upstream(), cold);
    report("nix", &version, cold, upstream() - cold);
    proxy.stop().await;
}
