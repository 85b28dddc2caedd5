//! The container daemons that pull on build machines and cluster nodes,
//! through an `oci` remote: the Docker Engine with `registry-mirrors` (Hub
//! names, which it only ever sends to the root `/v2/`), `docker login` to a
//! private remote (the proxy's token service, identity token and all),
//! containerd's `ctr` with one `hosts.toml` per registry routed by `?ns=`,
//! four containerd namespaces pulling one cold image at once, podman with a
//! `registries.conf` mirror, and a registry answering 429 to everything.
//! Upstream registries are `MirrorServer`s serving `umoci`-built layouts,
//! so each request reaching upstream is counted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::daemon_fixtures::{
    build_image, hosts_toml, image_blobs, serve_layout, tools, Containerd, Dockerd,
};
use crate::oci_fixtures::build_index;
use crate::private::{attempt, private_proxy};
use crate::run;
use crate::support::mirror::Fault;
use crate::support::proxy::{config_text, start_text};
use crate::support::MirrorServer;

const MIB: usize = 1 << 20;

/// The images, built once per run: `multi`, an index of `app` (amd64: three
/// layers, the second 256 MiB) and `app-arm` (arm64); `tool`, `tool2`,
/// `tool3` (three small layers each, different bytes); `cold`, an index of
/// a three-layer amd64 image and an arm64 one.
fn images() -> &'static Path {
    static LAYOUT: OnceLock<PathBuf> = OnceLock::new();
    LAYOUT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("daemon-images");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let layout = dir.join("layout");
        build_image(
            &dir,
            &layout,
            "app",
            "amd64",
            &[4096, 256 * MIB, 8192],
            5000,
        );
        build_image(&dir, &layout, "app-arm", "arm64", &[4096], 5100);
        build_index(&layout, "multi", &[("app", "amd64"), ("app-arm", "arm64")]);
        for (i, tag) in ["tool", "tool2", "tool3"].into_iter().enumerate() {
            let seed = 5200 + 100 * i as u64;
            build_image(&dir, &layout, tag, "amd64", &[4096, 16384, 2048], seed);
        }
        build_image(&dir, &layout, "cold-amd", "amd64", &[4096, MIB, 4096], 5600);
        build_image(&dir, &layout, "cold-arm", "arm64", &[4096], 5700);
        build_index(
            &layout,
            "cold",
            &[("cold-amd", "amd64"), ("cold-arm", "arm64")],
        );
        layout
    })
}

