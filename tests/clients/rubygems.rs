//! gem and bundle (Debian's ruby 3.1: gem 3.3, bundler 2.3) through a
//! `rubygems` remote, against two fixture gem servers on 127.0.0.1 built on
//! the spot: two tiny gems (`mc-beta` depends on `mc-alpha`) made with `gem
//! build`, the full index and quick gemspecs with `gem generate_index`, and
//! the compact index (`versions`, `info/<gem>`, `names`) written here in
//! rubygems.org's format. The first server sends a tampered `mc-alpha`
//! whose `info` still declares the real checksum. Each client installs
//! through the proxy, then with both origins stopped; Bundler, after the
//! fixture appends `mc-alpha 1.1.0`, fetches only the new end of
//! `versions` with a `Range` request and installs it.

use std::path::{Path, PathBuf};
use std::process::Command;

use md5::Digest as _;

use crate::support::{sha256_hex, tampered, MirrorServer, TestProxy};
use crate::{client, report, run, write};

const ALPHA_1: &str = "/r/gems/mc-alpha-1.0.0.gem";

/// A gem built with `gem build` from a gemspec written here.
fn build_gem(w: &Path, name: &str, version: &str, deps: &[(&str, &str)]) -> PathBuf {
    let dir = w.join(format!("src/{name}-{version}"));
    let lib = name.replace('-', "_");
    write(
        &dir.join(format!("lib/{lib}.rb")),
        &format!("module McFixture; {lib:?}; end\n"),
    );
    let mut spec = format!(
        "Gem::Specification.new do |s|\n  s.name = {name:?}\n  s.version = {version:?}\n  \
         s.summary = \"mirrorcache fixture\"\n  s.authors = [\"mirrorcache\"]\n  \
         s.license = \"MIT\"\n  s.files = [\"lib/{lib}.rb\"]\n"
    );
    for (dep, requirement) in deps {
        spec.push_str(&format!(
            "  s.add_runtime_dependency {dep:?}, {requirement:?}\n"
        ));
    }
    spec.push_str("end\n");
    write(&dir.join(format!("{name}.gemspec")), &spec);
    run(Command::new("gem")
        .args(["build", &format!("{name}.gemspec")])
        .current_dir(&dir)
        .env("HOME", w));
    dir.join(format!("{name}-{version}.gem"))
}

/// The fixture repository: gems, full index, quick gemspecs (`gem
/// generate_index`) and the compact index for `gems` (name, version, deps).
struct Repo {
    dir: PathBuf,
    /// Each gem's `info` lines, in publishing order.
    info: Vec<(String, Vec<String>)>,
    versions: String,
}

impl Repo {
    fn new(w: &Path) -> Repo {
        let dir = w.join("repo");
        std::fs::create_dir_all(dir.join("gems")).unwrap();
        Repo {
            dir,
            info: Vec::new(),
            versions: "created_at: 2024-01-01T00:00:00Z\n---\n".to_string(),
        }
    }

    /// Builds and publishes one version (appending to `versions` as
    /// rubygems.org does), then regenerates the full index.
    fn publish(&mut self, w: &Path, name: &str, version: &str, deps: &[(&str, &str)]) {
        let gem = build_gem(w, name, version, deps);
        let bytes = std::fs::read(&gem).unwrap();
        std::fs::write(self.dir.join(format!("gems/{name}-{version}.gem")), &bytes).unwrap();
        let deps: Vec<String> = deps.iter().map(|(d, r)| format!("{d}:{r}")).collect();
        let line = format!(
            "{version} {}|checksum:{},ruby:>= 0",
            deps.join(","),
            sha256_hex(&bytes)
        );
        match self.info.iter_mut().find(|(n, _)| n == name) {
            Some((_, lines)) => lines.push(line),
            None => self.info.push((name.to_string(), vec![line])),
        }
        let md5 = hex::encode(md5::Md5::digest(self.info_file(name).as_bytes()));
        self.versions.push_str(&format!("{name} {version} {md5}\n"));
        run(Command::new("gem")
            .args(["generate_index", "--directory"])
            .arg(&self.dir)
            .env("HOME", w));
    }

    fn info_file(&self, name: &str) -> String {
        let (_, lines) = self.info.iter().find(|(n, _)| n == name).unwrap();
        format!("---\n{}\n", lines.join("\n"))
    }

    /// Every file at `/r/…` on `mirror`.
    fn serve(&self, mirror: &MirrorServer) {
        for file in walk(&self.dir) {
            let relative = file.strip_prefix(&self.dir).unwrap().to_str().unwrap();
            mirror.put(&format!("/r/{relative}"), std::fs::read(&file).unwrap());
        }
        let mut names = String::from("---\n");
        for (name, _) in &self.info {
            mirror.put(&format!("/r/info/{name}"), self.info_file(name));
            names.push_str(&format!("{name}\n"));
        }
        mirror.put("/r/names", names);
        mirror.put("/r/versions", self.versions.clone());
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Two origins serving the fixture, the first with a tampered `mc-alpha`.
async fn origins(repo: &Repo) -> (MirrorServer, MirrorServer) {
    let (tampering, origin) = (MirrorServer::start().await, MirrorServer::start().await);
    repo.serve(&tampering);
    repo.serve(&origin);
    let good = std::fs::read(repo.dir.join("gems/mc-alpha-1.0.0.gem")).unwrap();
    tampering.put(ALPHA_1, tampered(&good));
    (tampering, origin)
}

fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"gems\"\nkind = \"rubygems\"\nmirrors = {}\nstrategy = \"single\"\n{extra}\n",
        crate::support::toml_urls(mirrors, "/r")
    )
}

