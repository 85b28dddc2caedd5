//! TLS on the listener, with certificates made now (rcgen): HTTP/1.1 and
//! HTTP/2 by ALPN, credentials over both, plain HTTP to the TLS port closed
//! without an HTTP answer, `https://` in rewritten links, and the
//! certificate reloaded for new handshakes while open connections go on (a
//! broken one leaves the old in place). And TLS to a mirror, trusted by the
//! system's roots, over HTTP/2 where the mirror speaks it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use super::{basic, raw_get, AuthProxy};
use crate::support::proxy::config_text;
use crate::support::{sha256_hex, test_bytes, BinaryProxy, MirrorServer};

/// A CA, and a certificate for `localhost` it signed: (CA PEM, cert PEM, key PEM).
fn certificate(name: &str) -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("test CA {name}"));
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_cert.pem(), leaf.pem(), key.serialize_pem())
}

fn write(dir: &Path, cert: &str, key: &str) {
    std::fs::write(dir.join("cert.pem"), cert).unwrap();
    std::fs::write(dir.join("key.pem"), key).unwrap();
}

/// The status of `GET url` by a new client trusting only `ca`.
async fn status_via(ca: &str, addr: SocketAddr, url: &str) -> u16 {
    let response = client(ca, addr, true).get(url).send().await.unwrap();
    response.status().as_u16()
}

fn client(ca: &str, addr: SocketAddr, http1: bool) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .tls_built_in_root_certs(false)
        .resolve("localhost", addr);
    if http1 {
        builder = builder.http1_only();
    }
    builder.build().unwrap()
}

async fn tls_proxy(certs: &Path, more_remotes: &str) -> AuthProxy {
    let keys = format!(
        "tls_cert = \"{d}/cert.pem\"\ntls_key = \"{d}/key.pem\"",
        d = certs.display()
    );
    AuthProxy::start_with(&keys, more_remotes).await
}

#[tokio::test]
async fn tls_serves_http1_and_h2_by_alpn_and_plain_http_is_closed() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificate("a");
    write(certs.path(), &cert, &key);
    let (index, files) = (MirrorServer::start().await, MirrorServer::start().await);
    let remote = super::pypi_page(&index, &files);
    let proxy = tls_proxy(certs.path(), &remote).await;
    let addr = proxy.running.local_addr;
    let url = |path: &str| format!("https://localhost:{}{path}", addr.port());

    for (http1, version) in [
        (true, reqwest::Version::HTTP_11),
        (false, reqwest::Version::HTTP_2),
    ] {
        let client = client(&ca, addr, http1);
        let response = client.get(url("/pub/a.txt")).send().await.unwrap();
        assert_eq!(response.version(), version);
        assert_eq!(response.status(), 200);
        assert_eq!(&response.bytes().await.unwrap()[..], b"public bytes");
        let denied = client
            .get(url("/secret/hidden-package/x"))
            .send()
            .await
            .unwrap();
        assert_eq!(denied.status(), 401, "{version:?}");
        let allowed = client
            .get(url("/secret/hidden-package/x"))
            .header("authorization", basic("ci", "ci-pass"))
            .send()
            .await
            .unwrap();
        assert_eq!(allowed.status(), 200, "{version:?}");
        // Links in rewritten documents: https, the client's host.
        let page = client.get(url("/py/simple/six/")).send().await.unwrap();
        let page = page.text().await.unwrap();
        let expected = format!(
            "href=\"https://localhost:{}/py/~files/six-1.0.whl\"",
            addr.port()
        );
        assert!(page.contains(&expected), "{version:?}: {page}");
        // The ops pages over h2 too.
        assert_eq!(
            client.get(url("/-/status")).send().await.unwrap().status(),
            200
        );
    }

    // Plain HTTP to the TLS port: no HTTP answer, the connection closed.
    let (status, answer) = raw_get(addr, "/pub/a.txt", "").await;
    assert_eq!(status, 0);
    assert!(!answer.contains("HTTP/"), "{answer}");
}

#[tokio::test]
async fn sighup_reload_swaps_the_certificate_and_a_broken_one_keeps_the_old() {
    let certs = tempfile::tempdir().unwrap();
    let (ca_a, cert_a, key_a) = certificate("a");
    write(certs.path(), &cert_a, &key_a);
    let proxy = tls_proxy(certs.path(), "").await;
    let addr = proxy.running.local_addr;
    let url = format!("https://localhost:{}/pub/a.txt", addr.port());

    // An open HTTP/2 connection, trusting A only.
    let open = client(&ca_a, addr, false);
    assert_eq!(open.get(&url).send().await.unwrap().status(), 200);

    let (ca_b, cert_b, key_b) = certificate("b");
    write(certs.path(), &cert_b, &key_b);
    proxy.running.reload(&proxy.config());
    assert_eq!(
        status_via(&ca_b, addr, &url).await,
        200,
        "new handshakes get B"
    );
    assert!(
        client(&ca_a, addr, true).get(&url).send().await.is_err(),
        "A is gone"
    );
    assert_eq!(
        open.get(&url).send().await.unwrap().status(),
        200,
        "the open connection goes on"
    );

    // C's certificate with B's key: broken, so B stays.
    let (_, cert_c, _) = certificate("c");
    write(certs.path(), &cert_c, &key_b);
    proxy.running.reload(&proxy.config());
    assert_eq!(status_via(&ca_b, addr, &url).await, 200, "B still serves");
    // Not PEM at all: B stays too.
    write(certs.path(), "not a certificate", "not a key");
    assert!(mirrorcache::config::Config::parse(&proxy.config_text, "t.toml").is_err());
    assert_eq!(status_via(&ca_b, addr, &url).await, 200);
}

