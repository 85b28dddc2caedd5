//! The container daemons of `daemons.rs`, each started by its test in a
//! throwaway directory and stopped (SIGTERM, by PID) when dropped: Debian's
//! `dockerd` (`--storage-driver vfs`, no iptables, no bridge, its own data
//! root, exec root, socket and `daemon.json`) and `containerd` (its own root,
//! state and socket; `ctr` pulls with `--hosts-dir`). Also the images they
//! pull: a multi-arch index whose amd64 image has three layers, one of
//! 256 MiB, built with `umoci`, and a registry served from a layout by a
//! `MirrorServer` (so a test can switch it to answering 429).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::oci_fixtures::descriptor;
use crate::support::{test_bytes, MirrorServer};
use crate::{run, version};

/// Whether dockerd, containerd and ctr (Debian's `docker.io` and
/// `containerd`) are installed; a loud skip or a failure otherwise.
pub fn tools() -> bool {
    let found = version("dockerd", "--version").is_some()
        && version("containerd", "--version").is_some()
        && version("ctr", "--version").is_some()
        && crate::oci_fixtures::tools();
    crate::support::available(
        "dockerd, containerd and ctr (docker.io and containerd, installed by .ci/tools.sh)",
        found,
    )
}

/// Whether `cmd` runs and succeeds (its output thrown away).
fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Ends a daemon the way its service manager would (SIGTERM), then waits.
fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A `dockerd` of the test's own.
pub struct Dockerd {
    child: Child,
    dir: PathBuf,
}

