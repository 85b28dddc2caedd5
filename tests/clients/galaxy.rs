//! ansible-galaxy (Debian's ansible-core 2.14) through a `galaxy` remote,
//! against a fixture Galaxy on 127.0.0.1 answering what
//! `ansible/galaxy/api.py` asks for (`g_connect`: the server's root, then
//! `api/` for `available_versions`; `get_collection_metadata`,
//! `get_collection_versions` with `?limit=100`,
//! `get_collection_version_metadata` for `download_url`,
//! `artifact.sha256` and `metadata.dependencies`) and
//! `galaxy/collection/concrete_artifact_manager.py` (`_download_file`:
//! the tarball, checked against `artifact.sha256`). Two collections built
//! with `ansible-galaxy collection build`, `acme.web` depending on
//! `acme.base`, their tarballs on two dist hosts (the remote's `files`),
//! the first with other bytes for `acme.base`. `ansible-galaxy collection
//! install acme.web` runs through the proxy, then from a fresh home with
//! every origin stopped.

use std::path::Path;
use std::process::Command;

use crate::support::{sha256_hex, tampered, MirrorServer, TestProxy};
use crate::{client, report, run, write};

/// `ansible-galaxy collection build` of acme.`name` 1.0.0 (with
/// `dependencies`, a YAML mapping), in `w/src`; returns the tarball.
fn build(w: &Path, name: &str, dependencies: &str) -> Vec<u8> {
    let dir = w.join("src").join(name);
    write(
        &dir.join("galaxy.yml"),
        &format!(
            "namespace: acme\nname: {name}\nversion: 1.0.0\nreadme: README.md\nauthors: [mirrorcache]\ndependencies: {dependencies}\n"
        ),
    );
    write(&dir.join("README.md"), &format!("# acme.{name}\n"));
    write(
        &dir.join(format!("plugins/modules/{name}.py")),
        "# a module\n",
    );
    run(Command::new("ansible-galaxy")
        .args(["collection", "build", "--output-path"])
        .arg(w.join("out"))
        .arg(&dir)
        .env("HOME", w.join("build-home")));
    std::fs::read(w.join(format!("out/acme-{name}-1.0.0.tar.gz"))).unwrap()
}

/// The v3 documents of acme.`name` 1.0.0 on `galaxy`, its download URL on `dist`.
fn publish(
    galaxy: &MirrorServer,
    dist: &MirrorServer,
    name: &str,
    tarball: &[u8],
    deps: serde_json::Value,
) {
    let at = "/galaxy/api/v3/collections/acme";
    let href = format!("/galaxy/api/v3/collections/acme/{name}/versions/1.0.0/");
    let created = "2024-01-01T00:00:00.000000Z";
    galaxy.put(
        &format!("{at}/{name}/"),
        serde_json::json!({"namespace": "acme", "name": name, "href": format!("/galaxy/api/v3/collections/acme/{name}/"),
            "versions_url": format!("/galaxy/api/v3/collections/acme/{name}/versions/"),
            "highest_version": {"href": href, "version": "1.0.0"},
            "created_at": created, "updated_at": created})
        .to_string(),
    );
    galaxy.put(
        &format!("{at}/{name}/versions/?limit=100"),
        serde_json::json!({"meta": {"count": 1},
            "links": {"first": format!("/galaxy/api/v3/collections/acme/{name}/versions/?limit=100&offset=0"),
                      "previous": null, "next": null,
                      "last": format!("/galaxy/api/v3/collections/acme/{name}/versions/?limit=100&offset=0")},
            "data": [{"version": "1.0.0", "href": href, "created_at": created, "updated_at": created,
                      "requires_ansible": null, "marks": []}]})
        .to_string(),
    );
    galaxy.put(
        &format!("{at}/{name}/versions/1.0.0/"),
        serde_json::json!({"version": "1.0.0", "href": href,
            "namespace": {"name": "acme"}, "collection": {"name": name},
            "download_url": dist.url(&format!("/dl/acme-{name}-1.0.0.tar.gz")),
            "artifact": {"filename": format!("acme-{name}-1.0.0.tar.gz"),
                         "sha256": sha256_hex(tarball), "size": tarball.len()},
            "metadata": {"dependencies": deps}, "signatures": [],
            "created_at": created, "updated_at": created})
        .to_string(),
    );
}

fn install(w: &Path, round: &str, server: &str) -> String {
    run(Command::new("ansible-galaxy")
        .args(["collection", "install", "acme.web", "-s", server, "-p"])
        .arg(w.join(format!("collections-{round}")))
        .env("HOME", w.join(format!("home-{round}")))
        .env_remove("ANSIBLE_CONFIG"))
}

fn assert_installed(w: &Path, round: &str, said: &str) {
    let root = w.join(format!("collections-{round}/ansible_collections/acme"));
    for name in ["web", "base"] {
        let module = root.join(format!("{name}/plugins/modules/{name}.py"));
        assert!(module.exists(), "{name}: {said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ansible_galaxy_installs_a_collection_and_its_dependency_past_a_tampered_host_then_offline()
{
    let Some(version) = client("ansible-galaxy", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (web, base) = tokio::task::block_in_place(|| {
        (
            build(w, "web", r#"{"acme.base": ">=1.0.0"}"#),
            build(w, "base", "{}"),
        )
    });
    let (galaxy, tampering, dist) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    galaxy.put(
        "/galaxy/api/",
        r#"{"available_versions":{"v1":"v1/","v3":"v3/"},"current_version":"v1"}"#,
    );
    publish(
        &galaxy,
        &tampering,
        "web",
        &web,
        serde_json::json!({"acme.base": ">=1.0.0"}),
    );
    publish(&galaxy, &tampering, "base", &base, serde_json::json!({}));
    tampering.put("/dl/acme-web-1.0.0.tar.gz", web.clone());
    tampering.put("/dl/acme-base-1.0.0.tar.gz", tampered(&base));
    dist.put("/dl/acme-web-1.0.0.tar.gz", web.clone());
    dist.put("/dl/acme-base-1.0.0.tar.gz", base.clone());
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"ansible\"\nkind = \"galaxy\"\nmirrors = [\"{}\"]\nfiles = {}\nstrategy = \"single\"\n",
        galaxy.url("/galaxy"),
        crate::support::toml_urls(&[&tampering, &dist], "/dl")
    ))
    .await;
    let server = proxy.url("/ansible/");
    let upstream = || galaxy.total() + tampering.total() + dist.total();

    let said = tokio::task::block_in_place(|| install(w, "cold", &server));
    assert_installed(w, "cold", &said);
    assert_eq!(dist.hits("/dl/acme-base-1.0.0.tar.gz"), 1);
    assert_eq!(dist.hits("/dl/acme-web-1.0.0.tar.gz"), 0);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    proxy.settle().await;
    let cold = upstream();

    galaxy.stop();
    tampering.stop();
    dist.stop();
    let said = tokio::task::block_in_place(|| install(w, "offline", &server));
    assert_installed(w, "offline", &said);
    assert_eq!(upstream(), cold);
    report("ansible-galaxy", &version, cold, upstream() - cold);
    proxy.stop().await;
}
