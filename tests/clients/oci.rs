//! Container images through an `oci` remote, with the real parts: images
//! built with `umoci`, pushed with `skopeo` to Debian's `docker-registry`
//! instances on 127.0.0.1, and pulled through the proxy with `skopeo copy`
//! and `skopeo inspect`, by tag and by digest. The registries' access logs
//! count what reached upstream.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::oci_fixtures::{
    blobs_of, build_images, inspect_raw, pull, push, tools, Registry, TokenAuth, TokenIssuer,
};
use crate::support::proxy::{config_text, start_text};
use crate::support::TestProxy;

/// The image layout, built once for the whole run (the 64 MiB layer takes
/// a few seconds to compress), in the target's temp dir: the one copy left
/// there by the previous run is replaced.
fn images() -> &'static Path {
    static LAYOUT: OnceLock<PathBuf> = OnceLock::new();
    LAYOUT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("oci-images");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        build_images(&dir)
    })
}

/// Runs blocking client commands without stalling the proxy's tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn oci_remote(name: &str, mirrors: &[&Registry], extra: &str) -> String {
    let mirrors: Vec<String> = mirrors.iter().map(|r| format!("\"{}\"", r.url())).collect();
    format!(
        "[[remote]]\nname = \"{name}\"\nkind = \"oci\"\nmirrors = [{}]\n{extra}\n",
        mirrors.join(", ")
    )
}

