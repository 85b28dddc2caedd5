//! TLS on the listener (`server.tls_cert`, `server.tls_key`): rustls with the
//! `ring` provider, TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`. The
//! certificate is served by a [`CertResolver`] over an `ArcSwap`, so SIGHUP
//! swaps it for new handshakes while open connections go on; a certificate
//! that fails to load (unreadable, not PEM, or not matching its key) leaves
//! the old one serving, and the reason is logged.

use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsConfig;

/// The certificate new handshakes get.
#[derive(Debug)]
pub struct CertResolver {
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The listener's TLS: the acceptor and the resolver behind it.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    resolver: Arc<CertResolver>,
}

/// ring's suites, AES-128-GCM before AES-256-GCM in each TLS version (the
/// server's order, not the client's: see [`Tls::new`]).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::CipherSuite as S;
    let mut provider = rustls::crypto::ring::default_provider();
    // A stable sort: the others keep ring's order after them.
    provider
        .cipher_suites
        .sort_by_key(|suite| match suite.suite() {
            S::TLS13_AES_128_GCM_SHA256
            | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 0,
            _ => 1,
        });
    Arc::new(provider)
}

/// Reads the PEM chain and key and checks that they belong together.
pub fn load(config: &TlsConfig) -> anyhow::Result<CertifiedKey> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&config.cert)
        .with_context(|| format!("reading {}", config.cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: not a PEM certificate chain", config.cert.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "{} holds no certificate",
        config.cert.display()
    );
    let key = PrivateKeyDer::from_pem_file(&config.key)
        .with_context(|| format!("{}: no PEM private key", config.key.display()))?;
    CertifiedKey::from_der(chain, key, &provider()).with_context(|| {
        format!(
            "{} and {} do not make a certificate and its key",
            config.cert.display(),
            config.key.display()
        )
    })
}

impl Tls {
    pub fn new(config: &TlsConfig) -> anyhow::Result<Tls> {
        let resolver = Arc::new(CertResolver {
            current: ArcSwap::from_pointee(load(config)?),
        });
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .context("TLS versions")?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // AES-128-GCM even where the client lists AES-256-GCM first (as
        // OpenSSL's clients do: pip, curl, wrk): ten AES rounds against
        // fourteen on every byte of a hit.
        server.ignore_client_order = true;
        // Resumption: session IDs (the default cache) and TLS 1.3 tickets.
        server.ticketer = rustls::crypto::ring::Ticketer::new().context("TLS tickets")?;
        Ok(Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            resolver,
        })
    }

    /// Loads the certificate again (SIGHUP). On failure the old one stays
    /// and the error says why.
    pub fn reload(&self, config: &TlsConfig) -> anyhow::Result<()> {
        let loaded = load(config)?;
        self.resolver.current.store(Arc::new(loaded));
        Ok(())
    }
}
