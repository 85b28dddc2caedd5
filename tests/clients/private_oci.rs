//! Container clients against a private `oci` remote: skopeo with
//! `--src-creds` (a password, and a token) beside an anonymous remote it
//! pulls with no credentials at all, and `podman login`, both answering the
//! 401 of `/v2/`. The helpers are `private.rs`'s.

use std::process::Command;

use crate::private::{attempt, outcome, private_proxy};
use crate::{run, version};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn skopeo_with_creds_and_anonymous_beside_a_private_oci_remote() {
    use crate::oci_fixtures::{push, skopeo, tools, Registry};
    if !tools() {
        return;
    }
    let Some(skopeo_version) = version("skopeo", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let layout = w.join("layout");
    let image = format!("{}:small", layout.display());
    tokio::task::block_in_place(|| {
        run(Command::new("umoci")
            .args(["init", "--layout"])
            .arg(&layout));
        run(Command::new("umoci").args(["new", "--image", &image]));
        std::fs::write(w.join("small.data"), crate::support::test_bytes(4096, 77)).unwrap();
        run(Command::new("umoci")
            .args(["insert", "--rootless", "--image", &image])
            .arg(w.join("small.data"))
            .arg("/data"));
    });
    let hub = Registry::start(w, "hub", &w.join("hubstore"), None);
    let internal = Registry::start(w, "internal", &w.join("internalstore"), None);
    tokio::task::block_in_place(|| {
        push(
            w,
            &layout,
            "small",
            &format!("{}/team/img:small", hub.host()),
        );
        push(
            w,
            &layout,
            "small",
            &format!("{}/team/img:small", internal.host()),
        );
    });
    let remotes = format!(
        "[[remote]]\nname = \"hub\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n\n\
         [[remote]]\nname = \"internal\"\nkind = \"oci\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n",
        hub.url(),
        internal.url()
    );
    let (running, token) = private_proxy(w, &remotes, "").await;
    let host = format!("127.0.0.1:{}", running.local_addr.port());
    let copy = |reference: &str, into: &str, creds: Option<&str>| {
        let mut cmd = skopeo(w);
        cmd.args(["copy", "--src-tls-verify=false"]);
        if let Some(creds) = creds {
            cmd.arg("--src-creds").arg(creds);
        }
        cmd.arg(format!("docker://{host}/{reference}"))
            .arg(format!("dir:{}", w.join(into).display()));
        cmd
    };
    tokio::task::block_in_place(|| {
        // The public remote: no credentials at all (skopeo answers /v2/'s
        // challenge with empty ones).
        run(&mut copy("hub/team/img:small", "pub", None));
        assert!(w.join("pub/manifest.json").exists());
        let (ok, said) = attempt(&mut copy("internal/team/img:small", "denied", None));
        assert!(!ok, "skopeo without credentials: {said}");
        let (ok, _) = attempt(&mut copy(
            "internal/team/img:small",
            "wrong",
            Some("ci:wrong"),
        ));
        assert!(!ok);
        run(&mut copy(
            "internal/team/img:small",
            "priv",
            Some("ci:ci-pass"),
        ));
        assert!(w.join("priv/manifest.json").exists());
        run(&mut copy(
            "internal/team/img:small",
            "bytoken",
            Some(&format!("ci:{token}")),
        ));
    });
    outcome(
        "skopeo",
        &skopeo_version,
        "--src-creds (password, and a token); the anonymous remote with none",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_login_answers_the_v2_challenge() {
    let Some(podman) = crate::client("podman", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let remotes = "[[remote]]\nname = \"internal\"\nkind = \"oci\"\nmirrors = [\"http://127.0.0.1:1\"]\naccess = [\"ci\"]\n";
    let (running, token) = private_proxy(w, remotes, "").await;
    let host = format!("127.0.0.1:{}", running.local_addr.port());
    let login = |user: &str, password: &str| {
        let mut cmd = Command::new("podman");
        cmd.args(["login", "--tls-verify=false", "--authfile"])
            .arg(w.join("auth.json"))
            .args(["-u", user, "-p", password, &host])
            .env("HOME", w)
            .env("XDG_RUNTIME_DIR", w)
            .env("XDG_CONFIG_HOME", w.join("config"));
        cmd
    };
    tokio::task::block_in_place(|| {
        let (ok, said) = attempt(&mut login("ci", "wrong"));
        assert!(!ok, "podman login with a wrong password: {said}");
        let said = run(&mut login("ci", "ci-pass"));
        assert!(said.contains("Login Succeeded"), "{said}");
        run(&mut login("ci", &token));
    });
    outcome(
        "podman",
        &podman,
        "login (password, and a token) after /v2/'s 401",
    );
}