/// The proxy's `X-Cache-Status` for a manifest GET.
async fn cache_status(base: &str, path: &str) -> String {
    let response = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .header("accept", crate::oci_fixtures::ACCEPT_ALL)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.headers()["x-cache-status"]
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn images_pull_by_tag_and_digest_fail_over_and_are_served_with_every_registry_down() {
    if !tools() {
        return;
    }
    let layout = blocking(images);
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let mut r1 = Registry::start(w, "r1", &w.join("store1"), None);
    let mut r2 = Registry::start(w, "r2", &w.join("store2"), None);
    blocking(|| {
        for registry in [&r1, &r2] {
            for tag in ["small", "small2", "small3", "big", "multi"] {
                push(
                    w,
                    layout,
                    tag,
                    &format!("{}/team/img:{tag}", registry.host()),
                );
            }
        }
    });
    let upstream =
        |tag: &str| blocking(|| inspect_raw(w, &format!("{}/team/img:{tag}", r1.host())));
    let remote = oci_remote(
        "hub",
        &[&r1, &r2],
        "revalidate_after = \"1s\"\neject_after = 1\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &remote).replacen(
        "[server]\n",
        "[server]\noci_root_remote = \"hub\"\n",
        1,
    );
    let running = start_text(&text).await;
    let proxy = format!("127.0.0.1:{}", running.local_addr.port());
    let base = format!("http://{proxy}");

    // By tag and by digest, every digest as upstream has it.
    for tag in ["small", "big", "multi"] {
        let (raw, digest) = upstream(tag);
        let (through, through_digest) =
            blocking(|| inspect_raw(w, &format!("{proxy}/hub/team/img:{tag}")));
        assert_eq!(through_digest, digest, "{tag} by tag");
        assert_eq!(through, raw);
        let out = w.join(format!("pull-{tag}"));
        let pulled = blocking(|| {
            pull(
                w,
                &format!("{proxy}/hub/team/img:{tag}"),
                &out,
                tag == "multi",
            )
        });
        assert_eq!(pulled, digest, "{tag} pulled by tag");
        let out = w.join(format!("pull-{tag}-by-digest"));
        let pulled = blocking(|| {
            pull(
                w,
                &format!("{proxy}/hub/team/img@{digest}"),
                &out,
                tag == "multi",
            )
        });
        assert_eq!(pulled, digest, "{tag} pulled by digest");
        if tag != "multi" {
            for blob in blobs_of(&raw) {
                let path = format!("/v2/team/img/blobs/{blob}");
                assert_eq!(
                    r1.count("GET", &path) + r2.count("GET", &path),
                    1,
                    "{tag} {blob}"
                );
            }
        }
    }
    // Without the remote's prefix: `server.oci_root_remote`.
    let (_, digest) = upstream("small3");
    let (_, through) = blocking(|| inspect_raw(w, &format!("{proxy}/team/img:small3")));
    assert_eq!(through, digest);

    // As skopeo and podman are set up in docs/clients/oci.md: a registries.conf mirror
    // of another registry name, with the remote's prefix as its namespace.
    let conf = w.join("registries.conf");
    crate::write(
        &conf,
        &format!(
            "[[registry]]\nprefix = \"registry.mirrorcache.invalid\"\nlocation = \"registry.mirrorcache.invalid\"\n\n[[registry.mirror]]\nlocation = \"{proxy}/hub\"\ninsecure = true\n"
        ),
    );
    let (_, digest) = upstream("small");
    let via_conf = blocking(|| {
        crate::run(
            crate::oci_fixtures::skopeo(w)
                .arg("--registries-conf")
                .arg(&conf)
                .args(["inspect", "--raw"])
                .arg("docker://registry.mirrorcache.invalid/team/img:small"),
        )
    });
    assert_eq!(
        format!("sha256:{}", crate::support::sha256_hex(via_conf.as_bytes())),
        digest
    );

    // One registry down: the next pull fails over.
    r1.stop();
    let (_, digest) = blocking(|| inspect_raw(w, &format!("{}/team/img:small2", r2.host())));
    let before = r2.count("GET", "/v2/team/img/manifests/small2");
    let pulled = blocking(|| {
        pull(
            w,
            &format!("{proxy}/hub/team/img:small2"),
            &w.join("failover"),
            false,
        )
    });
    assert_eq!(pulled, digest);
    assert_eq!(r2.count("GET", "/v2/team/img/manifests/small2"), before + 1);

    // Both down, every tag past revalidate_after: by tag (STALE) and by digest.
    r2.stop();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let raw = std::fs::read(w.join("pull-big/manifest.json")).unwrap();
    let big_digest = format!("sha256:{}", crate::support::sha256_hex(&raw));
    let pulled = blocking(|| {
        pull(
            w,
            &format!("{proxy}/hub/team/img:big"),
            &w.join("offline-tag"),
            false,
        )
    });
    assert_eq!(pulled, big_digest);
    let pulled = blocking(|| {
        pull(
            w,
            &format!("{proxy}/hub/team/img@{big_digest}"),
            &w.join("offline-digest"),
            false,
        )
    });
    assert_eq!(pulled, big_digest);
    assert_eq!(
        cache_status(&base, "/v2/hub/team/img/manifests/big").await,
        "STALE"
    );
    assert_eq!(
        cache_status(&base, &format!("/v2/hub/team/img/manifests/{big_digest}")).await,
        "HIT"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_cold_pulls_make_one_upstream_get_per_blob() {
    if !tools() {
        return;
    }
    let layout = blocking(images);
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let registry = Registry::start(w, "r", &w.join("store"), None);
    blocking(|| {
        push(
            w,
            layout,
            "big",
            &format!("{}/team/img:big", registry.host()),
        )
    });
    let (raw, digest) = blocking(|| inspect_raw(w, &format!("{}/team/img:big", registry.host())));
    let manifest_path = "/v2/team/img/manifests/big";
    let direct = registry.count("GET", manifest_path);
    let proxy = TestProxy::start(&oci_remote("hub", &[&registry], "")).await;
    let host = proxy.base.trim_start_matches("http://").to_string();

    let started = std::time::Instant::now();
    let pulled: Vec<String> = blocking(|| {
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (w, host) = (w.to_path_buf(), host.clone());
                std::thread::spawn(move || {
                    pull(
                        &w,
                        &format!("{host}/hub/team/img:big"),
                        &w.join(format!("out{i}")),
                        false,
                    )
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let elapsed = started.elapsed();
    assert!(pulled.iter().all(|d| *d == digest), "{pulled:?}");
    let mut gets = Vec::new();
    for blob in blobs_of(&raw) {
        let n = registry.count("GET", &format!("/v2/team/img/blobs/{blob}"));
        gets.push(n);
        assert_eq!(n, 1, "upstream GETs of {blob}");
    }
    let manifest_gets = registry.count("GET", manifest_path) - direct;
    assert_eq!(manifest_gets, 1, "the tag's manifest");
    println!(
        "OCI-REPORT 8 concurrent cold skopeo copy of a 64 MiB image: upstream GETs per blob {gets:?}, manifest {manifest_gets}, {:.2} s",
        elapsed.as_secs_f64()
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tag_is_revalidated_with_head_and_fetched_again_only_when_it_moved() {
    if !tools() {
        return;
    }
    let layout = blocking(images);
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let registry = Registry::start(w, "r", &w.join("store"), None);
    let upstream = format!("{}/team/img:moving", registry.host());
    blocking(|| push(w, layout, "small", &upstream));
    let (_, first) = blocking(|| inspect_raw(w, &upstream));
    let proxy = TestProxy::start(&oci_remote(
        "hub",
        &[&registry],
        "revalidate_after = \"1s\"\n",
    ))
    .await;
    let through = format!(
        "{}/hub/team/img:moving",
        proxy.base.trim_start_matches("http://")
    );
    let path = "/v2/team/img/manifests/moving";
    let gets_before = registry.count("GET", path);

    assert_eq!(blocking(|| inspect_raw(w, &through)).1, first);
    assert_eq!(registry.count("GET", path), gets_before + 1);
    for round in 0..2 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(
            blocking(|| inspect_raw(w, &through)).1,
            first,
            "round {round}"
        );
        assert_eq!(
            registry.count("HEAD", path),
            round + 1,
            "a HEAD per revalidation"
        );
        assert_eq!(
            registry.count("GET", path),
            gets_before + 1,
            "no GET while unchanged"
        );
    }
    assert_eq!(
        cache_status(&proxy.base, "/v2/hub/team/img/manifests/moving").await,
        "HIT",
        "fresh again after the HEAD"
    );

    blocking(|| push(w, layout, "small2", &upstream));
    let (_, moved) = blocking(|| inspect_raw(w, &upstream));
    assert_ne!(moved, first);
    let gets_before = registry.count("GET", path);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        blocking(|| inspect_raw(w, &through)).1,
        moved,
        "the new digest after revalidate_after"
    );
    assert_eq!(
        registry.count("GET", path),
        gets_before + 1,
        "one GET once it moved"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn token_auth_anonymous_and_with_credentials() {
    if !tools() {
        return;
    }
    let layout = blocking(images);
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let password = "pull-secret-8c1f";
    let issuer =
        TokenIssuer::start(w, ("puller", password), &["public/img"], &["private/img"]).await;
    // Pushed through an open registry on the same store; pulled from the
    // one that wants tokens.
    let store = w.join("store");
    let mut open = Registry::start(w, "open", &store, None);
    blocking(|| {
        push(w, layout, "small", &format!("{}/public/img:1", open.host()));
        push(
            w,
            layout,
            "small2",
            &format!("{}/private/img:1", open.host()),
        );
    });
    let (_, public_digest) = blocking(|| inspect_raw(w, &format!("{}/public/img:1", open.host())));
    let (_, private_digest) =
        blocking(|| inspect_raw(w, &format!("{}/private/img:1", open.host())));
    open.stop();
    let secured = Registry::start(
        w,
        "secured",
        &store,
        Some(TokenAuth {
            realm: &issuer.realm,
            cert: &issuer.cert,
        }),
    );
    std::env::set_var("MC_TEST_OCI_PASSWORD", password);
    let remotes = format!(
        "{}{}",
        oci_remote("anon", &[&secured], ""),
        oci_remote(
            "creds",
            &[&secured],
            // The token service is on another port than the registry: the
            // password goes to it only because it is listed here.
            &format!(
                "username = \"puller\"\npassword_env = \"MC_TEST_OCI_PASSWORD\"\ntoken_realms = [\"{}\"]\n",
                issuer.realm
            )
        )
    );
    let proxy = TestProxy::start(&remotes).await;
    let host = proxy.base.trim_start_matches("http://").to_string();

    let pull_through = |reference: &str, into: &str| {
        blocking(|| pull(w, &format!("{host}/{reference}"), &w.join(into), false))
    };
    let issued_to = |credentials: bool| issuer.issued.lock().unwrap().contains(&credentials);
    assert_eq!(pull_through("anon/public/img:1", "anon"), public_digest);
    assert!(issued_to(false), "an anonymous token");
    // An anonymous token does not reach the private repository.
    let refused = crate::oci_fixtures::skopeo(w)
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://{host}/anon/private/img:1"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert_eq!(pull_through("creds/private/img:1", "creds"), private_digest);
    assert!(issued_to(true), "a token for the credentials");
    // A token is asked for once per repository, not per request.
    let tokens = issuer.issued.lock().unwrap().len();
    assert!(tokens <= 4, "{tokens} tokens issued");
    for page in ["/-/status", "/-/metrics", "/-/"] {
        let text = reqwest::get(proxy.url(page))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!text.contains(password), "{page} shows the password");
    }
    proxy.stop().await;
}