impl Dockerd {
    /// Starts a daemon in `dir` with this `daemon.json` (the test's keys;
    /// the storage and network keys this machine needs are added).
    pub fn start(dir: &Path, daemon_json: &serde_json::Value) -> Dockerd {
        std::fs::create_dir_all(dir.join("config")).unwrap();
        let mut config = daemon_json.clone();
        config["storage-driver"] = "vfs".into();
        config["iptables"] = false.into();
        config["bridge"] = "none".into();
        let config_file = dir.join("daemon.json");
        std::fs::write(&config_file, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        let log = std::fs::File::create(dir.join("dockerd.log")).unwrap();
        let child = Command::new("dockerd")
            .arg("--config-file")
            .arg(&config_file)
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .arg("-H")
            .arg(format!("unix://{}", dir.join("docker.sock").display()))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("dockerd starts");
        let daemon = Dockerd {
            child,
            dir: dir.to_path_buf(),
        };
        wait_for("dockerd", || succeeds(daemon.docker().arg("version")));
        daemon
    }

    /// Debian's `docker` client, talking to this daemon, with its own
    /// config directory (where `docker login` keeps credentials).
    pub fn docker(&self) -> Command {
        let mut cmd = Command::new("/usr/bin/docker");
        cmd.env(
            "DOCKER_HOST",
            format!("unix://{}", self.dir.join("docker.sock").display()),
        )
        .env("DOCKER_CONFIG", self.dir.join("config"))
        .env("HOME", &self.dir);
        cmd
    }

    /// `docker image inspect --format {{.Id}}` of `reference`: the image's
    /// config digest.
    pub fn image_id(&self, reference: &str) -> String {
        run(self
            .docker()
            .args(["image", "inspect", "--format", "{{.Id}}", reference]))
        .trim()
        .to_string()
    }

    /// The daemon's `config.json` (what `docker login` stored).
    pub fn client_config(&self) -> String {
        std::fs::read_to_string(self.dir.join("config/config.json")).unwrap_or_default()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// A `containerd` of the test's own, and `ctr` against it.
pub struct Containerd {
    child: Child,
    socket: PathBuf,
}

impl Containerd {
    pub fn start(dir: &Path) -> Containerd {
        std::fs::create_dir_all(dir).unwrap();
        let socket = dir.join("containerd.sock");
        let config = dir.join("config.toml");
        // The CRI plugin and the snapshotters this machine cannot run are
        // left out; `ctr` unpacks into the `native` snapshotter.
        std::fs::write(
            &config,
            format!(
                "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\n\
                 disabled_plugins = [\"io.containerd.grpc.v1.cri\", \"io.containerd.snapshotter.v1.aufs\", \
                 \"io.containerd.snapshotter.v1.btrfs\", \"io.containerd.snapshotter.v1.zfs\", \
                 \"io.containerd.snapshotter.v1.devmapper\"]\n\
                 [grpc]\n  address = \"{socket}\"\n[ttrpc]\n  address = \"{socket}.ttrpc\"\n\
                 [debug]\n  address = \"{socket}.debug\"\n",
                root = dir.join("root").display(),
                state = dir.join("state").display(),
                socket = socket.display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&config)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("containerd starts");
        let daemon = Containerd { child, socket };
        wait_for("containerd", || {
            succeeds(daemon.ctr("default").arg("version"))
        });
        daemon
    }

    /// `ctr` in `namespace`.
    pub fn ctr(&self, namespace: &str) -> Command {
        let mut cmd = Command::new("ctr");
        cmd.arg("--address")
            .arg(&self.socket)
            .args(["--namespace", namespace]);
        cmd
    }

    /// `ctr images pull --hosts-dir HOSTS --snapshotter native REFERENCE`.
    pub fn pull(&self, namespace: &str, hosts: &Path, reference: &str) -> Command {
        let mut cmd = self.ctr(namespace);
        cmd.args(["images", "pull", "--hosts-dir"])
            .arg(hosts)
            .args(["--snapshotter", "native", reference]);
        cmd
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// A containerd `hosts.toml` naming the proxy as the one mirror of `host`,
/// written as `<dir>/<host>/hosts.toml`, and returned as text.
pub fn hosts_toml(dir: &Path, host: &str, proxy: &str) -> String {
    let server = match host {
        "docker.io" => "https://registry-1.docker.io".to_string(),
        other => format!("https://{other}"),
    };
    let text = format!(
        "server = \"{server}\"\n\n[host.\"{proxy}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    );
    std::fs::create_dir_all(dir.join(host)).unwrap();
    std::fs::write(dir.join(host).join("hosts.toml"), &text).unwrap();
    text
}

/// An image of `layers` layers (sizes in bytes, bytes that do not
/// compress) built into `layout` as `tag`, for `arch`.
pub fn build_image(w: &Path, layout: &Path, tag: &str, arch: &str, layers: &[usize], seed: u64) {
    if !layout.join("index.json").exists() {
        run(Command::new("umoci").args(["init", "--layout"]).arg(layout));
    }
    let image = format!("{}:{tag}", layout.display());
    run(Command::new("umoci").args(["new", "--image", &image]));
    for (i, size) in layers.iter().enumerate() {
        let file = w.join(format!("{tag}-{i}.data"));
        std::fs::write(&file, test_bytes(*size, seed + i as u64)).unwrap();
        run(Command::new("umoci")
            .args(["insert", "--rootless", "--image", &image])
            .arg(&file)
            .arg(format!("/layer{i}")));
        std::fs::remove_file(&file).unwrap();
    }
    run(Command::new("umoci").args(["config", "--image", &image, "--architecture", arch]));
}

fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").unwrap();
    std::fs::read(layout.join("blobs/sha256").join(hex)).unwrap()
}

fn media_type(value: &serde_json::Value) -> &'static str {
    match value.as_str() {
        Some("application/vnd.oci.image.index.v1+json") => {
            "application/vnd.oci.image.index.v1+json"
        }
        _ => "application/vnd.oci.image.manifest.v1+json",
    }
}

/// What an image (or each image of an index) is made of.
pub struct Served {
    /// The digest of the tag's manifest (or index).
    pub digest: String,
    /// The amd64 image's config digest: its `docker image inspect` Id.
    pub image_id: String,
    /// The amd64 image's config and layer digests.
    pub blobs: Vec<String>,
}

/// Serves the layout's `tag` as `name:as_tag` from `mirror`, as a registry
/// does: manifests by tag and digest, blobs by digest (an index's every
/// platform with it).
pub fn serve_layout(
    mirror: &MirrorServer,
    layout: &Path,
    tag: &str,
    name: &str,
    as_tag: &str,
) -> Served {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let top = descriptor(&index, tag);
    let digest = top["digest"].as_str().unwrap().to_string();
    let top_bytes = blob(layout, &digest);
    let top_type = media_type(&top["mediaType"]);
    mirror.put_typed(
        &format!("/v2/{name}/manifests/{as_tag}"),
        top_bytes.clone(),
        top_type,
    );
    mirror.put_typed(
        &format!("/v2/{name}/manifests/{digest}"),
        top_bytes.clone(),
        top_type,
    );
    let top_json: serde_json::Value = serde_json::from_slice(&top_bytes).unwrap();
    let images: Vec<(String, String)> = match top_json["manifests"].as_array() {
        Some(platforms) => platforms
            .iter()
            .map(|p| {
                (
                    p["digest"].as_str().unwrap().to_string(),
                    p["platform"]["architecture"].as_str().unwrap().to_string(),
                )
            })
            .collect(),
        None => vec![(digest.clone(), "amd64".to_string())],
    };
    let mut amd64 = None;
    for (image, arch) in images {
        let bytes = blob(layout, &image);
        mirror.put_typed(
            &format!("/v2/{name}/manifests/{image}"),
            bytes.clone(),
            "application/vnd.oci.image.manifest.v1+json",
        );
        let blobs = crate::oci_fixtures::blobs_of(&bytes);
        for b in &blobs {
            mirror.put_typed(
                &format!("/v2/{name}/blobs/{b}"),
                blob(layout, b),
                "application/octet-stream",
            );
        }
        if arch == "amd64" {
            amd64 = Some(blobs);
        }
    }
    let blobs = amd64.expect("an amd64 image");
    Served {
        digest,
        image_id: blobs[0].clone(),
        blobs,
    }
}

/// The config and layer digests of the layout's single-platform image `tag`.
pub fn image_blobs(layout: &Path, tag: &str) -> Vec<String> {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let manifest = descriptor(&index, tag)["digest"]
        .as_str()
        .unwrap()
        .to_string();
    crate::oci_fixtures::blobs_of(&blob(layout, &manifest))
}
