//! The metadata store on both backends: one suite over SQLite and Postgres
//! (a database of its own, dropped afterwards), and the proxy riding out a
//! Postgres that goes away and comes back.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mirrorcache::cache::Digest;
use mirrorcache::meta::{Entry, MetadataStore};
use mirrorcache::path::ArtifactPath;
use sqlx::Executor;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::support::proxy::{config_text, get, get_text};
use crate::support::{available, wait_until, MirrorServer};

const POSTGRES: &str = "127.0.0.1:5432";

/// A fresh Postgres database for one test, dropped when the guard drops.
pub struct PgDatabase {
    pub url: String,
    name: String,
}

impl PgDatabase {
    pub async fn create() -> Option<PgDatabase> {
        let up = TcpStream::connect(POSTGRES).await.is_ok();
        if !available("PostgreSQL at 127.0.0.1:5432", up) {
            return None;
        }
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "mirrorcache_test_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let admin = sqlx::PgPool::connect(&format!("postgres://postgres@{POSTGRES}/postgres"))
            .await
            .unwrap();
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        admin.close().await;
        Some(PgDatabase {
            url: format!("postgres://postgres@{POSTGRES}/{name}"),
            name,
        })
    }

    pub fn url_via(&self, addr: SocketAddr) -> String {
        self.url.replace(POSTGRES, &addr.to_string())
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(admin) =
                    sqlx::PgPool::connect(&format!("postgres://postgres@{POSTGRES}/postgres")).await
                {
                    let _ = admin
                        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                        .await;
                }
            })
        })
        .join();
    }
}

fn entry(byte: u8, size: u64, at: i64) -> Entry {
    Entry::new(
        Digest([byte; 32]),
        size,
        Some("text/plain".into()),
        Some("\"e\"".into()),
        None,
        at,
    )
}

/// The same operations, the same answers, on either backend.
async fn exercise(url: &str) {
    let meta = MetadataStore::connect(url, 100, 1 << 20).await.unwrap();
    let a = ArtifactPath::parse("/r/a/file.bin").unwrap();
    let b = ArtifactPath::parse("/r/b").unwrap().with_variant("json");
    let c = ArtifactPath::parse("/other/c").unwrap();
    assert!(meta.lookup(&a).await.unwrap().is_none());
    meta.record(&a, entry(1, 10, 1_000)).await.unwrap();
    meta.record(&b, entry(2, 20, 2_000)).await.unwrap();
    meta.record(&c, entry(1, 10, 3_000)).await.unwrap();
    let got = meta.lookup(&a).await.unwrap().unwrap();
    assert_eq!(
        (got.digest, got.size, got.content_type.as_deref()),
        (Digest([1; 32]), 10, Some("text/plain"))
    );
    // Replace, revalidate.
    meta.record(&a, entry(3, 30, 4_000)).await.unwrap();
    let fresh = meta
        .mark_revalidated(
            &a,
            &meta.lookup(&a).await.unwrap().unwrap(),
            5_000,
            meta.memory.purges.ticket(),
        )
        .await
        .unwrap();
    assert_eq!(fresh.fetched_at_ms, 5_000);
    // LRU order by last access, and blob references.
    let lru: Vec<String> = meta
        .db
        .least_recently_used(10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| format!("{}/{}", r.remote, r.path))
        .collect();
    assert_eq!(lru, ["r/b?json", "other/c", "r/a/file.bin"]);
    assert!(meta
        .digest_referenced(&Digest([1; 32]).to_hex())
        .await
        .unwrap());
    meta.forget_row("other", "c").await.unwrap();
    assert!(!meta
        .digest_referenced(&Digest([1; 32]).to_hex())
        .await
        .unwrap());
    assert_eq!(meta.db.all_rows().await.unwrap().len(), 2);
    assert_eq!(
        meta.forget_digest(&Digest([2; 32]).to_hex()).await.unwrap(),
        1
    );
    let purged = meta.db.remote_rows("r").await.unwrap();
    let purged: Vec<&String> = purged.keys().collect();
    assert_eq!(purged, [&Digest([3; 32]).to_hex()]);
    meta.forget_remote_digest(Some("r"), purged[0])
        .await
        .unwrap();
    assert!(meta.db.all_rows().await.unwrap().is_empty());
    declared_digests(&meta).await;
    tokens(&meta).await;
    assert!(meta.db.ping().await);
    meta.db.close().await;
    // Migrations are idempotent: a second start on the same database is fine.
    MetadataStore::connect(url, 10, 1 << 20)
        .await
        .unwrap()
        .db
        .close()
        .await;
}

