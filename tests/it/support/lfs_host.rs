//! A Git host with an LFS endpoint on 127.0.0.1, as git-lfs's client
//! (`lfsapi/`, `tq/transfer.go`, `tq/basic_download.go`) speaks to it: the
//! batch API at `{endpoint}/objects/batch` behind Basic auth (401 with
//! `LFS-Authenticate` without credentials, 404 to a user who may not read
//! the repository, as GitHub answers), whose download actions point at a
//! second host, the object store, with a per-object signed `Authorization`
//! header that store checks (403 without it). The Git host also serves a
//! directory of bare repositories over Git's dumb HTTP. Both count what
//! they are asked; both can be stopped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::mirror::serve_stoppably;
use super::sha256_hex;

/// What the object store's signatures are made with.
const SIGNING_SECRET: &str = "fixture-signing-secret";

/// The batch API's media type.
pub const LFS_JSON: &str = "application/vnd.git-lfs+json";

#[derive(Default)]
struct HostState {
    /// Bare repositories served over dumb HTTP, if any.
    root: Option<PathBuf>,
    objects_base: String,
    users: Mutex<HashMap<String, String>>,
    /// Endpoint (`team/assets.git/info/lfs`) → users who may read it.
    readers: Mutex<HashMap<String, Vec<String>>>,
    /// oid → the bytes the object store serves for it.
    objects: Mutex<HashMap<String, Bytes>>,
    batches: AtomicUsize,
    /// oid → downloads the object store answered with its bytes.
    downloads: Mutex<HashMap<String, usize>>,
    unsigned: AtomicUsize,
    git_requests: AtomicUsize,
}

pub struct LfsHost {
    pub addr: SocketAddr,
    pub objects_addr: SocketAddr,
    state: Arc<HostState>,
    tasks: Mutex<Vec<JoinSet<()>>>,
}

impl LfsHost {
    /// A host serving the bare repositories below `root` (if given).
    pub async fn start(root: Option<&Path>) -> LfsHost {
        let git = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let store = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, objects_addr) = (git.local_addr().unwrap(), store.local_addr().unwrap());
        let state = Arc::new(HostState {
            root: root.map(Path::to_path_buf),
            objects_base: format!("http://{objects_addr}"),
            ..HostState::default()
        });
        let git_router = axum::Router::new()
            .fallback(git_host)
            .with_state(state.clone());
        let store_router = axum::Router::new()
            .fallback(object_store)
            .with_state(state.clone());
        let tasks = vec![
            serve_stoppably(git, git_router),
            serve_stoppably(store, store_router),
        ];
        LfsHost {
            addr,
            objects_addr,
            state,
            tasks: Mutex::new(tasks),
        }
    }

    /// `http://127.0.0.1:PORT`, the Git host.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn add_user(&self, user: &str, password: &str) {
        let mut users = self.state.users.lock().unwrap();
        users.insert(user.to_string(), password.to_string());
    }

    /// `user` may read the repository whose LFS endpoint is `endpoint`.
    pub fn allow(&self, endpoint: &str, user: &str) {
        let mut readers = self.state.readers.lock().unwrap();
        readers
            .entry(endpoint.to_string())
            .or_default()
            .push(user.to_string());
    }

    /// Stores `bytes` as an object; its oid.
    pub fn put_object(&self, bytes: impl Into<Bytes>) -> String {
        let bytes = bytes.into();
        let oid = sha256_hex(&bytes);
        self.put_as(&oid, bytes);
        oid
    }

    /// The object store serves `bytes` for `oid` (other bytes: a tampered copy).
    pub fn put_as(&self, oid: &str, bytes: impl Into<Bytes>) {
        let mut objects = self.state.objects.lock().unwrap();
        objects.insert(oid.to_string(), bytes.into());
    }

    /// Batch requests the Git host answered (any status).
    pub fn batches(&self) -> usize {
        self.state.batches.load(Ordering::SeqCst)
    }

    /// Downloads of `oid` the object store answered with bytes.
    pub fn downloads(&self, oid: &str) -> usize {
        let downloads = self.state.downloads.lock().unwrap();
        downloads.get(oid).copied().unwrap_or_default()
    }

    pub fn total_downloads(&self) -> usize {
        self.state.downloads.lock().unwrap().values().sum()
    }

    /// Object GETs refused for a missing or wrong signature.
    pub fn unsigned(&self) -> usize {
        self.state.unsigned.load(Ordering::SeqCst)
    }

    /// Requests for the Git repositories themselves (dumb HTTP).
    pub fn git_requests(&self) -> usize {
        self.state.git_requests.load(Ordering::SeqCst)
    }

    /// Closes both hosts and every connection.
    pub fn stop(&self) {
        for mut tasks in self.tasks.lock().unwrap().drain(..) {
            tasks.abort_all();
        }
    }
}

