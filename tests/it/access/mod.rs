//! Who may read what (issue 21): users and tokens, per-remote `access`, the
//! answers to missing and wrong credentials, path spellings that must never
//! reach a private remote, nothing private on the operations pages, the
//! failed-login limit, the audit line, TLS with HTTP/2 and its reload, and
//! what `check` says. Every test runs the real proxy on 127.0.0.1 against
//! real mirrors and counts what reached the private one.

mod check;
mod leaks;
mod oci;
mod registry_tokens;
mod rules;
mod spelling;
mod tls;
pub mod tokens;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use mirrorcache::config::Config;
use mirrorcache::http::server::Running;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::MirrorServer;

/// An htpasswd file's text: bcrypt at cost 4 (fast; the cost is the file's).
pub fn htpasswd(users: &[(&str, &str)]) -> String {
    let mut text = String::from("# test users\n\n");
    for (user, password) in users {
        text.push_str(&format!("{user}:{}\n", bcrypt::hash(password, 4).unwrap()));
    }
    text
}

pub fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// A proxy with `[auth]`: users `ci` (password `ci-pass`) and `dev`
/// (`dev-pass`); remote `pub` (anonymous), `secret` (only `ci`) and `team`
/// (any user), each on its own mirror.
pub struct AuthProxy {
    pub running: Running,
    pub base: String,
    pub public: MirrorServer,
    pub private: MirrorServer,
    pub team: MirrorServer,
    pub dir: tempfile::TempDir,
    pub config_text: String,
}

pub const PRIVATE_BODY: &[u8] = b"private bytes of hidden-package";

impl AuthProxy {
    pub async fn start() -> AuthProxy {
        AuthProxy::start_with("", "").await
    }

    /// With extra `[server]` keys and extra `[[remote]]` tables.
    pub async fn start_with(server_keys: &str, more_remotes: &str) -> AuthProxy {
        let (public, private, team) = (
            MirrorServer::start().await,
            MirrorServer::start().await,
            MirrorServer::start().await,
        );
        public.put("/a.txt", b"public bytes".to_vec());
        private.put("/hidden-package/x", PRIVATE_BODY.to_vec());
        team.put("/t.txt", b"team bytes".to_vec());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("users.htpasswd"),
            htpasswd(&[("ci", "ci-pass"), ("dev", "dev-pass")]),
        )
        .unwrap();
        let remotes = format!(
            "[[remote]]\nname = \"pub\"\nmirrors = [\"{}\"]\n\n\
             [[remote]]\nname = \"secret\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n\n\
             [[remote]]\nname = \"team\"\nmirrors = [\"{}\"]\naccess = \"authenticated\"\n\n{more_remotes}",
            public.url(""),
            private.url(""),
            team.url("")
        );
        let config_text = auth_config(dir.path(), server_keys, &remotes);
        let running = start(&config_text).await;
        AuthProxy {
            base: format!("http://{}", running.local_addr),
            running,
            public,
            private,
            team,
            dir,
            config_text,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn config(&self) -> Config {
        Config::parse(&self.config_text, "test.toml").unwrap()
    }

    pub fn htpasswd_path(&self) -> PathBuf {
        self.dir.path().join("users.htpasswd")
    }

    /// `GET path` with these headers: status, headers, body.
    pub async fn get(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (u16, reqwest::header::HeaderMap, bytes::Bytes) {
        send(reqwest::Method::GET, &self.url(path), headers).await
    }
}

pub async fn send(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, bytes::Bytes) {
    let client = reqwest::Client::new();
    let mut request = client.request(method, url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.bytes().await.unwrap())
}

/// A config on `127.0.0.1:0` in `dir` with `[auth]` over `dir/users.htpasswd`.
pub fn auth_config(dir: &Path, server_keys: &str, remotes: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{server_keys}\n\n[storage]\npath = \"{d}/store\"\n\n\
         [metadata]\nurl = \"sqlite://{d}/meta.db\"\n\n[auth]\nhtpasswd = \"{d}/users.htpasswd\"\n\n{remotes}\n",
        d = dir.display()
    )
}

pub async fn start(text: &str) -> Running {
    let config = Config::parse(text, "test.toml").unwrap();
    Running::start(&config).await.unwrap()
}

/// One request written byte for byte (the path exactly as given, which no
/// URL library would keep), the connection closed after it: the status
/// (0 when the server answered nothing) and the whole answer.
pub async fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// `GET {path}` with extra header lines (each ending in `\r\n`).
pub async fn raw_get(addr: SocketAddr, path: &str, extra: &str) -> (u16, String) {
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{extra}\r\n");
    raw(addr, request.as_bytes()).await
}

/// A pypi index page linking to a wheel on a separate files host, and the
/// `[[remote]]` table of a `py` remote in front of both.
pub fn pypi_page(index: &MirrorServer, files: &MirrorServer) -> String {
    index.put_typed(
        "/simple/six/",
        format!("<a href=\"{}/six-1.0.whl\">six</a>", files.url("")),
        "text/html",
    );
    format!(
        "[[remote]]\nname = \"py\"\nkind = \"pypi\"\nmirrors = [\"{}\"]\nfiles = [\"{}\"]\n",
        index.url(""),
        files.url("")
    )
}