/// An OpenSSL client, which lists AES-256-GCM first (as pip's, curl's and
/// wrk's do), gets AES-128-GCM over TLS 1.3 and 1.2: the server's order.
#[tokio::test]
async fn an_openssl_client_gets_aes_128_gcm_in_tls_1_3_and_1_2() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificate("c");
    write(certs.path(), &cert, &key);
    std::fs::write(certs.path().join("ca.pem"), &ca).unwrap();
    let proxy = tls_proxy(certs.path(), "").await;
    let addr = proxy.running.local_addr;
    for (version, suite) in [
        ("-tls1_3", "TLS_AES_128_GCM_SHA256"),
        ("-tls1_2", "ECDHE-ECDSA-AES128-GCM-SHA256"),
    ] {
        let mut openssl = std::process::Command::new("openssl");
        openssl
            .args(["s_client", "-brief", version, "-servername", "localhost"])
            .arg("-connect")
            .arg(addr.to_string())
            .arg("-CAfile")
            .arg(certs.path().join("ca.pem"))
            .stdin(std::process::Stdio::null());
        // Off the runtime's thread, which serves the proxy too.
        let out = tokio::task::spawn_blocking(move || openssl.output())
            .await
            .unwrap()
            .expect("openssl (.ci/tools.sh installs it)");
        let text = String::from_utf8_lossy(&out.stderr) + String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Verification: OK") && text.contains(&format!("Ciphersuite: {suite}")),
            "{version}: {text}"
        );
    }
}

/// A TLS server's config for `cert` and `key` (PEM), no ALPN.
fn server_config(cert: &str, key: &str) -> rustls::ServerConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap()
}

/// `mirror` over TLS: a port on 127.0.0.1 that ends TLS with `cert` and
/// `key` and passes each connection's bytes on to the mirror. Not the
/// listener's `http::tls::Tls`: that one offers `h2` by ALPN, and the
/// mirror behind speaks HTTP/1.1 alone.
async fn over_tls(mirror: &MirrorServer, cert: &str, key: &str) -> SocketAddr {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(cert, key)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (front, back) = (listener.local_addr().unwrap(), mirror.addr);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut plain = tokio::net::TcpStream::connect(back).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    front
}

