//! The threads that serve connections. Each runs a current-thread tokio
//! runtime; the listener gives every accepted connection to the thread with
//! the fewest, and the connection stays there with every task its requests
//! spawn (a miss's fill, the upstream connection the fill opens: each
//! thread has its own clients, `upstream::clients`). A request
//! and its fill then hand over to each other on one thread, without waking
//! another: under a multi-thread runtime a sequential cold miss woke the
//! other worker two or three times (an `eventfd` write, `futex` wakes) and
//! its median took 60–90 µs longer than on one worker.
//!
//! The background work (the group commit, the evictor, the listener
//! itself) stays on the runtime that started the server.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// A connection handed to a thread: run there, inside its runtime.
type Job = Box<dyn FnOnce() + Send>;

struct Thread {
    jobs: mpsc::UnboundedSender<Job>,
    /// Connections being served on it.
    live: Arc<AtomicUsize>,
    handle: std::thread::JoinHandle<()>,
}

/// The connection threads of one server. Dropped, they end once their
/// runtimes have dropped whatever tasks are left; [`ConnThreads::stop`]
/// also waits for that.
pub(super) struct ConnThreads {
    threads: Vec<Thread>,
}

/// Blocking-pool threads a connection thread's runtime may start (tokio's
/// default for a whole runtime is 512): file work of its fills.
const BLOCKING_THREADS: usize = 128;

impl ConnThreads {
    /// One thread per CPU the process may use.
    pub(super) fn start() -> std::io::Result<ConnThreads> {
        let count = crate::upstream::clients::thread_slots();
        let mut threads = Vec::with_capacity(count);
        for i in 0..count {
            let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
            // Built on its own thread (a runtime may not be dropped inside
            // another's tasks, as one would be if the thread failed to start).
            let (built, started) = std::sync::mpsc::sync_channel(1);
            let handle = std::thread::Builder::new()
                .name(format!("mirrorcache-conn-{i}"))
                .spawn(move || {
                    let runtime = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .max_blocking_threads(BLOCKING_THREADS)
                        .build()
                    {
                        Ok(runtime) => runtime,
                        Err(error) => {
                            let _ = built.send(Err(error));
                            return;
                        }
                    };
                    let _ = built.send(Ok(()));
                    crate::upstream::clients::enter_thread_slot(i);
                    runtime.block_on(async move {
                        tokio::spawn(heartbeat());
                        while let Some(job) = queue.recv().await {
                            job();
                        }
                    });
                })?;
            started
                .recv()
                .map_err(|_| std::io::Error::other("a connection thread ended at its start"))??;
            threads.push(Thread {
                jobs,
                live: Arc::new(AtomicUsize::new(0)),
                handle,
            });
        }
        Ok(ConnThreads { threads })
    }

    /// Stops the threads and waits until each has dropped its runtime with
    /// the tasks left on it.
    pub(super) async fn stop(self) {
        let handles: Vec<_> = self.threads.into_iter().map(|t| t.handle).collect();
        let _ = tokio::task::spawn_blocking(move || {
            for handle in handles {
                let _ = handle.join();
            }
        })
        .await;
    }

    /// Serves `stream` on the thread with the fewest connections: `serve`
    /// is given the stream registered with that thread's runtime, and its
    /// future is spawned there.
    pub(super) fn serve<F, Fut>(&self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let thread = self
            .threads
            .iter()
            .min_by_key(|t| t.live.load(Ordering::Relaxed))
            .expect("at least one thread");
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "could not move a connection to its thread");
                return;
            }
        };
        let live = Live::count(&thread.live);
        let job: Job = Box::new(move || match TcpStream::from_std(stream) {
            Ok(stream) => {
                tokio::spawn(async move {
                    serve(stream).await;
                    drop(live);
                });
            }
            Err(error) => {
                tracing::debug!(%error, "could not register a connection on its thread")
            }
        });
        // A thread is gone only once this is dropped.
        let _ = thread.jobs.send(job);
    }
}

/// A timer on each connection thread that is always due within
/// [`HEARTBEAT`]. Tokio's time driver wakes itself (an `eventfd` write)
/// whenever a timer is set to fire before the one it last parked for, and
/// with no timer set that is every timer: hyper's header-read timeout,
/// armed for each request on a kept-alive connection, cost a write a
/// request. Set later than this one, such timers cost no system call; the
/// heartbeat itself costs each thread a wake and a write a second, busy or
/// idle. (A `header_read_timeout` under a second gains nothing from it.)
async fn heartbeat() {
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}

/// See [`heartbeat`]: shorter than the server's timeouts (header read,
/// first byte, send), so that setting them wakes nothing.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(1);

/// One connection counted on its thread until this is dropped: served,
/// failed, never run, or its task dropped (a panic, the runtime's end).
struct Live(Arc<AtomicUsize>);

impl Live {
    fn count(live: &Arc<AtomicUsize>) -> Live {
        live.fetch_add(1, Ordering::Relaxed);
        Live(live.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each connection goes to the thread with the fewest, and what it
    /// spawns runs on its thread.
    #[tokio::test]
    async fn a_connection_and_what_it_spawns_stay_on_its_thread() {
        let threads = ConnThreads::start().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen, mut names) = mpsc::unbounded_channel();
        let (release, released) = tokio::sync::watch::channel(false);
        let count = threads.threads.len();
        let mut clients = Vec::new();
        for _ in 0..count {
            clients.push(TcpStream::connect(addr).await.unwrap());
            let (stream, _) = listener.accept().await.unwrap();
            let (seen, mut released) = (seen.clone(), released.clone());
            threads.serve(stream, move |stream| async move {
                let here = std::thread::current().name().map(str::to_string);
                let spawned =
                    tokio::spawn(async { std::thread::current().name().map(str::to_string) });
                let there = spawned.await.unwrap();
                seen.send((here, there, stream.peer_addr().is_ok()))
                    .unwrap();
                // Held open until every connection has its thread.
                let _ = released.wait_for(|r| *r).await;
            });
        }
        let mut homes = Vec::new();
        for _ in 0..count {
            let (here, there, registered) = names.recv().await.unwrap();
            assert!(registered, "the stream works on its thread");
            assert_eq!(
                here, there,
                "a spawned task runs on its connection's thread"
            );
            homes.push(here.unwrap());
        }
        homes.sort();
        homes.dedup();
        assert_eq!(homes.len(), count, "one connection a thread: {homes:?}");
        release.send(true).unwrap();
    }
}