fn fixture(w: &Path) -> Repo {
    let mut repo = Repo::new(w);
    repo.publish(w, "mc-alpha", "1.0.0", &[]);
    repo.publish(w, "mc-beta", "1.0.0", &[("mc-alpha", ">= 1.0")]);
    repo
}

fn gem_install(home: &Path, source: &str) -> String {
    run(Command::new("gem")
        .args([
            "install",
            "--clear-sources",
            "--source",
            source,
            "--no-document",
        ])
        .arg("--install-dir")
        .arg(home.join("gems"))
        .arg("mc-beta")
        .env("HOME", home)
        .env("GEM_HOME", home.join("gems"))
        .env("GEM_SPEC_CACHE", home.join("specs")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gem_installs_past_a_tampered_mirror_then_from_the_cache_alone() {
    let Some(version) = client("gem", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let repo = fixture(w);
    let (tampering, origin) = origins(&repo).await;
    let proxy = TestProxy::start(&remote(&[&tampering, &origin], "")).await;
    let source = proxy.url("/gems/");
    let good = std::fs::read(repo.dir.join("gems/mc-alpha-1.0.0.gem")).unwrap();

    let home = w.join("gem-home1");
    let said = tokio::task::block_in_place(|| gem_install(&home, &source));
    assert!(said.contains("mc-beta-1.0.0"), "{said}");
    let cached = home.join("gems/cache/mc-alpha-1.0.0.gem");
    assert_eq!(
        sha256_hex(&std::fs::read(cached).unwrap()),
        sha256_hex(&good)
    );
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    // The compact index was used (gem's probe of the root answered 200).
    assert!(tampering.hits("/r/info/mc-beta") >= 1);
    let first = tampering.total() + origin.total();

    tampering.stop();
    origin.stop();
    let home = w.join("gem-home2");
    let said = tokio::task::block_in_place(|| gem_install(&home, &source));
    assert!(said.contains("mc-beta-1.0.0"), "{said}");
    let second = tampering.total() + origin.total() - first;
    assert_eq!(second, 0);
    report("gem", &version, first, second);
    proxy.stop().await;
}

/// A project requiring `gems` from `source`, installed with `bundle install
/// --verbose` in `home`; returns Bundler's output.
fn bundle_install(w: &Path, n: usize, home: &Path, source: &str, gems: &str) -> String {
    let project = w.join(format!("project{n}"));
    write(
        &project.join("Gemfile"),
        &format!("source {source:?}\n{gems}"),
    );
    run(Command::new("bundle")
        .args(["install", "--verbose"])
        .current_dir(&project)
        .env("HOME", home)
        .env("BUNDLE_USER_HOME", home.join(".bundle"))
        .env("BUNDLE_PATH", project.join("vendor"))
        .env("BUNDLE_APP_CONFIG", project.join(".bundle"))
        .env("GEM_HOME", home.join("gems")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundle_installs_appends_by_range_then_installs_from_the_cache_alone() {
    let Some(version) = client("bundle", "--version") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let mut repo = fixture(w);
    let (tampering, origin) = origins(&repo).await;
    // Revalidated on every request, so the appended version is seen at once.
    let proxy =
        TestProxy::start(&remote(&[&tampering, &origin], "revalidate_after = \"0s\"")).await;
    let source = proxy.url("/gems/");
    let home = w.join("bundle-home1");

    let said =
        tokio::task::block_in_place(|| bundle_install(w, 1, &home, &source, "gem \"mc-beta\"\n"));
    assert!(said.contains("Installing mc-alpha 1.0.0"), "{said}");
    assert!(said.contains("Bundle complete"), "{said}");
    // The compact index, not the dependency API.
    assert_eq!(tampering.hits("/r/api/v1/dependencies"), 0);
    assert!(tampering.hits("/r/info/mc-beta") >= 1);
    let first = tampering.total() + origin.total();

    // The fixture publishes mc-alpha 1.1.0: Bundler asks for the end of
    // its copy of `versions`, appends the 206 and checks the MD5 ETag.
    repo.publish(w, "mc-alpha", "1.1.0", &[]);
    repo.serve(&tampering);
    repo.serve(&origin);
    let said = tokio::task::block_in_place(|| {
        bundle_install(w, 2, &home, &source, "gem \"mc-alpha\", \">= 1.1\"\n")
    });
    assert!(said.contains("Installing mc-alpha 1.1.0"), "{said}");
    let partial = said
        .lines()
        .find(|l| l.contains("HTTP 206") && l.contains("versions"))
        .unwrap_or_else(|| panic!("no Range request for versions:\n{said}"));
    println!("RANGE bundle: {partial}");
    let appended = tampering.total() + origin.total() - first;

    // Every origin stopped, a fresh home: from the cache alone.
    tampering.stop();
    origin.stop();
    let before = tampering.total() + origin.total();
    let home = w.join("bundle-home2");
    let said =
        tokio::task::block_in_place(|| bundle_install(w, 3, &home, &source, "gem \"mc-beta\"\n"));
    assert!(said.contains("Bundle complete"), "{said}");
    let second = tampering.total() + origin.total() - before;
    assert_eq!(second, 0);
    println!("CLIENT-REPORT bundle append round: {appended} upstream requests");
    report("bundle", &version, first, second);
    proxy.stop().await;
}
