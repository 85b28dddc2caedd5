//! The listener: accepts connections under a connection limit, serves them
//! with hyper's HTTP/1 (header size and read-time bounds against slow or
//! oversized request heads) or, over TLS when ALPN picks `h2`, HTTP/2 (its
//! stream, header-list and reset limits set here), and shuts down
//! gracefully within a bound. Each request is handed to
//! `access::prepare` with its peer first; the [`Peer`](super::access::Peer)
//! it makes goes to the artifact handler as an argument, to the router's
//! handlers as an extension.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::future::{Either, FutureExt as _};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;
use tower::ServiceExt as _;

use super::conn_threads::ConnThreads;
use super::send_timeout::SendTimeout;
use super::tls::Tls;
use crate::config::{Config, IpBlock};
use crate::proxy::Proxy;

/// Largest request head (request line + headers) accepted, in bytes.
pub const MAX_REQUEST_HEAD: usize = 64 * 1024;

/// HTTP/2: streams one connection may have open at once.
pub const H2_MAX_CONCURRENT_STREAMS: u32 = 256;
/// HTTP/2: streams a client may open and reset before the server has
/// accepted them (the "rapid reset" bound).
pub const H2_MAX_PENDING_ACCEPT_RESETS: usize = 32;
/// HTTP/2: streams the server may reset for errors before it closes.
pub const H2_MAX_LOCAL_ERROR_RESETS: usize = 256;
/// HTTP/2: a ping this often, and the connection closed when one is not
/// answered within [`H2_KEEP_ALIVE_TIMEOUT`] (a peer gone without a FIN).
pub const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// HTTP/2: a connection on which no request started for this long is told
/// to go away (GOAWAY; streams in progress finish), so an idle client that
/// answers pings does not hold a connection slot for ever.
pub const H2_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// HTTP/2: bytes a stream may have buffered for a client that does not
/// read them (hyper's default is 400 KiB); the rest waits on the body.
pub const H2_MAX_SEND_BUF: usize = 256 * 1024;

/// A proxy that is listening. Dropping it does not stop it; call [`Running::shutdown`].
pub struct Running {
    pub local_addr: SocketAddr,
    pub proxy: Arc<Proxy>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    /// The listener's TLS, when `server.tls_cert` is set.
    tls: Option<Tls>,
    /// Kept until the shutdown is over: a fill still committing runs on
    /// them, and so may a database connection one of them opened.
    threads: Arc<ConnThreads>,
}

