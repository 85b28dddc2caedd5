//! mvn (and Gradle) through a `maven` remote, against two fixture
//! repositories on 127.0.0.1 that look like Maven Central: built from
//! Debian's plugin packages under `/usr/share/maven-repo` by
//! `maven/make_fixture.py` (every file with its `.sha1` and `.md5`,
//! `maven-metadata.xml` per artifact), the first with a tampered
//! commons-lang3 jar whose sidecar still declares the real digest. mvn
//! builds a one-class project (a dependency, a JUnit test, the jar), then
//! again with both origins stopped; a remote with a cooldown refuses a
//! young dependency, and mvn prints why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use crate::support::{available, sha256_hex, tampered, MirrorServer, TestProxy};
use crate::{client, report, write};

pub(crate) const LANG3_JAR: &str =
    "org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar";
pub(crate) const LANG3_POM: &str =
    "org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.pom";

/// The fixture repository, built once per test into `dir`; `None` (after a
/// loud skip) when Debian's plugin packages are missing.
pub(crate) fn fixture(dir: &Path) -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/maven/make_fixture.py");
    let repo = dir.join("repo");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&repo)
        .output()
        .unwrap();
    let ok = out.status.success();
    if !available(
        "Debian's maven plugin packages (installed by .ci/tools.sh)",
        ok,
    ) {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(repo)
}

/// Every file of the fixture served at `/m/…`.
pub(crate) fn serve(mirror: &MirrorServer, repo: &Path) {
    for entry in crate::files_below(repo) {
        let relative = entry
            .strip_prefix(repo)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        mirror.put(&format!("/m/{relative}"), std::fs::read(&entry).unwrap());
    }
}

pub(crate) fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"maven\"\nkind = \"maven\"\nmirrors = {}\nstrategy = \"single\"\n{extra}\n",
        crate::support::toml_urls(mirrors, "/m")
    )
}

/// A copy of the project and a settings.xml whose `*` mirror is the proxy;
/// returns (project, settings, local repository).
pub(crate) fn workspace(w: &Path, n: usize, proxy_url: &str) -> (PathBuf, PathBuf, PathBuf) {
    let project = w.join(format!("project{n}"));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/maven/project");
    for file in crate::files_below(&source) {
        let to = project.join(file.strip_prefix(&source).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&file, &to).unwrap();
    }
    let local = w.join(format!("m2-{n}"));
    let settings = w.join(format!("settings{n}.xml"));
    write(
        &settings,
        &format!(
            "<settings><localRepository>{}</localRepository><mirrors><mirror><id>proxy</id>\
             <mirrorOf>*</mirrorOf><url>{proxy_url}</url></mirror></mirrors></settings>",
            local.display()
        ),
    );
    (project, settings, local)
}

pub(crate) fn mvn(
    w: &Path,
    n: usize,
    project: &Path,
    settings: &Path,
    local: &Path,
) -> std::process::Output {
    let home = w.join(format!("home{n}"));
    std::fs::create_dir_all(&home).unwrap();
    Command::new("mvn")
        .args(["-B", "-s"])
        .arg(settings)
        .arg(format!("-Dmaven.repo.local={}", local.display()))
        .arg("package")
        .current_dir(project)
        .env("HOME", &home)
        .env("MAVEN_OPTS", format!("-Duser.home={}", home.display()))
        .output()
        .unwrap()
}

pub(crate) fn assert_built(out: &std::process::Output, project: &Path) {
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mvn failed:\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("BUILD SUCCESS"), "{said}");
    assert!(project.join("target/fixture-app-1.0.jar").exists());
}

/// Serves commons-lang3 `version` beside the fixture's 3.12.0 (the same
/// jar, its pom restated), with sidecars, and the artifact's
/// `maven-metadata.xml` listing both.
pub(crate) fn publish_next_lang3(mirror: &MirrorServer, repo: &Path, version: &str) {
    use sha1::Digest;
    let dir = "org/apache/commons/commons-lang3";
    let put = |path: String, bytes: Vec<u8>| {
        let sha1 = hex::encode(sha1::Sha1::digest(&bytes));
        let md5 = hex::encode(md5::Md5::digest(&bytes));
        mirror.put(&format!("/m/{path}.sha1"), sha1);
        mirror.put(&format!("/m/{path}.md5"), md5);
        mirror.put(&format!("/m/{path}"), bytes);
    };
    let jar = std::fs::read(repo.join(LANG3_JAR)).unwrap();
    let pom = std::fs::read_to_string(repo.join(LANG3_POM)).unwrap();
    let pom = pom.replacen(
        "<version>3.12.0</version>",
        &format!("<version>{version}</version>"),
        1,
    );
    put(format!("{dir}/{version}/commons-lang3-{version}.jar"), jar);
    put(
        format!("{dir}/{version}/commons-lang3-{version}.pom"),
        pom.into_bytes(),
    );
    let metadata = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metadata><groupId>org.apache.commons</groupId>\
         <artifactId>commons-lang3</artifactId><versioning><latest>{version}</latest><release>{version}</release>\
         <versions><version>3.12.0</version><version>{version}</version></versions>\
         <lastUpdated>20250908120000</lastUpdated></versioning></metadata>\n"
    );
    put(format!("{dir}/maven-metadata.xml"), metadata.into_bytes());
}

