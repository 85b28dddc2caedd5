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
}

/// The connection threads of one server. They stop when this is dropped
/// (the last holder: the listener's task and the [`super::server::Running`]
/// handle), their runtimes dropping whatever tasks are left.
pub(super) struct ConnThreads {
    threads: Vec<Thread>,
}

impl ConnThreads {
    /// One thread per CPU the process may use.
    pub(super) fn start() -> std::io::Result<ConnThreads> {
        let count = crate::upstream::clients::thread_slots();
        let mut threads = Vec::with_capacity(count);
        for i in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
            std::thread::Builder::new()
                .name(format!("mirrorcache-conn-{i}"))
                .spawn(move || {
                    crate::upstream::clients::enter_thread_slot(i);
                    runtime.block_on(async move {
                        while let Some(job) = queue.recv().await {
                            job();
                        }
                    });
                })?;
            threads.push(Thread {
                jobs,
                live: Arc::new(AtomicUsize::new(0)),
            });
        }
        Ok(ConnThreads { threads })
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
