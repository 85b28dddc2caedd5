//! Real registries for the OCI tests: Debian's `docker-registry` (the
//! reference distribution registry) on 127.0.0.1 with a throwaway store and
//! its access log in a file; images built with `umoci` and pushed with
//! `skopeo`; and a token issuer for `auth: token`, signing JWTs with a key
//! whose self-signed certificate is the registry's `rootcertbundle`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine as _;

use crate::support::{available, free_port, sha256_hex, test_bytes};
use crate::{run, version, write};

/// Whether `docker-registry`, `skopeo`, `umoci` and `openssl` are installed
/// (a loud skip, or a failure under MIRRORCACHE_REQUIRE_SERVICES, if not).
pub fn tools() -> bool {
    let found = [
        ("docker-registry", "--version"),
        ("skopeo", "--version"),
        ("umoci", "--version"),
        ("openssl", "version"),
    ]
    .iter()
    .all(|(tool, arg)| version(tool, arg).is_some());
    available(
        "docker-registry, skopeo, umoci and openssl (installed by .ci/tools.sh)",
        found,
    )
}

/// An `Accept` naming every manifest type, as skopeo sends it.
pub const ACCEPT_ALL: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// `auth: token` settings of a registry.
pub struct TokenAuth<'a> {
    pub realm: &'a str,
    pub cert: &'a Path,
}

/// A `docker-registry serve` of the test's own.
pub struct Registry {
    child: Option<Child>,
    pub port: u16,
    log: PathBuf,
}

impl Registry {
    /// Starts a registry on a free port keeping its blobs in `store`.
    pub fn start(w: &Path, name: &str, store: &Path, auth: Option<TokenAuth>) -> Registry {
        let port = free_port();
        let auth = auth.map_or(String::new(), |a| {
            format!(
                "auth:\n  token:\n    realm: {}\n    service: test-registry\n    issuer: test-issuer\n    rootcertbundle: {}\n",
                a.realm,
                a.cert.display()
            )
        });
        let config = w.join(format!("{name}.yml"));
        write(
            &config,
            &format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}",
                store.display()
            ),
        );
        let log = w.join(format!("{name}.log"));
        let out = File::create(&log).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("docker-registry starts");
        let registry = Registry {
            child: Some(child),
            port,
            log,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "{name} did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        registry
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Access-log lines of `method` requests for exactly `path`.
    pub fn count(&self, method: &str, path: &str) -> usize {
        let needle = format!("\"{method} {path} HTTP/");
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&needle))
            .count()
    }

    /// Kills the registry: connects are refused from now on.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `skopeo` with a policy that accepts anything and no stored credentials.
pub fn skopeo(w: &Path) -> Command {
    let policy = w.join("policy.json");
    if !policy.exists() {
        write(
            &policy,
            r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
        );
    }
    let mut cmd = Command::new("skopeo");
    cmd.arg("--policy").arg(policy);
    cmd.env("REGISTRY_AUTH_FILE", w.join("auth.json"));
    cmd.env("HOME", w);
    cmd
}

/// An OCI layout at `w/layout` with the images the tests pull: `small`
/// (one 4 KiB layer), `small2` and `small3` (other 4 KiB layers), `big`
/// (one 64 MiB layer of incompressible bytes), `arm` (a small arm64 image)
/// and `multi`, an image index of `small` (amd64) and `arm` (arm64).
pub fn build_images(w: &Path) -> PathBuf {
    let layout = w.join("layout");
    let image = |tag: &str| format!("{}:{tag}", layout.display());
    run(Command::new("umoci")
        .args(["init", "--layout"])
        .arg(&layout));
    for (i, (tag, size)) in [
        ("small", 4096),
        ("small2", 4096),
        ("small3", 4096),
        ("big", 64 << 20),
        ("arm", 4096),
    ]
    .into_iter()
    .enumerate()
    {
        run(Command::new("umoci").args(["new", "--image", &image(tag)]));
        let file = w.join(format!("{tag}.data"));
        std::fs::write(&file, test_bytes(size, 1000 + i as u64)).unwrap();
        run(Command::new("umoci")
            .args(["insert", "--rootless", "--image", &image(tag)])
            .arg(&file)
            .arg("/data"));
    }
    run(Command::new("umoci").args([
        "config",
        "--image",
        &image("arm"),
        "--architecture",
        "arm64",
    ]));
    build_index(&layout, "multi", &[("small", "amd64"), ("arm", "arm64")]);
    layout
}

/// Adds to the layout an image index `tag` of the layout's images
/// `platforms` (`(tag, arch)`), as umoci makes single-platform images only.
pub fn build_index(layout: &Path, tag: &str, platforms: &[(&str, &str)]) {
    let index_path = layout.join("index.json");
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
    let manifests: Vec<serde_json::Value> = platforms
        .iter()
        .map(|(image, arch)| {
            let mut d = descriptor(&index, image).clone();
            d.as_object_mut().unwrap().remove("annotations");
            d["platform"] = serde_json::json!({"architecture": arch, "os": "linux"});
            d
        })
        .collect();
    let multi = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    });
    let bytes = serde_json::to_vec(&multi).unwrap();
    let hex = sha256_hex(&bytes);
    std::fs::write(layout.join("blobs/sha256").join(&hex), &bytes).unwrap();
    index["manifests"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": format!("sha256:{hex}"),
            "size": bytes.len(),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }));
    std::fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
}

