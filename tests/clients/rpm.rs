//! dnf (Debian's 4.14) installs through an `rpm` remote into a throwaway
//! `--installroot`, from a repository built at test time with rpmbuild and
//! createrepo_c: the first mirror sends a tampered package (refused by the
//! digest `primary.xml` declares, the next mirror asked), a regenerated
//! repository is picked up once `revalidate_after` has passed, and with both
//! origins stopped a fresh installroot installs from the cache alone; a
//! repository whose packages sit on a second host (`xml:base`) installs
//! through the proxy's `files` mirrors.

use std::path::Path;
use std::process::Command;

use crate::support::proxy::get;
use crate::support::{available, tampered, wait_until, MirrorServer, TestProxy};
use crate::{client, files_below, report, run, write};

const HELLO: &str = "Packages/mc-hello-1.0-1.noarch.rpm";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dnf_installs_through_the_proxy_then_from_the_cache_alone() {
    let Some(dnf) = rpm_tools() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let repo = w.join("repo");
    build_rpm(w, "mc-hello", "1.0", &repo.join("Packages"));
    createrepo(&repo);
    let (bad, origin) = (MirrorServer::start().await, MirrorServer::start().await);
    let serve = |with_tampered_hello: bool| {
        serve_tree(&origin, &repo, false);
        serve_tree(&bad, &repo, with_tampered_hello);
    };
    serve(true);
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"el\"\nkind = \"rpm\"\nmirrors = [\"{}\", \"{}\"]\nstrategy = \"single\"\nrevalidate_after = \"1s\"\n",
        bad.url("/el"),
        origin.url("/el")
    ))
    .await;
    let total = || bad.total() + origin.total();

    // Round 1: the tampered package on the first mirror is refused.
    let r1 = w.join("round1");
    tokio::task::block_in_place(|| dnf_install(&r1, &proxy, &["mc-hello"]));
    assert_installed(&r1, "mc-hello");
    let first = total();
    let hello = format!("/el/{HELLO}");
    assert_eq!((bad.hits(&hello), origin.hits(&hello)), (1, 1));
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);

    // The upstream regenerates the repository with a new package: the new
    // repomd.xml is served once `revalidate_after` has passed.
    build_rpm(w, "mc-new", "2.0", &repo.join("Packages"));
    createrepo(&repo);
    serve(true);
    let repomd = std::fs::read(repo.join("repodata/repomd.xml")).unwrap();
    let client = reqwest::Client::new();
    wait_until("the regenerated repomd.xml served", async || {
        let (_, _, body) = get(&client, &proxy.url("/el/repodata/repomd.xml")).await;
        body.is_ok_and(|b| b == repomd)
    })
    .await;
    let r2 = w.join("round2");
    tokio::task::block_in_place(|| dnf_install(&r2, &proxy, &["mc-new"]));
    assert_installed(&r2, "mc-new");
    proxy.settle().await;
    let cold = total();

    // Both origins stopped: a fresh installroot installs both from the cache.
    bad.stop();
    origin.stop();
    let r3 = w.join("round3");
    tokio::task::block_in_place(|| dnf_install(&r3, &proxy, &["mc-hello", "mc-new"]));
    assert_installed(&r3, "mc-hello");
    assert_installed(&r3, "mc-new");
    let warm = total() - cold;
    assert_eq!(warm, 0);
    println!("dnf round 1 upstream requests {first}, with the regeneration {cold}");
    report("dnf", &dnf, cold, warm);
    proxy.stop().await;
}

/// A repository whose packages sit on a second host (`createrepo_c
/// --baseurl`: every `<location xml:base=…>` names it): dnf fetches them at
/// the relocated address through the proxy, and with both hosts stopped a
/// fresh installroot installs from the cache alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dnf_installs_packages_on_an_xml_base_host_through_the_proxy() {
    let Some(dnf) = rpm_tools() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let repo = w.join("repo");
    build_rpm(w, "mc-far", "1.0", &repo.join("Packages"));
    let (origin, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let _ = std::fs::remove_dir_all(repo.join("repodata"));
    run(Command::new("createrepo_c")
        .arg("-q")
        .arg("--baseurl")
        .arg(files.url("/pkgs/"))
        .arg(&repo));
    for file in files_below(&repo) {
        let rel = file
            .strip_prefix(&repo)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let bytes = std::fs::read(&file).unwrap();
        match rel.starts_with("repodata/") {
            true => origin.put(&format!("/el/{rel}"), bytes),
            false => files.put(&format!("/pkgs/{rel}"), bytes),
        }
    }
    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"el\"\nkind = \"rpm\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n",
        origin.url("/el"),
        files.url("/pkgs")
    ))
    .await;
    let r1 = w.join("round1");
    tokio::task::block_in_place(|| dnf_install(&r1, &proxy, &["mc-far"]));
    assert_installed(&r1, "mc-far");
    let package = "/pkgs/Packages/mc-far-1.0-1.noarch.rpm";
    assert_eq!(files.hits(package), 1);
    proxy.settle().await;
    let cold = origin.total() + files.total();

    // Both hosts stopped: only the proxy's copy can serve it.
    origin.stop();
    files.stop();
    let r2 = w.join("round2");
    tokio::task::block_in_place(|| dnf_install(&r2, &proxy, &["mc-far"]));
    assert_installed(&r2, "mc-far");
    let warm = origin.total() + files.total() - cold;
    assert_eq!(warm, 0);
    report("dnf (xml:base on a files host)", &dnf, cold, warm);
    proxy.stop().await;
}