/// The project's commons-lang3 dependency at `version` (or a range).
pub(crate) fn set_lang3_version(project: &Path, version: &str) {
    let pom = std::fs::read_to_string(project.join("pom.xml")).unwrap();
    let pom = pom.replacen(
        "<artifactId>commons-lang3</artifactId>\n      <version>3.12.0</version>",
        &format!("<artifactId>commons-lang3</artifactId>\n      <version>{version}</version>"),
        1,
    );
    assert!(pom.contains(version));
    write(&project.join("pom.xml"), &pom);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mvn_builds_through_the_proxy_past_a_tampered_mirror_then_from_the_cache_alone() {
    let Some(mvn_version) = client("mvn", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let Some(repo) = fixture(w) else {
        return;
    };
    let (tampering, central) = (MirrorServer::start().await, MirrorServer::start().await);
    serve(&tampering, &repo);
    serve(&central, &repo);
    let good = std::fs::read(repo.join(LANG3_JAR)).unwrap();
    // Same name, other bytes; the sidecar beside it still declares the real digest.
    tampering.put(&format!("/m/{LANG3_JAR}"), tampered(&good));
    let proxy = TestProxy::start(&remote(&[&tampering, &central], "")).await;
    let url = proxy.url("/maven/");

    let (project, settings, local) = workspace(w, 1, &url);
    let out = tokio::task::block_in_place(|| mvn(w, 1, &project, &settings, &local));
    assert_built(&out, &project);
    let got = std::fs::read(local.join(LANG3_JAR)).unwrap();
    assert_eq!(sha256_hex(&got), sha256_hex(&good));
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    let first = tampering.total() + central.total();

    // Every origin stopped, a fresh local repository: all from the cache.
    tampering.stop();
    central.stop();
    let (project, settings, local) = workspace(w, 2, &url);
    let out = tokio::task::block_in_place(|| mvn(w, 2, &project, &settings, &local));
    assert_built(&out, &project);
    let second = tampering.total() + central.total() - first;
    assert_eq!(second, 0);
    assert_eq!(
        sha256_hex(&std::fs::read(local.join(LANG3_JAR)).unwrap()),
        sha256_hex(&good)
    );
    report("mvn", &mvn_version, first, second);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mvn_is_told_why_a_young_release_is_refused() {
    let Some(_) = client("mvn", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let Some(repo) = fixture(w) else {
        return;
    };
    let origin = MirrorServer::start().await;
    serve(&origin, &repo);
    // commons-lang3 3.12.0 "published" just now; everything else in 2015.
    let pom = std::fs::read(repo.join(LANG3_POM)).unwrap();
    origin.put_dated(&format!("/m/{LANG3_POM}"), pom, SystemTime::now());
    let proxy = TestProxy::start(&remote(&[&origin], "min_release_age = \"7d\"")).await;
    let (project, settings, local) = workspace(w, 1, &proxy.url("/maven/"));
    let out = tokio::task::block_in_place(|| mvn(w, 1, &project, &settings, &local));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    let line = said
        .lines()
        .find(|l| l.contains("min_release_age"))
        .unwrap_or_else(|| panic!("mvn does not show the reason:\n{said}"));
    assert!(
        line.contains("403") && line.contains("commons-lang3@3.12.0"),
        "{line}"
    );
    println!("REFUSED mvn: {line}");
    assert_eq!(origin.hits(&format!("/m/{LANG3_JAR}")), 0);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gradle_resolves_the_same_dependencies_then_from_the_cache_alone() {
    let Some(gradle_version) = client("gradle", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let Some(repo) = fixture(w) else {
        return;
    };
    let origin = MirrorServer::start().await;
    serve(&origin, &repo);
    let proxy = TestProxy::start(&remote(&[&origin], "")).await;
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/maven");
    let round = |n: usize| {
        let project = w.join(format!("gradle{n}"));
        for dir in ["gradle-project", "project"] {
            for file in crate::files_below(&source.join(dir)) {
                let relative = file.strip_prefix(source.join(dir)).unwrap();
                if relative.starts_with("pom.xml") {
                    continue;
                }
                let to = project.join(relative);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(&file, &to).unwrap();
            }
        }
        let build = std::fs::read_to_string(project.join("build.gradle")).unwrap();
        let url = proxy.url("/maven/");
        let build = build.replace(
            "\"http://127.0.0.1:${System.getenv(\"FIXTURE_PORT\") ?: \"8080\"}/maven/\"",
            &format!("\"{url}\""),
        );
        write(&project.join("build.gradle"), &build);
        let home = w.join(format!("gradle-home{n}"));
        crate::run(
            Command::new("gradle")
                .args(["--no-daemon", "-q", "build"])
                .arg(format!("--gradle-user-home={}", home.display()))
                .current_dir(&project)
                .env("HOME", &home),
        );
        assert!(project.join("build/libs/fixture-app.jar").exists());
    };
    tokio::task::block_in_place(|| round(1));
    let first = origin.total();
    origin.stop();
    tokio::task::block_in_place(|| round(2));
    let second = origin.total() - first;
    assert_eq!(second, 0);
    report("gradle", &gradle_version, first, second);
    proxy.stop().await;
}