/// Declared digests: stored in chunks, a duplicate-free upsert that reports
/// only what changed, and the rows a cargo `crate/version` names.
async fn declared_digests(meta: &MetadataStore) {
    use mirrorcache::kind::declared::{Algo, Declared};
    use mirrorcache::kind::Kind;
    let cargo = Kind::named("cargo").unwrap().digests().unwrap();
    let digest = |byte: u8| Declared::new(Algo::Sha256, vec![byte; 32]).unwrap();
    let items: Vec<(String, Declared)> = (0..450)
        .map(|i| (format!("p/-/p-{i}.tgz"), digest(1)))
        .collect();
    assert_eq!(
        meta.declarations()
            .record_declared("r", &items, 1)
            .await
            .unwrap()
            .len(),
        450
    );
    assert!(meta
        .declarations()
        .record_declared("r", &items, 2)
        .await
        .unwrap()
        .is_empty());
    let mut changed = items.clone();
    changed[7].1 = digest(2);
    let got = meta
        .declarations()
        .record_declared("r", &changed, 3)
        .await
        .unwrap();
    assert_eq!(got, [&changed[7]]);
    assert_eq!(
        meta.declarations()
            .declared("r", "p/-/p-7.tgz")
            .await
            .unwrap(),
        Some(digest(2))
    );
    assert_eq!(
        meta.declarations()
            .declared("other", "p/-/p-7.tgz")
            .await
            .unwrap(),
        None
    );
    let download = ArtifactPath::parse("/c/api/v1/crates/Leaf_X/1.0.0/download").unwrap();
    meta.record(&download, entry(4, 40, 6_000)).await.unwrap();
    let rows = meta
        .declarations()
        .rows_for_artifact("c", "leaf_x/1.0.0", &cargo.cached_at("leaf_x/1.0.0"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(meta
        .declarations()
        .rows_for_artifact("c", "other/1.0.0", &cargo.cached_at("other/1.0.0"))
        .await
        .unwrap()
        .is_empty());
    meta.forget_row("c", download.stored_path()).await.unwrap();
}

/// Access tokens (migration 0005): kept by id, listed per user without
/// their secret, revoked once.
async fn tokens(meta: &MetadataStore) {
    use mirrorcache::access::token_table::{TokenRow, TokenTable};
    let table = TokenTable::of(meta);
    let row = |id: &str, user: &str, expires: Option<i64>| TokenRow {
        id: id.to_string(),
        user: user.to_string(),
        secret_hash: format!("hash-of-{id}"),
        created_at_ms: 1,
        expires_at_ms: expires,
    };
    table
        .insert(&row("aaaaaaaaaaaa", "ci", None))
        .await
        .unwrap();
    table
        .insert(&row("bbbbbbbbbbbb", "dev", Some(99)))
        .await
        .unwrap();
    assert!(table
        .insert(&row("aaaaaaaaaaaa", "ci", None))
        .await
        .is_err());
    assert_eq!(
        table.find("bbbbbbbbbbbb").await.unwrap(),
        Some(row("bbbbbbbbbbbb", "dev", Some(99)))
    );
    assert_eq!(table.list(None).await.unwrap().len(), 2);
    assert_eq!(table.list(Some("ci")).await.unwrap()[0].id, "aaaaaaaaaaaa");
    assert!(table.revoke("aaaaaaaaaaaa").await.unwrap());
    assert!(!table.revoke("aaaaaaaaaaaa").await.unwrap());
    assert_eq!(table.find("aaaaaaaaaaaa").await.unwrap(), None);
    table.revoke("bbbbbbbbbbbb").await.unwrap();
}

#[tokio::test]
async fn metadata_suite_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    exercise(&format!("sqlite://{}/m.db", dir.path().display())).await;
}

#[tokio::test]
async fn metadata_suite_on_postgres() {
    let Some(db) = PgDatabase::create().await else {
        return;
    };
    exercise(&db.url).await;
}

#[tokio::test]
async fn an_unreachable_postgres_at_start_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let text = config_text(
        dir.path(),
        "[[remote]]\nname = \"r\"\nmirrors = [\"http://127.0.0.1:1/x\"]\n",
    )
    .replace(
        &format!("sqlite://{}/meta.db", dir.path().display()),
        "postgres://postgres@127.0.0.1:1/nothing",
    );
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("opening the metadata database postgres://postgres@127.0.0.1:1/nothing"),
        "{stderr}"
    );
}

