//! A remote's HTTP clients: one per connection thread and one for every
//! other thread. A client's pooled upstream connections are tasks of the
//! runtime that opened them; with a client of its own, each connection
//! thread (`http::conn_threads`) reuses only connections it runs itself, so
//! a fill and its upstream connection hand over to each other without
//! waking another thread.

use std::cell::Cell;
use std::sync::{Arc, OnceLock};

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
    /// What they are built with ([`tls_config`]).
    tls: rustls::ClientConfig,
}

impl Clients {
    pub fn new(
        config: &RemoteConfig,
        tls: &rustls::ClientConfig,
    ) -> Result<Clients, reqwest::Error> {
        Ok(Clients {
            shared: super::fetch::client_for(config, tls.clone())?,
            per_thread: (0..thread_slots()).map(|_| OnceLock::new()).collect(),
            tls: tls.clone(),
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
        own.get_or_init(|| {
            super::fetch::client_for(config, self.tls.clone())
                .unwrap_or_else(|_| self.shared.clone())
        })
    }
}

/// The TLS of every upstream client a config's remotes make, read once for
/// them all (at start, and again on each reload): the roots reqwest would
/// load for each client (the webpki roots, and the system's: `SSL_CERT_FILE`
/// and `SSL_CERT_DIR` when set, else where OpenSSL keeps them), `h2` and
/// `http/1.1` by ALPN, as reqwest offers them. One read for all: a client
/// left to build its own reads and parses the system's bundle (19M
/// instructions: a first miss on each connection thread took 5–8 ms, not
/// about 1) and keeps its own copy. Its clones share the roots and the
/// TLS sessions.
pub fn tls_config() -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    // As reqwest does: a certificate that does not parse is skipped (system
    // bundles hold some), an unreadable bundle leaves the webpki roots.
    let native = rustls_native_certs::load_native_certs();
    if !native.errors.is_empty() {
        tracing::warn!(errors = ?native.errors, "could not read all of the system's root certificates");
    }
    let (added, skipped) = roots.add_parsable_certificates(native.certs);
    if added == 0 && skipped > 0 {
        tracing::warn!(
            skipped,
            "none of the system's root certificates parses; trusting the webpki roots alone"
        );
    }
    tracing::debug!(added, skipped, "the system's root certificates read");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .expect("ring has TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}
