//! The listener: accepts connections under a connection limit, serves them
//! with hyper's HTTP/1 (header size and read-time bounds against slow or
//! oversized request heads), and shuts down gracefully within a bound.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;

use super::send_timeout::SendTimeout;
use crate::config::Config;
use crate::proxy::Proxy;

/// Largest request head (request line + headers) accepted, in bytes.
pub const MAX_REQUEST_HEAD: usize = 64 * 1024;

/// A proxy that is listening. Dropping it does not stop it; call [`Running::shutdown`].
pub struct Running {
    pub local_addr: SocketAddr,
    pub proxy: Arc<Proxy>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Running {
    /// Builds the proxy from `config`, binds `config.server.listen` and starts serving.
    pub async fn start(config: &Config) -> anyhow::Result<Running> {
        let proxy = Proxy::build(config).await?;
        let listener = TcpListener::bind(config.server.listen)
            .await
            .with_context(|| format!("binding {}", config.server.listen))?;
        let local_addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(serve(listener, proxy.clone(), async {
            let _ = stopped.await;
        }));
        tracing::info!(%local_addr, remotes = proxy.remotes().len(), "serving");
        Ok(Running {
            local_addr,
            proxy,
            stop,
            task,
        })
    }

    /// Stops accepting, lets in-flight requests and fills finish (each wait
    /// bounded by the configured shutdown timeout), and closes the metadata pool.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
        // A fill whose clients are all gone still runs: let it commit, so the
        // bytes already fetched are not fetched again after the restart.
        if tokio::time::timeout(
            self.proxy.server().shutdown_timeout,
            self.proxy.fills.wait_idle(),
        )
        .await
        .is_err()
        {
            tracing::warn!(
                fills = self.proxy.fills.len(),
                "shutdown timeout reached with fills in progress; they are dropped"
            );
        }
        // Access times and hit counts noted since the last flush.
        if let Err(error) = self.proxy.cache.meta.flush_access_times().await {
            tracing::warn!(%error, "could not write access times at shutdown");
        }
        self.proxy.cache.meta.close().await;
    }
}

async fn serve(listener: TcpListener, proxy: Arc<Proxy>, stop: impl Future<Output = ()>) {
    // Read once: the listener's settings apply at start only (a reload
    // that changes them is refused); `shutdown_timeout` is read when needed.
    let config = proxy.server();
    let router = super::router(proxy.clone());
    let limit = Arc::new(Semaphore::new(config.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .max_header_size(MAX_REQUEST_HEAD);
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            permit = limit.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut stop => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Usually EMFILE: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let stream = SendTimeout::new(stream, config.send_timeout);
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    let timeout = proxy.server().shutdown_timeout;
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(timeout) => tracing::warn!(?timeout, "shutdown timeout reached; closing remaining connections"),
    }
}