/// A TCP relay to Postgres that the test can cut and restore. It keeps its
/// port through the cut (connections are closed as they come), so no other
/// test's `:0` socket can take the port before the restore.
struct Relay {
    addr: SocketAddr,
    up: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<std::sync::Mutex<JoinSet<()>>>,
    _tasks: JoinSet<()>,
}

impl Relay {
    async fn start(addr: SocketAddr) -> Relay {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns = Arc::new(std::sync::Mutex::new(JoinSet::new()));
        let up = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let mut tasks = JoinSet::new();
        let (c, u) = (conns.clone(), up.clone());
        tasks.spawn(async move {
            struct AbortAll(Arc<std::sync::Mutex<JoinSet<()>>>);
            impl Drop for AbortAll {
                fn drop(&mut self) {
                    self.0.lock().unwrap().abort_all();
                }
            }
            let _guard = AbortAll(c.clone());
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                if !u.load(std::sync::atomic::Ordering::SeqCst) {
                    // Cut: Postgres is not there.
                    drop(client);
                    continue;
                }
                c.lock().unwrap().spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(POSTGRES).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Relay {
            addr,
            up,
            conns,
            _tasks: tasks,
        }
    }

    /// Closes every relayed connection and refuses new ones.
    fn cut(&mut self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        self.conns.lock().unwrap().abort_all();
    }

    fn restore(&mut self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Postgres lost while running: known hits keep being served, misses are
/// proxied uncached, a metric counts it; it recovers when Postgres returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lost_while_running_keeps_serving_and_recovers() {
    let Some(db) = PgDatabase::create().await else {
        return;
    };
    let mut relay = Relay::start("127.0.0.1:0".parse().unwrap()).await;
    let mirror = MirrorServer::start().await;
    mirror.put("/m/a", b"artifact a".to_vec());
    mirror.put("/m/b", b"artifact b".to_vec());
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &format!(
            "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\nimmutable = [\"**\"]\n",
            mirror.url("/m")
        ),
    )
    .replace(
        &format!("sqlite://{}/meta.db", dir.path().display()),
        &db.url_via(relay.addr),
    );
    let running = crate::support::proxy::start_text(&text).await;
    let url = |p: &str| format!("http://{}{p}", running.local_addr);
    let client = reqwest::Client::new();
    get(&client, &url("/r/a")).await.2.unwrap();
    running.proxy.fills.wait_idle().await;
    assert_eq!(get(&client, &url("/r/a")).await.1, "HIT");

    relay.cut();
    wait_until("the proxy to lose Postgres", async || {
        client.get(url("/-/ready")).send().await.unwrap().status() == 503
    })
    .await;
    let (status, cache, bytes) = get(&client, &url("/r/a")).await;
    assert_eq!(
        (status, cache.as_str(), &bytes.unwrap()[..]),
        (200, "HIT", &b"artifact a"[..])
    );
    for _ in 0..2 {
        let (status, cache, bytes) = get(&client, &url("/r/b")).await;
        assert_eq!(
            (status, cache.as_str(), &bytes.unwrap()[..]),
            (200, "MISS", &b"artifact b"[..])
        );
        running.proxy.fills.wait_idle().await;
    }
    let metrics = get_text(&client, &url("/-/metrics")).await;
    assert!(
        !metrics.contains("mirrorcache_metadata_errors_total 0"),
        "{metrics}"
    );
    assert_eq!(
        client.get(url("/-/ready")).send().await.unwrap().status(),
        503
    );

    relay.restore();
    wait_until("the proxy to get Postgres back", async || {
        client.get(url("/-/ready")).send().await.unwrap().status() == 200
    })
    .await;
    get(&client, &url("/r/b")).await.2.unwrap();
    running.proxy.fills.wait_idle().await;
    assert_eq!(get(&client, &url("/r/b")).await.1, "HIT");
    running.shutdown().await;
}
