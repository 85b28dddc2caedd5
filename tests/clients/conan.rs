//! conan 2 (pinned in `.ci/tools.sh`, with conan-server, in a venv of their
//! own) through a `conan` remote, against two real `conan_server`s on
//! 127.0.0.1 (bottle's single-threaded wsgiref server, whose request log
//! counts the upstream requests). Three header-only recipes that need no
//! compiler (`libb` requires `liba`; `libbad` is denied) are created in a
//! throwaway home and uploaded to both servers; the first server's stored
//! `conanfile.py` of `liba` is then changed on its disk, as a compromised
//! mirror would serve it. What `conan install` asks for is read off the
//! servers' logs (conan 2.33, `rest_client_v2.py`): `v1/ping` for the
//! capabilities, each reference's `latest`, its revision's file list, then
//! `conanmanifest.txt` and `conanfile.py` at once; each package's `latest`,
//! its file list, then `conanmanifest.txt`, `conaninfo.txt` and
//! `conan_package.tgz`. `conan install` runs through the proxy cold, then in
//! a fresh home with both servers stopped; the denied reference's refusal
//! is printed by conan.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::support::{tampered, TestProxy};
use crate::{outcome, report, run, write};

const CONAN_VERSION: &str = "2.33.0";

/// Starts a conan_server at `home` with a user that may upload, on a port
/// of its own.
const SERVE: &str = r#"
import os, sys
from conans.server.conf.default_server_conf import default_server_conf
home, port = sys.argv[1], int(sys.argv[2])
os.makedirs(home, exist_ok=True)
conf = default_server_conf.format(jwt_secret="fixture-jwt", updown_secret="fixture-updown")
conf = conf.replace("[write_permissions]", "[write_permissions]\n*/*@*/*: demo")
with open(os.path.join(home, "server.conf"), "w") as f:
    f.write(conf)
from conans.server.launcher import ServerLauncher
ServerLauncher(server_dir=home).server.run(host="127.0.0.1", port=port)
"#;

/// A header-only recipe `name`/1.0 requiring `requires`.
fn recipe(name: &str, requires: Option<&str>) -> String {
    let requires = requires.map_or(String::new(), |r| format!("    requires = \"{r}\"\n"));
    format!(
        "from conan import ConanFile\nfrom conan.tools.files import save\nimport os\n\n\
         class Lib(ConanFile):\n    name = \"{name}\"\n    version = \"1.0\"\n    \
         package_type = \"header-library\"\n{requires}\n    def package(self):\n        \
         save(self, os.path.join(self.package_folder, \"include\", \"{name}.h\"), \"#define {name} 1\\n\")\n"
    )
}

