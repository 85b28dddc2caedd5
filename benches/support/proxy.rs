//! The set-up the socket benches share (copy and overhead): a multi-thread
//! tokio runtime, an origin of the bench's own on 127.0.0.1, and mirrorcache
//! in-process (`mirrorcache::http::server::Running`) with one remote `o` pointing
//! at it (`immutable = ["**"]`, store and SQLite in a temp dir, no log
//! subscriber), and one reqwest client with TCP_NODELAY.

use std::future::Future;

use mirrorcache::config::Config;
use mirrorcache::http::server::Running;
use tokio::runtime::Runtime;

pub struct ProxyBench {
    pub runtime: Runtime,
    pub client: reqwest::Client,
    pub running: Running,
    /// `http://ADDR` of the proxy (the remote is under `/o`).
    pub proxy: String,
    _dir: tempfile::TempDir,
}

impl ProxyBench {
    /// Runs `origin` in the runtime to start the origin (and whatever else
    /// the bench needs beside it); it returns the remote's mirror URL and a
    /// value handed back with the bench. `server` is extra `[server]` keys,
    /// `name` the config's name in error messages.
    pub fn start<T, F>(name: &str, server: &str, origin: impl FnOnce() -> F) -> (ProxyBench, T)
    where
        F: Future<Output = (String, T)>,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let dir = tempfile::tempdir().expect("temp dir");
        let (running, extra) = runtime.block_on(async {
            let (mirror, extra) = origin().await;
            let text = format!(
                "[server]\nlisten = \"127.0.0.1:0\"\n{server}\n\
                 [storage]\npath = \"{dir}/store\"\nmax_size = \"16GiB\"\n\n\
                 [metadata]\nurl = \"sqlite://{dir}/meta.db\"\n\n\
                 [[remote]]\nname = \"o\"\nmirrors = [\"{mirror}\"]\nimmutable = [\"**\"]\n",
                dir = dir.path().display()
            );
            let config = Config::parse(&text, name).expect("bench config");
            let running = Running::start(&config).await.expect("proxy starts");
            (running, extra)
        });
        let proxy = format!("http://{}", running.local_addr);
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .expect("client");
        let bench = ProxyBench {
            runtime,
            client,
            running,
            proxy,
            _dir: dir,
        };
        (bench, extra)
    }
}