/// The images and a throwaway directory, when the daemons are installed.
fn prepared() -> Option<(&'static Path, tempfile::TempDir)> {
    if !tools() {
        return None;
    }
    Some((blocking(images), tempfile::tempdir().unwrap()))
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A proxy whose root remote `hub` (Docker Hub, to the daemons) pulls from
/// `upstream`.
async fn root_proxy(w: &Path, upstream: &MirrorServer) -> mirrorcache::http::server::Running {
    let remotes = format!(
        "[[remote]]\nname = \"hub\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n",
        upstream.url("")
    );
    let text = config_text(&w.join("proxy"), &remotes).replacen(
        "[server]\n",
        "[server]\noci_root_remote = \"hub\"\n",
        1,
    );
    start_text(&text).await
}

/// The `daemon.json` of a daemon pulling Docker Hub names through `proxy`.
fn mirrors_json(proxy: &str) -> serde_json::Value {
    serde_json::json!({ "registry-mirrors": [proxy] })
}

/// Each blob of the list reached `upstream` exactly once under `name`.
fn one_get_per_blob(upstream: &MirrorServer, name: &str, blobs: &[String]) {
    for blob in blobs {
        let path = format!("/v2/{name}/blobs/{blob}");
        assert_eq!(upstream.hits(&path), 1, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dockerd_pulls_hub_names_through_registry_mirrors_and_again_with_the_registry_down() {
    let Some((layout, work)) = prepared() else {
        return;
    };
    let w = work.path();
    let upstream = MirrorServer::start().await;
    let alpine = serve_layout(&upstream, layout, "multi", "library/alpine", "latest");
    let app = serve_layout(&upstream, layout, "tool", "org/app", "v1");
    let running = root_proxy(w, &upstream).await;
    let proxy = format!("http://127.0.0.1:{}", running.local_addr.port());
    blocking(|| {
        let first = Dockerd::start(&w.join("d1"), &mirrors_json(&proxy));
        // `alpine` is `library/alpine` to the daemon; both spellings, and a
        // user's image, come through the mirror.
        run(first.docker().args(["pull", "alpine"]));
        assert_eq!(first.image_id("alpine"), alpine.image_id);
        run(first.docker().args(["pull", "library/alpine:latest"]));
        assert_eq!(first.image_id("library/alpine:latest"), alpine.image_id);
        run(first.docker().args(["pull", "org/app:v1"]));
        assert_eq!(first.image_id("org/app:v1"), app.image_id);
    });
    // Cold: one upstream GET per blob, the 256 MiB layer too; the arm64
    // image of the index was never asked for.
    one_get_per_blob(&upstream, "library/alpine", &alpine.blobs);
    one_get_per_blob(&upstream, "org/app", &app.blobs);
    let arm = image_blobs(layout, "app-arm");
    assert_eq!(
        upstream.hits(&format!("/v2/library/alpine/blobs/{}", arm[1])),
        0
    );
    let before = upstream.total();
    upstream.stop();
    blocking(|| {
        let fresh = Dockerd::start(&w.join("d2"), &mirrors_json(&proxy));
        run(fresh.docker().args(["pull", "alpine"]));
        assert_eq!(fresh.image_id("alpine"), alpine.image_id);
        run(fresh.docker().args(["pull", "org/app:v1"]));
        assert_eq!(fresh.image_id("org/app:v1"), app.image_id);
    });
    assert_eq!(upstream.total(), before, "the registry was down");
    println!(
        "DAEMON dockerd registry-mirrors: cold {before} upstream requests for {} blobs, offline 0",
        alpine.blobs.len() + app.blobs.len()
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn docker_login_pulls_a_private_remote_and_without_it_is_refused() {
    let Some((layout, work)) = prepared() else {
        return;
    };
    let w = work.path();
    let upstream = MirrorServer::start().await;
    let app = serve_layout(&upstream, layout, "tool", "org/app", "v1");
    let remotes = format!(
        "[[remote]]\nname = \"internal\"\nkind = \"oci\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n",
        upstream.url("")
    );
    let (running, token) = private_proxy(w, &remotes, "").await;
    let host = format!("127.0.0.1:{}", running.local_addr.port());
    let image = format!("{host}/internal/org/app:v1");
    blocking(|| {
        let daemon = Dockerd::start(&w.join("d"), &serde_json::json!({}));
        let (ok, said) = attempt(daemon.docker().args(["pull", &image]));
        assert!(!ok, "a pull without login: {said}");
        assert!(
            ["unauthorized", "denied", "no basic auth credentials"]
                .iter()
                .any(|refusal| said.contains(refusal)),
            "{said}"
        );
        assert_eq!(upstream.total(), 0, "a refused pull reads nothing");
        let login = |password: &str| {
            let mut cmd = daemon.docker();
            cmd.args(["login", &host, "-u", "ci", "--password-stdin"]);
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            use std::io::Write as _;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(password.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            let said = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            (out.status.success(), said)
        };
        let (ok, said) = login("wrong");
        assert!(!ok, "a login with a wrong password: {said}");
        let (ok, said) = login("ci-pass");
        assert!(ok && said.contains("Login Succeeded"), "{said}");
        // The token service gave `docker login` a refresh token, kept as
        // its identity token instead of the password.
        let config = daemon.client_config();
        assert!(config.contains("identitytoken"), "{config}");
        assert!(!config.contains("ci-pass"));
        run(daemon.docker().args(["pull", &image]));
        assert_eq!(daemon.image_id(&image), app.image_id);
        // A `mirrorcache token` logs in as well.
        run(daemon.docker().args(["logout", &host]));
        let (ok, said) = login(&token);
        assert!(ok, "{said}");
        run(daemon.docker().args(["rmi", &image]));
        run(daemon.docker().args(["pull", &image]));
    });
    one_get_per_blob(&upstream, "org/app", &app.blobs);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn containerd_pulls_three_registries_through_one_proxy_by_ns_and_four_namespaces_at_once() {
    let Some((layout, work)) = prepared() else {
        return;
    };
    let w = work.path();
    let (hub, ghcr, quay) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    // One name, three images: the registry decides which one is pulled.
    let served = [
        serve_layout(&hub, layout, "tool", "org/app", "v1"),
        serve_layout(&ghcr, layout, "tool2", "org/app", "v1"),
        serve_layout(&quay, layout, "tool3", "org/app", "v1"),
    ];
    let cold = serve_layout(&hub, layout, "cold", "library/cold", "v1");
    let remotes = format!(
        "[[remote]]\nname = \"hub\"\nkind = \"oci\"\nregistry = \"docker.io\"\nmirrors = [\"{}\"]\n\n\
         [[remote]]\nname = \"ghcr\"\nkind = \"oci\"\nregistry = \"ghcr.io\"\nmirrors = [\"{}\"]\n\n\
         [[remote]]\nname = \"quay\"\nkind = \"oci\"\nregistry = \"quay.io\"\nmirrors = [\"{}\"]\n",
        hub.url(""),
        ghcr.url(""),
        quay.url("")
    );
    let running = start_text(&config_text(&w.join("proxy"), &remotes)).await;
    let proxy = format!("http://127.0.0.1:{}", running.local_addr.port());
    let hosts = w.join("certs.d");
    for registry in ["docker.io", "ghcr.io", "quay.io"] {
        hosts_toml(&hosts, registry, &proxy);
    }
    let references = [
        "docker.io/org/app:v1",
        "ghcr.io/org/app:v1",
        "quay.io/org/app:v1",
    ];
    let pull_all = |containerd: &Containerd| {
        for (reference, image) in references.iter().zip(&served) {
            run(&mut containerd.pull("default", &hosts, reference));
            let listed = run(containerd.ctr("default").args(["images", "ls"]));
            let line = listed
                .lines()
                .find(|l| l.starts_with(reference))
                .unwrap_or_else(|| panic!("{reference} not in {listed}"));
            assert!(line.contains(&image.digest), "{reference}: {line}");
        }
    };
    blocking(|| {
        let containerd = Containerd::start(&w.join("c1"));
        pull_all(&containerd);
        // Four namespaces pull one cold image at once: one fill per blob.
        std::thread::scope(|scope| {
            for n in 1..=4 {
                let (containerd, hosts) = (&containerd, &hosts);
                scope.spawn(move || {
                    run(&mut containerd.pull(&format!("n{n}"), hosts, "docker.io/library/cold:v1"));
                });
            }
        });
    });
    for (upstream, image) in [&hub, &ghcr, &quay].into_iter().zip(&served) {
        one_get_per_blob(upstream, "org/app", &image.blobs);
    }
    one_get_per_blob(&hub, "library/cold", &cold.blobs);
    for upstream in [&hub, &ghcr, &quay] {
        upstream.stop();
    }
    let before: usize = [&hub, &ghcr, &quay].iter().map(|u| u.total()).sum();
    blocking(|| pull_all(&Containerd::start(&w.join("c2"))));
    let after: usize = [&hub, &ghcr, &quay].iter().map(|u| u.total()).sum();
    assert_eq!(after, before);
    println!("DAEMON containerd ?ns=: cold {before} upstream requests, offline 0");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn podman_pulls_through_its_registries_conf_mirror() {
    let Some(_) = crate::client("podman", "--version") else {
        return;
    };
    let Some((layout, work)) = prepared() else {
        return;
    };
    let w = work.path();
    let upstream = MirrorServer::start().await;
    let app = serve_layout(&upstream, layout, "tool", "library/app", "v1");
    let running = root_proxy(w, &upstream).await;
    let host = format!("127.0.0.1:{}", running.local_addr.port());
    std::fs::write(w.join("registries.conf"), registries_conf(&host)).unwrap();
    std::fs::write(
        w.join("policy.json"),
        r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
    )
    .unwrap();
    let podman = |root: &str| {
        let mut cmd = Command::new("podman");
        cmd.arg("--root")
            .arg(w.join(root))
            .arg("--runroot")
            .arg(w.join(format!("{root}-run")))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
            ])
            .env("CONTAINERS_REGISTRIES_CONF", w.join("registries.conf"))
            .env("HOME", w)
            .env("XDG_RUNTIME_DIR", w.join(format!("{root}-xdg")))
            .env("XDG_CONFIG_HOME", w.join("config"));
        cmd
    };
    blocking(|| {
        for root in ["p1", "p2"] {
            run(podman(root)
                .args(["pull", "--signature-policy"])
                .arg(w.join("policy.json"))
                .arg("docker.io/library/app:v1"));
            let id = run(podman(root).args([
                "image",
                "inspect",
                "--format",
                "{{.Id}}",
                "docker.io/library/app:v1",
            ]));
            assert_eq!(format!("sha256:{}", id.trim()), app.image_id);
            if root == "p1" {
                upstream.stop();
            }
        }
    });
    one_get_per_blob(&upstream, "library/app", &app.blobs);
    running.shutdown().await;
}

/// podman's `registries.conf`: Docker Hub through the proxy (plain HTTP).
fn registries_conf(host: &str) -> String {
    format!(
        "unqualified-search-registries = [\"docker.io\"]\n\n[[registry]]\nprefix = \"docker.io\"\n\
         location = \"docker.io\"\n\n[[registry.mirror]]\nlocation = \"{host}\"\ninsecure = true\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registry_answering_429_leaves_cached_tags_pulling_and_tells_why_for_the_rest() {
    let Some((layout, work)) = prepared() else {
        return;
    };
    let w = work.path();
    let upstream = MirrorServer::start().await;
    let app = serve_layout(&upstream, layout, "tool", "org/app", "v1");
    serve_layout(&upstream, layout, "tool2", "org/other", "v1");
    // Tags are asked about again on every pull.
    let remotes = format!(
        "[[remote]]\nname = \"hub\"\nkind = \"oci\"\nmirrors = [\"{}\"]\nrevalidate_after = \"0s\"\n",
        upstream.url("")
    );
    let running = start_text(&config_text(&w.join("proxy"), &remotes)).await;
    let host = format!("127.0.0.1:{}", running.local_addr.port());
    let cached = format!("{host}/hub/org/app:v1");
    blocking(|| {
        let first = Dockerd::start(&w.join("d1"), &serde_json::json!({}));
        run(first.docker().args(["pull", &cached]));
    });
    upstream.set_fault(Fault::RateLimited(3600));
    blocking(|| {
        let fresh = Dockerd::start(&w.join("d2"), &serde_json::json!({}));
        run(fresh.docker().args(["pull", &cached]));
        assert_eq!(fresh.image_id(&cached), app.image_id);
        let (ok, said) = attempt(
            fresh
                .docker()
                .args(["pull", &format!("{host}/hub/org/other:v1")]),
        );
        assert!(!ok);
        assert!(
            said.contains("toomanyrequests") && said.contains("pull rate limit"),
            "the client sees the registry's reason: {said}"
        );
    });
    let manifest = reqwest::Client::new()
        .get(format!("http://{host}/v2/hub/org/app/manifests/v1"))
        .header("accept", crate::oci_fixtures::ACCEPT_ALL)
        .send()
        .await
        .unwrap();
    assert_eq!(manifest.status(), 200);
    assert_eq!(manifest.headers()["x-cache-status"], "STALE");
    running.shutdown().await;
}