/// Whether `port` answers `GET /v1/ping` as a conan_server does (with its
/// capabilities header).
fn is_conan_server(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    if stream
        .write_all(b"GET /v1/ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .to_ascii_lowercase()
        .contains("x-conan-server-capabilities")
}

/// A conan_server of the test's own; stopped (by its PID) when dropped.
struct ConanServer {
    child: Child,
    url: String,
    data: PathBuf,
    log: PathBuf,
    skip: usize,
}

impl ConanServer {
    fn start(python: &Path, w: &Path, name: &str) -> ConanServer {
        let home = w.join(name);
        let log = w.join(format!("{name}.log"));
        // A port found free may be taken by another test's server before
        // conan_server binds it (then it exits): ready only once the port
        // answers as a conan_server, a new port if the child exited.
        for _ in 0..5 {
            let port = crate::support::free_port();
            let mut child = Command::new(python)
                .arg(w.join("serve.py"))
                .arg(&home)
                .arg(port.to_string())
                .env("CONAN_SERVER_USERS", "demo:demo")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                if is_conan_server(port) {
                    return ConanServer {
                        child,
                        url: format!("http://127.0.0.1:{port}"),
                        data: home.join("data"),
                        log,
                        skip: 0,
                    };
                }
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "{name} did not start");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        panic!("{name} found no free port in 5 tries");
    }

    /// The requests it answered since the first `skip`, from wsgiref's log
    /// (`"GET /path HTTP/1.1" 200 …`).
    fn requests(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| l.split_once(" \"").map(|(_, r)| r))
            .filter_map(|r| r.split(' ').nth(1).map(str::to_string))
            .skip(self.skip)
            .collect()
    }

    fn hits(&self, path: &str) -> usize {
        self.requests().iter().filter(|p| *p == path).count()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ConanServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `conan` with the throwaway home `home` (a default profile, no conancenter).
fn conan(venv: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(venv.join("conan"));
    cmd.env("CONAN_HOME", home)
        .env("NO_COLOR", "1")
        .current_dir(home);
    cmd
}

/// A fresh home whose only remote `mc` is at `url`.
fn home(venv: &Path, w: &Path, name: &str, remotes: &[(&str, &str)]) -> PathBuf {
    let home = w.join(name);
    write(
        &home.join("profiles/default"),
        "[settings]\nos=Linux\narch=x86_64\nbuild_type=Release\n",
    );
    run(conan(venv, &home).args(["remote", "remove", "conancenter"]));
    for (name, url) in remotes {
        run(conan(venv, &home).args(["remote", "add", name, url]));
    }
    home
}

/// `conan install --requires=<reference> -r mc` in `home`.
fn install(venv: &Path, home: &Path, reference: &str) -> (bool, String) {
    outcome(conan(venv, home).args(["install", &format!("--requires={reference}"), "-r", "mc"]))
}

/// `liba`, `libb` (requiring it) and `libbad`, created in a throwaway home
/// and uploaded to each of `servers` (as the servers' user `demo`).
fn publish(venv: &Path, w: &Path, servers: &[&ConanServer]) {
    let remotes: Vec<(String, &str)> = servers
        .iter()
        .enumerate()
        .map(|(n, s)| (format!("s{n}"), s.url.as_str()))
        .collect();
    let named: Vec<(&str, &str)> = remotes.iter().map(|(n, u)| (n.as_str(), *u)).collect();
    let builder = home(venv, w, "builder", &named);
    for (name, requires) in [("liba", None), ("libb", Some("liba/1.0")), ("libbad", None)] {
        write(&w.join(name).join("conanfile.py"), &recipe(name, requires));
        run(conan(venv, &builder).arg("create").arg(w.join(name)));
    }
    for (remote, _) in &named {
        run(conan(venv, &builder)
            .env("CONAN_LOGIN_USERNAME", "demo")
            .env("CONAN_PASSWORD", "demo")
            .args(["upload", "*", "-r", remote, "-c"]));
    }
}

/// conan_servers named `names`, each with the packages [`publish`]ed, their
/// logs counting from there (what the uploads asked is not the proxy's).
fn published(python: &Path, w: &Path, names: &[&str]) -> Vec<ConanServer> {
    write(&w.join("serve.py"), SERVE);
    let mut servers: Vec<ConanServer> = names
        .iter()
        .map(|name| ConanServer::start(python, w, &format!("server-{name}")))
        .collect();
    publish(
        python.parent().unwrap(),
        w,
        &servers.iter().collect::<Vec<_>>(),
    );
    for server in &mut servers {
        server.skip = server.requests().len();
    }
    servers
}

/// The conan venv's python, or None after a loud skip.
fn conan_python() -> Option<PathBuf> {
    crate::fixtures::venv_python(
        "MIRRORCACHE_CONAN_VENV",
        "conan-venv",
        "import importlib.metadata as m; print(m.version('conan'), m.version('conan-server'))",
        &format!("{CONAN_VERSION} {CONAN_VERSION}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conan_installs_past_a_tampered_server_then_from_the_cache_alone() {
    let Some(python) = conan_python() else {
        return;
    };
    let venv = python.parent().unwrap().to_path_buf();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let mut servers = tokio::task::block_in_place(|| published(&python, w, &["a", "b"]));
    let (mut good, mut tampering) = (servers.pop().unwrap(), servers.pop().unwrap());
    let recipes = tampering.data.join("liba/1.0/_/_");
    let rrev = std::fs::read_dir(&recipes)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| !n.starts_with("revisions"))
        .unwrap();
    let stored = recipes.join(&rrev).join("export/conanfile.py");
    let original = std::fs::read(&stored).unwrap();
    std::fs::write(&stored, tampered(&original)).unwrap();
    let conanfile = format!("/v2/conans/liba/1.0/_/_/revisions/{rrev}/files/conanfile.py");

    let proxy = TestProxy::start(&format!(
        "[[remote]]\nname = \"conan\"\nkind = \"conan\"\nmirrors = [\"{}\", \"{}\"]\nstrategy = \"single\"\ndeny = [\"libbad\"]\n",
        tampering.url, good.url
    ))
    .await;
    let remote = proxy.url("/conan");
    let upstream = |a: &ConanServer, b: &ConanServer| a.requests().len() + b.requests().len();

    let client = tokio::task::block_in_place(|| home(&venv, w, "home1", &[("mc", &remote)]));
    let (ok, said) = tokio::task::block_in_place(|| install(&venv, &client, "libb/1.0"));
    assert!(ok, "{said}");
    assert_eq!(said.matches("Package installed").count(), 2, "{said}");
    // The recipe conan keeps is the one the manifest declares.
    let export = run(conan(&venv, &client).args(["cache", "path", "liba/1.0"]));
    let kept = std::fs::read(Path::new(export.trim()).join("conanfile.py")).unwrap();
    assert_eq!(kept, original);
    assert_eq!((tampering.hits(&conanfile), good.hits(&conanfile)), (1, 1));
    assert!(proxy.metric("mirrorcache_integrity_failures_total").await >= 1.0);
    let cold = upstream(&tampering, &good);

    // The denied reference: refused with the reason, which conan prints.
    let denied = tokio::task::block_in_place(|| home(&venv, w, "home2", &[("mc", &remote)]));
    let (ok, said) = tokio::task::block_in_place(|| install(&venv, &denied, "libbad/1.0"));
    assert!(!ok, "{said}");
    let line = said
        .lines()
        .find(|l| l.contains("is refused by this proxy"))
        .unwrap_or_else(|| panic!("no reason in conan's output:\n{said}"));
    println!("GUARD-OUTPUT conan: {}", line.trim());
    let asked = |s: &ConanServer| {
        s.requests()
            .iter()
            .filter(|p| p.contains("/libbad/"))
            .count()
    };
    assert_eq!(asked(&tampering) + asked(&good), 0);
    let first = upstream(&tampering, &good);

    tampering.stop();
    good.stop();
    let offline = tokio::task::block_in_place(|| home(&venv, w, "home3", &[("mc", &remote)]));
    let (ok, said) = tokio::task::block_in_place(|| install(&venv, &offline, "libb/1.0"));
    assert!(ok, "{said}");
    assert_eq!(said.matches("Package installed").count(), 2, "{said}");
    let second = upstream(&tampering, &good) - first;
    assert_eq!(second, 0);

    report("conan", CONAN_VERSION, cold, second);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conan_logs_in_to_a_private_remote_with_a_token() {
    let Some(python) = conan_python() else {
        return;
    };
    let venv = python.parent().unwrap().to_path_buf();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let mut origin = tokio::task::block_in_place(|| published(&python, w, &["origin"]))
        .pop()
        .unwrap();
    let remotes = format!(
        "[[remote]]\nname = \"conan\"\nkind = \"conan\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n",
        origin.url
    );
    let (running, token) = crate::private::private_proxy(w, &remotes, "").await;
    let remote = format!("http://{}/conan", running.local_addr);

    // Without credentials (and no one to ask): refused, nothing upstream.
    let (ok, said) = tokio::task::block_in_place(|| {
        let anonymous = home(&venv, w, "home1", &[("mc", &remote)]);
        write(
            &anonymous.join("global.conf"),
            "core:non_interactive=True\n",
        );
        install(&venv, &anonymous, "libb/1.0")
    });
    assert!(!ok, "{said}");
    assert_eq!(origin.requests().len(), 0);
    // conan logs in with the token as its password, then sends it as Bearer.
    let (ok, said) = tokio::task::block_in_place(|| {
        let client = home(&venv, w, "home2", &[("mc", &remote)]);
        let mut cmd = conan(&venv, &client);
        cmd.env("CONAN_LOGIN_USERNAME_MC", "ci")
            .env("CONAN_PASSWORD_MC", &token)
            .args(["install", "--requires=libb/1.0", "-r", "mc"]);
        outcome(&mut cmd)
    });
    assert!(ok, "{said}");
    assert!(
        said.contains("Authenticated in remote 'mc' with user 'ci'"),
        "{said}"
    );
    assert_eq!(said.matches("Package installed").count(), 2, "{said}");
    let asked = origin.requests();
    assert!(
        asked.iter().all(|p| !p.starts_with("/v2/users/")),
        "{asked:?}"
    );
    println!("PRIVATE-CLIENT conan ({CONAN_VERSION}): token as the login's password: ok; without credentials: refused");
    origin.stop();
    drop(running);
}