impl Running {
    /// Builds the proxy from `config`, binds `config.server.listen` and starts serving.
    pub async fn start(config: &Config) -> anyhow::Result<Running> {
        let tls = match &config.server.tls {
            Some(tls) => Some(Tls::new(tls)?),
            None => None,
        };
        let proxy = Proxy::build(config).await?;
        // Each advisory feed is a request through the proxy, asked here
        // where the requests are answered.
        for feed in &config.advisories {
            let proxy = Arc::downgrade(&proxy);
            tokio::spawn(super::feeds::refresh_loop(proxy, feed.clone()));
        }
        let listener = TcpListener::bind(config.server.listen)
            .await
            .with_context(|| format!("binding {}", config.server.listen))?;
        let local_addr = listener.local_addr()?;
        let threads = Arc::new(ConnThreads::start().context("starting the connection threads")?);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(serve(
            listener,
            (proxy.clone(), threads.clone()),
            tls.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        tracing::info!(%local_addr, remotes = proxy.remotes().len(), tls = tls.is_some(), "serving");
        Ok(Running {
            local_addr,
            proxy,
            stop,
            task,
            tls,
            threads,
        })
    }

    /// SIGHUP: the config with the htpasswd file, and the certificate, each
    /// on its own: one that fails to load is logged and the running one stays.
    pub fn reload(&self, config: &Config) {
        // The users go with the remotes whose `access` names them: both
        // are taken, or neither.
        match self.proxy.reload(config) {
            Ok(()) => {
                self.proxy.access.reload(config.auth.as_ref());
                if let Some(auth) = &config.auth {
                    tracing::info!(users = auth.users.len(), "htpasswd reloaded");
                }
            }
            Err(error) => tracing::error!(
                error = format!("{error:#}"),
                "reload failed; keeping the running config and users"
            ),
        }
        if let (Some(tls), Some(paths)) = (&self.tls, &config.server.tls) {
            match tls.reload(paths) {
                Ok(()) => tracing::info!("TLS certificate reloaded"),
                Err(error) => tracing::error!(
                    error = format!("{error:#}"),
                    "TLS certificate not reloaded; the running one stays"
                ),
            }
        }
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
        self.proxy.cache.meta.db.close().await;
        // The listener's task has ended, so this holds the last reference.
        if let Some(threads) = Arc::into_inner(self.threads) {
            threads.stop().await;
        }
    }
}

/// An HTTP/2 connection, told to go away once no request started on it for
/// [`H2_IDLE_TIMEOUT`] (`last_request`: milliseconds after `opened`), or
/// when the server shuts down (`closing`). hyper-util's graceful watcher
/// cannot be told of the idle time, so the server's shutdown reaches the
/// connection here; the caller holds a watcher meanwhile, so the shutdown
/// still waits for it.
async fn until_idle<I, S, B>(
    connection: hyper::server::conn::http2::Connection<I, S, TokioExecutor>,
    opened: Instant,
    last_request: &AtomicU64,
    mut closing: tokio::sync::watch::Receiver<bool>,
) -> hyper::Result<()>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    TokioExecutor: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    tokio::pin!(connection);
    let mut told = *closing.borrow();
    if told {
        connection.as_mut().graceful_shutdown();
    }
    loop {
        let idle_since = Duration::from_millis(last_request.load(Ordering::Relaxed));
        let deadline = opened + idle_since + H2_IDLE_TIMEOUT;
        tokio::select! {
            result = connection.as_mut() => return result,
            () = tokio::time::sleep_until(deadline.into()), if !told => {
                if opened.elapsed() >= idle_since + H2_IDLE_TIMEOUT {
                    connection.as_mut().graceful_shutdown();
                    told = true;
                }
            }
            changed = closing.changed(), if !told => {
                if changed.is_err() || *closing.borrow() {
                    connection.as_mut().graceful_shutdown();
                    told = true;
                }
            }
        }
    }
}

async fn serve(
    listener: TcpListener,
    (proxy, threads): (Arc<Proxy>, Arc<ConnThreads>),
    tls: Option<Tls>,
    stop: impl Future<Output = ()>,
) {
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
    let mut h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_REQUEST_HEAD as u32)
        .max_pending_accept_reset_streams(H2_MAX_PENDING_ACCEPT_RESETS)
        .max_local_error_reset_streams(H2_MAX_LOCAL_ERROR_RESETS)
        .keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT)
        .max_send_buf_size(H2_MAX_SEND_BUF);
    let trusted: Arc<[IpBlock]> = config.trusted_proxies.clone().into();
    // Set when the listener stops: HTTP/2 connections go away then
    // (`until_idle`); HTTP/1 ones through `graceful`.
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
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
        let is_tls = tls.is_some();
        let trusted = trusted.clone();
        // When the connection's last request started, for HTTP/2's idle
        // timeout (milliseconds since `opened`): HTTP/2 comes over TLS
        // only, so a plain connection keeps none.
        let opened = Instant::now();
        let last_request = is_tls.then(|| Arc::new(AtomicU64::new(0)));
        let stamp = last_request.clone();
        let (router, proxy) = (router.clone(), proxy.clone());
        // An artifact's path goes straight to its handler; the router
        // answers only its own routes (`super::is_routed`).
        let service = hyper::service::service_fn(
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                if let Some(stamp) = &stamp {
                    stamp.store(opened.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
                let peer = super::access::prepare(&mut request, peer, is_tls, &trusted);
                let mut request = request.map(axum::body::Body::new);
                let routed = super::is_routed(request.uri().path());
                // Either future itself, not one held in an `async` block.
                if routed {
                    // The router's handlers take the peer as an extension.
                    request.extensions_mut().insert(peer);
                    Either::Left(router.clone().oneshot(request))
                } else {
                    let answer = super::answer_artifact(proxy.clone(), request, Some(peer));
                    Either::Right(answer.map(Ok::<_, std::convert::Infallible>))
                }
            },
        );
        let send_timeout = config.send_timeout;
        let Some(tls) = &tls else {
            let (http, watcher) = (http.clone(), graceful.watcher());
            threads.serve(stream, move |stream| async move {
                let stream = SendTimeout::new(stream, send_timeout);
                let connection =
                    watcher.watch(http.serve_connection(TokioIo::new(stream), service));
                if let Err(error) = connection.await {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                }
                drop(permit);
            });
            continue;
        };
        let (acceptor, watcher) = (tls.acceptor.clone(), graceful.watcher());
        let closing = closing_rx.clone();
        let (http, h2, handshake_timeout) = (http.clone(), h2.clone(), config.header_read_timeout);
        threads.serve(stream, move |stream| async move {
            let stream = SendTimeout::new(stream, send_timeout);
            // Plain HTTP (or anything not TLS) ends here: no HTTP answer.
            let stream =
                match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, %error, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let result = if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                let connection = h2.serve_connection(TokioIo::new(stream), service);
                let last_request = last_request.expect("kept for every TLS connection");
                let result = until_idle(connection, opened, &last_request, closing).await;
                drop(watcher);
                result
            } else {
                watcher
                    .watch(http.serve_connection(TokioIo::new(stream), service))
                    .await
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let timeout = proxy.server().shutdown_timeout;
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(timeout) => tracing::warn!(?timeout, "shutdown timeout reached; closing remaining connections"),
    }
}