pub fn descriptor<'i>(index: &'i serde_json::Value, tag: &str) -> &'i serde_json::Value {
    index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap_or_else(|| panic!("no {tag} in the layout"))
}

/// `skopeo copy` of the layout's `tag` to `dest` (`host/name:tag`), every
/// platform of an index included.
pub fn push(w: &Path, layout: &Path, tag: &str, dest: &str) {
    run(skopeo(w)
        .args(["copy", "--all", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:{tag}", layout.display()))
        .arg(format!("docker://{dest}")));
}

/// The raw manifest at `reference` (`host/name:tag` or `@digest`), and
/// its digest (sha256 of the bytes), as `skopeo inspect --raw` gets it.
pub fn inspect_raw(w: &Path, reference: &str) -> (Vec<u8>, String) {
    let out = skopeo(w)
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://{reference}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "skopeo inspect {reference}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = format!("sha256:{}", sha256_hex(&out.stdout));
    (out.stdout, digest)
}

/// `skopeo copy` of `reference` into a `dir:` at `into`; the copied
/// manifest's digest. `all`: every platform of an index.
pub fn pull(w: &Path, reference: &str, into: &Path, all: bool) -> String {
    let mut cmd = skopeo(w);
    cmd.args(["copy", "--src-tls-verify=false"]);
    if all {
        cmd.arg("--all");
    }
    run(cmd
        .arg(format!("docker://{reference}"))
        .arg(format!("dir:{}", into.display())));
    let manifest = std::fs::read(into.join("manifest.json")).unwrap();
    format!("sha256:{}", sha256_hex(&manifest))
}

/// The digests of an image's config and layers, from its manifest.
pub fn blobs_of(manifest: &[u8]) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_slice(manifest).unwrap();
    std::iter::once(&json["config"])
        .chain(json["layers"].as_array().into_iter().flatten())
        .filter_map(|d| d["digest"].as_str().map(str::to_string))
        .collect()
}

/// The token service of `auth: token` registries: anonymous requests get a
/// token for the public repositories, requests with the right basic
/// credentials one for every repository, wrong credentials a 401.
pub struct TokenIssuer {
    pub realm: String,
    pub cert: PathBuf,
    /// `true` per token issued to the credentials, `false` per anonymous one.
    pub issued: Arc<Mutex<Vec<bool>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TokenIssuer {
    pub async fn start(
        w: &Path,
        credentials: (&str, &str),
        public: &[&str],
        private: &[&str],
    ) -> TokenIssuer {
        let (key, cert) = (w.join("issuer.key"), w.join("issuer.crt"));
        run(Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args(["-subj", "/CN=mirrorcache-test-issuer", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(Stdio::null()));
        let anonymous = jwt(&key, &cert, public);
        let all: Vec<&str> = public.iter().chain(private).copied().collect();
        let authenticated = jwt(&key, &cert, &all);
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", credentials.0, credentials.1))
        );
        let issued = Arc::new(Mutex::new(Vec::new()));
        let log = issued.clone();
        let app = axum::Router::new().route(
            "/token",
            axum::routing::get(move |headers: axum::http::HeaderMap| {
                let (anonymous, authenticated, expected, log) = (
                    anonymous.clone(),
                    authenticated.clone(),
                    expected.clone(),
                    log.clone(),
                );
                async move {
                    let (token, with_credentials) = match headers
                        .get("authorization")
                        .map(|v| v.to_str().unwrap())
                    {
                        None => (anonymous, false),
                        Some(given) if given == expected => (authenticated, true),
                        Some(_) => return (axum::http::StatusCode::UNAUTHORIZED, String::new()),
                    };
                    log.lock().unwrap().push(with_credentials);
                    let body = serde_json::json!({"token": token, "expires_in": 300});
                    (axum::http::StatusCode::OK, body.to_string())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let realm = format!("http://{}/token", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        TokenIssuer {
            realm,
            cert,
            issued,
            task,
        }
    }
}

impl Drop for TokenIssuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A JWT the registry accepts: RS256 with the certificate in `x5c`,
/// granting pull (and push, for the fixtures) on `repositories`.
fn jwt(key: &Path, cert: &Path, repositories: &[&str]) -> String {
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let der = Command::new("openssl")
        .args(["x509", "-outform", "DER", "-in"])
        .arg(cert)
        .output()
        .unwrap()
        .stdout;
    let header = serde_json::json!({
        "alg": "RS256",
        "typ": "JWT",
        "x5c": [base64::engine::general_purpose::STANDARD.encode(der)],
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let access: Vec<serde_json::Value> = repositories
        .iter()
        .map(|name| serde_json::json!({"type": "repository", "name": name, "actions": ["pull", "push"]}))
        .collect();
    let claims = serde_json::json!({
        "iss": "test-issuer", "sub": "", "aud": "test-registry",
        "exp": now + 7200, "nbf": now - 60, "iat": now, "jti": sha256_hex(&now.to_le_bytes()),
        "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        url.encode(header.to_string()),
        url.encode(claims.to_string())
    );
    let mut child = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(signing_input.as_bytes())
        .unwrap();
    let signature = child.wait_with_output().unwrap().stdout;
    format!("{signing_input}.{}", url.encode(signature))
}