impl Drop for LfsHost {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The signature the object store wants for `oid`.
fn signature(oid: &str) -> String {
    format!(
        "RemoteAuth {}",
        sha256_hex(format!("{SIGNING_SECRET}{oid}").as_bytes())
    )
}

fn lfs_json(status: StatusCode, body: Value) -> Response {
    (status, [(header::CONTENT_TYPE, LFS_JSON)], body.to_string()).into_response()
}

/// The user of a Basic `Authorization` the host knows, if any.
fn user_of(state: &HostState, headers: &HeaderMap) -> Option<String> {
    use base64::Engine as _;
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let (user, password) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    let users = state.users.lock().unwrap();
    (users.get(user).map(String::as_str) == Some(password)).then(|| user.to_string())
}

async fn git_host(
    State(state): State<Arc<HostState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().trim_start_matches('/');
    match (method, path.strip_suffix("/objects/batch")) {
        (Method::POST, Some(endpoint)) => batch(&state, endpoint, &headers, &body),
        (Method::GET, None) => dumb_http(&state, path),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

fn batch(state: &HostState, endpoint: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    state.batches.fetch_add(1, Ordering::SeqCst);
    let Some(user) = user_of(state, headers) else {
        let mut response = lfs_json(
            StatusCode::UNAUTHORIZED,
            json!({"message": "Credentials needed"}),
        );
        let challenge = header::HeaderValue::from_static("Basic realm=\"Git LFS\"");
        response.headers_mut().insert("lfs-authenticate", challenge);
        return response;
    };
    let may_read = state
        .readers
        .lock()
        .unwrap()
        .get(endpoint)
        .is_some_and(|users| users.contains(&user));
    if !may_read {
        return lfs_json(
            StatusCode::NOT_FOUND,
            json!({"message": "Repository not found"}),
        );
    }
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return lfs_json(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"message": "bad JSON"}),
        );
    };
    let operation = request["operation"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let objects = state.objects.lock().unwrap();
    let answered: Vec<Value> = request["objects"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|object| {
            let oid = object["oid"].as_str().unwrap_or_default();
            let size = object["size"].as_u64().unwrap_or_default();
            let action = json!({
                "href": format!("{}/{oid}", state.objects_base),
                "header": {"Authorization": signature(oid)},
                "expires_in": 3600,
            });
            match (operation.as_str(), objects.contains_key(oid)) {
                ("upload", _) => json!({"oid": oid, "size": size, "actions": {"upload": action}}),
                (_, true) => json!({
                    "oid": oid, "size": size, "authenticated": true,
                    "actions": {"download": action},
                }),
                (_, false) => json!({
                    "oid": oid, "size": size,
                    "error": {"code": 404, "message": "Object does not exist"},
                }),
            }
        })
        .collect();
    lfs_json(
        StatusCode::OK,
        json!({"transfer": "basic", "objects": answered, "hash_algo": "sha256"}),
    )
}

/// A file of a bare repository (`info/refs`, `HEAD`, `objects/…`), for
/// Git's dumb HTTP; `?service=` is ignored, so clients fall back to it.
fn dumb_http(state: &HostState, path: &str) -> Response {
    state.git_requests.fetch_add(1, Ordering::SeqCst);
    let Some(root) = &state.root else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let relative = Path::new(path);
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return StatusCode::NOT_FOUND.into_response();
    }
    match std::fs::read(root.join(relative)) {
        Ok(bytes) => (StatusCode::OK, bytes).into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn object_store(
    State(state): State<Arc<HostState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let oid = uri.path().trim_start_matches('/');
    let signed = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(signature(oid).as_str());
    if !signed {
        state.unsigned.fetch_add(1, Ordering::SeqCst);
        return StatusCode::FORBIDDEN.into_response();
    }
    let Some(bytes) = state.objects.lock().unwrap().get(oid).cloned() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    *state
        .downloads
        .lock()
        .unwrap()
        .entry(oid.to_string())
        .or_default() += 1;
    (StatusCode::OK, bytes).into_response()
}