/// dnf's version, or `None` after a loud skip when dnf, rpmbuild or
/// createrepo_c is missing, or this is not root (an installroot needs it).
fn rpm_tools() -> Option<String> {
    let dnf = client("dnf", "--version")?;
    client("rpmbuild", "--version")?;
    client("createrepo_c", "--version")?;
    let uid = Command::new("id").arg("-u").output().ok()?;
    let root = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    available("root (dnf --installroot)", root).then_some(dnf)
}

/// A noarch package `name`-`version`-1 with one file, into `out`.
fn build_rpm(w: &Path, name: &str, version: &str, out: &Path) {
    let spec = w.join(format!("{name}.spec"));
    write(
        &spec,
        &format!(
            "Name: {name}\nVersion: {version}\nRelease: 1\nSummary: mirrorcache test package\nLicense: MIT\nBuildArch: noarch\n%description\nmirrorcache test package\n%install\nmkdir -p %{{buildroot}}/usr/share/{name}\necho {name} > %{{buildroot}}/usr/share/{name}/README\n%files\n/usr/share/{name}/README\n"
        ),
    );
    let top = w.join("rpmbuild");
    run(Command::new("rpmbuild")
        .arg("-bb")
        .arg("--define")
        .arg(format!("_topdir {}", top.display()))
        .arg("--define")
        .arg(format!("_tmppath {}", w.join("tmp").display()))
        .args(["--define", "__os_install_post %{nil}"])
        .args(["--define", "_build_id_links none"])
        .arg(&spec));
    std::fs::create_dir_all(out).unwrap();
    let file = format!("{name}-{version}-1.noarch.rpm");
    std::fs::copy(top.join("RPMS/noarch").join(&file), out.join(&file)).unwrap();
}

/// (Re)generates `repo/repodata`, as an upstream does after a publish.
fn createrepo(repo: &Path) {
    let _ = std::fs::remove_dir_all(repo.join("repodata"));
    run(Command::new("createrepo_c").arg("-q").arg(repo));
}

/// Puts every file below `repo` on `mirror` under `/el/`; mc-hello's
/// package with other bytes when `tampered_hello`.
fn serve_tree(mirror: &MirrorServer, repo: &Path, tampered_hello: bool) {
    for file in files_below(repo) {
        let rel = file
            .strip_prefix(repo)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let bytes = std::fs::read(&file).unwrap();
        let bytes = if tampered_hello && rel == HELLO {
            tampered(&bytes)
        } else {
            bytes
        };
        mirror.put(&format!("/el/{rel}"), bytes);
    }
}

/// `dnf install` in a fresh installroot below `root`, everything it writes
/// (config, cache, logs, rpmdb) kept inside it; the proxy's `el` remote
/// the only repository.
fn dnf_install(root: &Path, proxy: &TestProxy, packages: &[&str]) {
    write(
        &root.join("repos/mc.repo"),
        &format!(
            "[mc]\nname=mc\nbaseurl={}\ngpgcheck=0\nrepo_gpgcheck=0\nmetadata_expire=0\n",
            proxy.url("/el/")
        ),
    );
    write(&root.join("dnf.conf"), "[main]\nplugins=0\n");
    std::fs::create_dir_all(root.join("log")).unwrap();
    let opt = |key: &str, dir: &str| format!("--setopt={key}={}", root.join(dir).display());
    run(Command::new("dnf")
        .args(["-y", "--releasever=1", "--disableplugin=*", "--nogpgcheck"])
        .arg(format!("--config={}", root.join("dnf.conf").display()))
        .arg(format!("--installroot={}", root.join("ir").display()))
        .arg(opt("reposdir", "repos"))
        .arg(opt("cachedir", "cache"))
        .arg(opt("logdir", "log"))
        .arg(opt("persistdir", "persist"))
        .args(["--setopt=install_weak_deps=0", "install"])
        .args(packages));
}

fn assert_installed(root: &Path, name: &str) {
    let readme = root.join(format!("ir/usr/share/{name}/README"));
    let text =
        std::fs::read_to_string(&readme).unwrap_or_else(|e| panic!("{}: {e}", readme.display()));
    assert_eq!(text.trim(), name);
}