/// A mirror over TLS that speaks HTTP/2 alone: ALPN `h2` is all it offers,
/// so a client offering only `http/1.1` fails the handshake. It serves
/// `bodies[i]` at `/m/f{i}` and keeps each request's path, the protocol
/// its connection's TLS picked and the number of that connection.
async fn h2_mirror(
    bodies: &[Vec<u8>],
    cert: &str,
    key: &str,
) -> (
    SocketAddr,
    Arc<Mutex<Vec<(String, Option<Vec<u8>>, usize)>>>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let mut config = server_config(cert, key);
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let files: Arc<Vec<Vec<u8>>> = Arc::new(bodies.to_vec());
    let log = seen.clone();
    tokio::spawn(async move {
        let mut connections = 0;
        while let Ok((tcp, _)) = listener.accept().await {
            connections += 1;
            let connection = connections;
            let (acceptor, files, log) = (acceptor.clone(), files.clone(), log.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                let service = hyper::service::service_fn(move |request: axum::http::Request<_>| {
                    let path = request.uri().path().to_string();
                    let seen = (path.clone(), alpn.clone(), connection);
                    log.lock().unwrap().push(seen);
                    let body = path
                        .strip_prefix("/m/f")
                        .and_then(|i| i.parse::<usize>().ok())
                        .and_then(|i| files.get(i).cloned());
                    let response = match body {
                        Some(body) => axum::http::Response::new(axum::body::Body::from(body)),
                        None => axum::http::Response::builder()
                            .status(404)
                            .body(axum::body::Body::empty())
                            .unwrap(),
                    };
                    async move { Ok::<_, std::convert::Infallible>(response) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// The real binary in `dir/name`, serving `remote`, the system's roots
/// (`SSL_CERT_FILE`) `ca` alone.
async fn proxy_trusting(dir: &Path, name: &str, ca: &str, remote: &str) -> BinaryProxy {
    let home = dir.join(name);
    std::fs::create_dir(&home).unwrap();
    let roots = home.join("roots.pem");
    std::fs::write(&roots, ca).unwrap();
    let config = config_text(&home, remote);
    BinaryProxy::start_env(&home, &config, "info", &[("SSL_CERT_FILE", &roots)]).await
}

/// A mirror over TLS whose CA the system's roots hold (`SSL_CERT_FILE`,
/// read once for all the remotes' clients; a variable of the process, so
/// the real binary) serves, through each connection thread's own client:
/// the bytes' sha256, one mirror request an artifact. A process whose roots
/// hold another CA refuses the mirror's certificate: 502 before any request
/// reaches the mirror, and nothing kept.
#[tokio::test]
async fn a_tls_mirror_needs_a_trusted_root() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificate("upstream");
    let (other_ca, _, _) = certificate("other");
    let mirror = MirrorServer::start().await;
    let bodies: Vec<Vec<u8>> = (0..8).map(|i| test_bytes(20_000, 40 + i)).collect();
    for (i, body) in bodies.iter().enumerate() {
        mirror.put(&format!("/m/f{i}"), body.clone());
    }
    let front = over_tls(&mirror, &cert, &key).await;
    let remote = format!("[[remote]]\nname = \"r\"\nmirrors = [\"https://{front}/m\"]\n");
    // A new connection a request, each closed after its answer.
    let client = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let get = async |proxy: &BinaryProxy, i: usize| {
        let response = client()
            .get(proxy.url(&format!("/r/f{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", proxy.log());
        let bytes = response.bytes().await.unwrap();
        assert_eq!(sha256_hex(&bytes), sha256_hex(&bodies[i]));
    };

    let proxy = proxy_trusting(dir.path(), "trusting", &ca, &remote).await;
    // A connection goes to the thread holding the fewest, the first on a
    // tie: the first four to one thread; the next four, with an idle one
    // held, as a rule to the other.
    for i in 0..4 {
        get(&proxy, i).await;
    }
    let addr = proxy.addr();
    let idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    for i in 4..8 {
        get(&proxy, i).await;
    }
    drop(idle);
    for i in 0..8 {
        get(&proxy, i).await;
        assert_eq!(mirror.hits(&format!("/m/f{i}")), 1);
    }
    drop(proxy);

    let proxy = proxy_trusting(dir.path(), "refusing", &other_ca, &remote).await;
    let before = mirror.total();
    for _ in 0..2 {
        let response = client().get(proxy.url("/r/f0")).send().await.unwrap();
        assert_eq!(response.status(), 502, "{}", proxy.log());
    }
    assert_eq!(mirror.total(), before, "no request passed the handshake");
}

/// A mirror over TLS that speaks HTTP/2 alone is fetched over HTTP/2: the
/// upstream clients offer `h2` by ALPN (as reqwest's own TLS offers them
/// with its `http2` feature, which object_store turns on), so the handshake
/// picks `h2` and every request arrives over HTTP/2, all on one upstream
/// connection (asked on one client connection, so by one connection
/// thread, whose client keeps it); each artifact's bytes by their sha256,
/// one mirror request each, then hits.
#[tokio::test]
async fn a_tls_mirror_speaking_h2_is_fetched_over_h2() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificate("h2 upstream");
    let bodies: Vec<Vec<u8>> = (0..4).map(|i| test_bytes(70_000, 60 + i)).collect();
    let (mirror, seen) = h2_mirror(&bodies, &cert, &key).await;
    let remote = format!("[[remote]]\nname = \"r\"\nmirrors = [\"https://{mirror}/m\"]\n");
    let proxy = proxy_trusting(dir.path(), "h2", &ca, &remote).await;
    // One connection to the proxy for every request (a pooling client may
    // open a second, which could go to the other connection thread).
    let addr = proxy.addr();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(connection);
    for _ in 0..2 {
        for (i, body) in bodies.iter().enumerate() {
            sender.ready().await.unwrap();
            let request = axum::http::Request::get(format!("/r/f{i}"))
                .header("host", addr)
                .body(axum::body::Body::empty())
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            assert_eq!(response.status(), 200, "{}", proxy.log());
            let body_of = axum::body::Body::new(response.into_body());
            let bytes = axum::body::to_bytes(body_of, usize::MAX).await.unwrap();
            assert_eq!(sha256_hex(&bytes), sha256_hex(body));
        }
    }
    let seen = seen.lock().unwrap().clone();
    let expected: Vec<(String, Option<Vec<u8>>, usize)> = (0..4)
        .map(|i| (format!("/m/f{i}"), Some(b"h2".to_vec()), 1))
        .collect();
    assert_eq!(
        seen, expected,
        "one HTTP/2 request an artifact, one connection"
    );
}
