//! A remote's HTTP clients: one per connection thread and one for every
//! other thread. A client's pooled upstream connections are tasks of the
//! runtime that opened them; with a client of its own, each connection
//! thread (`http::conn_threads`) reuses only connections it runs itself, so
//! a fill and its upstream connection hand over to each other without
//! waking another thread.

use std::cell::Cell;
use std::sync::OnceLock;

use crate::config::RemoteConfig;

thread_local! {
    /// The connection thread this is, if it is one.
    static SLOT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Marks the calling thread as connection thread `slot` (of
/// [`thread_slots`]): its requests use that slot's clients.
pub fn enter_thread_slot(slot: usize) {
    SLOT.with(|s| s.set(Some(slot)));
}

/// How many connection threads a server runs: one per CPU the process may
/// use, read once (each remote's clients are sized by it too, so the two
/// agree even if the process's CPU limit changes while it runs).
pub fn thread_slots() -> usize {
    static SLOTS: OnceLock<usize> = OnceLock::new();
    *SLOTS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[derive(Debug)]
pub struct Clients {
    /// Built with the remote: it proves the config makes a client, and it
    /// serves every thread that is not a connection thread.
    shared: reqwest::Client,
    /// A connection thread's own, built on its first request.
    per_thread: Box<[OnceLock<reqwest::Client>]>,
}

impl Clients {
    pub fn new(config: &RemoteConfig) -> Result<Clients, reqwest::Error> {
        Ok(Clients {
            shared: super::fetch::client_for(config)?,
            per_thread: (0..thread_slots()).map(|_| OnceLock::new()).collect(),
        })
    }

    /// The calling thread's client.
    pub fn get(&self, config: &RemoteConfig) -> &reqwest::Client {
        let Some(own) = SLOT
            .with(Cell::get)
            .and_then(|slot| self.per_thread.get(slot))
        else {
            return &self.shared;
        };
        // The shared client was built from the same config, so this one
        // builds too; were it not to, the shared one serves.
        own.get_or_init(|| super::fetch::client_for(config).unwrap_or_else(|_| self.shared.clone()))
    }
}
