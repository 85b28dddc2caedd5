//! ansible-galaxy (Debian's ansible-core 2.14) through a `galaxy` remote,
//! against a fixture Galaxy on 127.0.0.1 answering what ansible/ansible's
//! `lib/ansible/galaxy/api.py` (2.14) asks for (`g_connect`: the server's root, then
//! `api/` for `available_versions`; `get_collection_metadata`,
//! `get_collection_versions` with `?limit=100`,
//! `get_collection_version_metadata` for `download_url`,
//! `artifact.sha256` and `metadata.dependencies`) and
//! `lib/ansible/galaxy/collection/concrete_artifact_manager.py` (`_download_file`:
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

/// `ansible-galaxy collection install acme.web` from `server`, in a home
/// and a collections path of its own for `round`.
fn install_command(w: &Path, round: &str, server: &str) -> Command {
    let mut cmd = Command::new("ansible-galaxy");
    cmd.args(["collection", "install", "acme.web", "-s", server, "-p"])
        .arg(w.join(format!("collections-{round}")))
        .env("HOME", w.join(format!("home-{round}")))
        .env_remove("ANSIBLE_CONFIG");
    cmd
}

fn install(w: &Path, round: &str, server: &str) -> String {
    run(&mut install_command(w, round, server))
}

fn assert_installed(w: &Path, round: &str, said: &str) {
    let root = w.join(format!("collections-{round}/ansible_collections/acme"));
    for name in ["web", "base"] {
        let module = root.join(format!("{name}/plugins/modules/{name}.py"));
        assert!(module.exists(), "{name}: {said}");
    }
}

/// The fixture Galaxy and its two dist hosts (the first tampering with
/// acme.base's tarball), and the `[[remote]]` in front of them.
struct Origins {
    galaxy: MirrorServer,
    tampering: MirrorServer,
    dist: MirrorServer,
}

impl Origins {
    async fn start(w: &Path) -> Origins {
        let (web, base) = tokio::task::block_in_place(|| {
            (
                build(w, "web", r#"{"acme.base": ">=1.0.0"}"#),
                build(w, "base", "{}"),
            )
        });
        let origins = Origins {
            galaxy: MirrorServer::start().await,
            tampering: MirrorServer::start().await,
            dist: MirrorServer::start().await,
        };
        let Origins {
            galaxy,
            tampering,
            dist,
        } = &origins;
        galaxy.put(
            "/galaxy/api/",
            r#"{"available_versions":{"v1":"v1/","v3":"v3/"},"current_version":"v1"}"#,
        );
        let web_deps = serde_json::json!({"acme.base": ">=1.0.0"});
        publish(galaxy, tampering, "web", &web, web_deps);
        publish(galaxy, tampering, "base", &base, serde_json::json!({}));
        tampering.put("/dl/acme-web-1.0.0.tar.gz", web.clone());
        tampering.put("/dl/acme-base-1.0.0.tar.gz", tampered(&base));
        dist.put("/dl/acme-web-1.0.0.tar.gz", web);
        dist.put("/dl/acme-base-1.0.0.tar.gz", base);
        origins
    }

    async fn proxy(&self, extra: &str) -> TestProxy {
        TestProxy::start(&format!(
            "[[remote]]\nname = \"ansible\"\nkind = \"galaxy\"\nmirrors = [\"{}\"]\nfiles = {}\nstrategy = \"single\"\n{extra}",
            self.galaxy.url("/galaxy"),
            crate::support::toml_urls(&[&self.tampering, &self.dist], "/dl")
        ))
        .await
    }

    fn upstream(&self) -> usize {
        self.galaxy.total() + self.tampering.total() + self.dist.total()
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
    let origins = Origins::start(w).await;
    let proxy = origins.proxy("").await;
    let server = proxy.url("/ansible/");

    let said = tokio::task::block_in_place(|| install(w, "cold", &server));
    assert_installed(w, "cold", &said);
    assert_eq!(origins.dist.hits("/dl/acme-base-1.0.0.tar.gz"), 1);
    assert_eq!(origins.dist.hits("/dl/acme-web-1.0.0.tar.gz"), 0);
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    proxy.settle().await;
    let cold = origins.upstream();

    origins.galaxy.stop();
    origins.tampering.stop();
    origins.dist.stop();
    let said = tokio::task::block_in_place(|| install(w, "offline", &server));
    assert_installed(w, "offline", &said);
    assert_eq!(origins.upstream(), cold);
    report("ansible-galaxy", &version, cold, origins.upstream() - cold);
    proxy.stop().await;
}

/// A dependency the remote's `deny` refuses: the install stops, and
/// `ansible-galaxy` prints the proxy's reason (Galaxy's error JSON).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ansible_galaxy_prints_why_a_denied_dependency_is_refused() {
    if client("ansible-galaxy", "--version").is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let origins = Origins::start(w).await;
    let proxy = origins.proxy("deny = [\"acme.base\"]\n").await;
    let server = proxy.url("/ansible/");
    let out =
        tokio::task::block_in_place(|| install_command(w, "denied", &server).output().unwrap());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("acme.base") && said.contains("refused by this proxy"),
        "{said}"
    );
    let shown = said
        .lines()
        .find(|l| l.contains("refused"))
        .unwrap_or_default();
    println!("GUARD-REFUSED ansible-galaxy: {shown}");
    assert_eq!(origins.dist.total() + origins.tampering.total(), 0);
    proxy.stop().await;
}
