//! Two instances (separate processes) sharing Postgres, Redis and one blob
//! store: one upstream fetch for concurrent cold misses on both, purges seen
//! by both, and no failed request while Redis is away.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::metadata::PgDatabase;
use crate::support::proxy::{get, get_json, get_text};
use crate::support::{
    available, free_port, sha256_hex, test_bytes, wait_until, BinaryProxy, Fault, MirrorServer,
    S3Server,
};

/// A redis-server of the test's own, on a free port, so the test may stop it.
struct OwnRedis {
    child: Child,
}

impl OwnRedis {
    fn start(port: u16) -> Option<OwnRedis> {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(OwnRedis { child })
    }

    /// How many connections are subscribed to the instances' invalidation
    /// channel (each instance holds one while it is connected).
    async fn subscribers(port: u16) -> usize {
        let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
            return 0;
        };
        let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
            return 0;
        };
        redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("mirrorcache:invalidate")
            .query_async::<(String, usize)>(&mut conn)
            .await
            .map_or(0, |(_, n)| n)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_fill_purges_and_survive_a_redis_outage() {
    let redis_port = free_port();
    let redis = OwnRedis::start(redis_port);
    if !available(
        "redis-server (to run one the test may stop)",
        redis.is_some(),
    ) {
        return;
    }
    let mut redis = redis.unwrap();
    let Some(db) = PgDatabase::create().await else {
        return;
    };
    let Some(s3) = S3Server::start("mirrorcache-scaleout").await else {
        return;
    };

    let mirror = MirrorServer::start().await;
    let big = test_bytes(16 * 1024 * 1024, 16);
    mirror.put("/m/big.bin", big.clone());
    for i in 0..4 {
        mirror.put(&format!("/m/f{i}"), test_bytes(200_000, i));
    }
    // Each instance stages fills on its own disk; committed blobs are in S3.
    let config = |dir: &std::path::Path| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"t\"\n\n[storage]\npath = \"{store}\"\n{s3}\n[metadata]\nurl = \"{db}\"\n\n[redis]\nurl = \"redis://127.0.0.1:{redis_port}\"\n# generous: the machine running the suite is busy\ntimeout = \"2s\"\n\n[[remote]]\nname = \"r\"\nmirrors = [\"{m}\"]\nimmutable = [\"**\"]\n\n[[remote]]\nname = \"oci\"\nkind = \"oci\"\nmirrors = [\"{m}\"]\n",
            store = dir.join("store").display(),
            s3 = s3.storage_keys("mirrorcache-scaleout"),
            db = db.url,
            m = mirror.url("/m"),
        )
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = BinaryProxy::start(dir_a.path(), &config(dir_a.path())).await;
    let b = BinaryProxy::start(dir_b.path(), &config(dir_b.path())).await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(100)
        .build()
        .unwrap();
    // Both instances have their lock connection and their invalidation subscription.
    wait_until("both instances to connect to redis", async || {
        a.log().contains("connected to redis")
            && b.log().contains("connected to redis")
            && OwnRedis::subscribers(redis_port).await == 2
    })
    .await;

    // 50 concurrent cold requests, spread over both instances: one upstream fetch.
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(5)));
    let requests = (0..50).map(|i| {
        let url = if i % 2 == 0 {
            a.url("/r/big.bin")
        } else {
            b.url("/r/big.bin")
        };
        let client = client.clone();
        async move { get(&client, &url).await }
    });
    let expected = sha256_hex(&big);
    let mut ok = 0;
    for (status, _, bytes) in join_all(requests).await {
        assert_eq!(status, 200);
        assert_eq!(sha256_hex(&bytes.unwrap()), expected);
        ok += 1;
    }
    mirror.set_fault(Fault::None);
    println!(
        "two instances, 50 cold requests: {ok} correct bodies, upstream requests {}",
        mirror.hits("/m/big.bin")
    );
    assert_eq!(mirror.hits("/m/big.bin"), 1);
    assert_eq!(get(&client, &b.url("/r/big.bin")).await.1, "HIT");
    assert_eq!(get(&client, &a.url("/r/big.bin")).await.1, "HIT");

    // The same for a container image layer through an `oci` remote.
    let layer = test_bytes(4 * 1024 * 1024, 17);
    let digest = format!("sha256:{}", sha256_hex(&layer));
    mirror.put(&format!("/m/v2/team/app/blobs/{digest}"), layer);
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(5)));
    let pulls = (0..20).map(|i| {
        let path = format!("/v2/oci/team/app/blobs/{digest}");
        let url = if i % 2 == 0 {
            a.url(&path)
        } else {
            b.url(&path)
        };
        let client = client.clone();
        async move { get(&client, &url).await }
    });
    for (status, _, bytes) in join_all(pulls).await {
        assert_eq!(status, 200);
        assert_eq!(format!("sha256:{}", sha256_hex(&bytes.unwrap())), digest);
    }
    mirror.set_fault(Fault::None);
    assert_eq!(mirror.hits(&format!("/m/v2/team/app/blobs/{digest}")), 1);

    // A purge on one instance is seen by the other.
    let purge = client
        .post(a.url("/-/cache/r/purge"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert_eq!(purge.status(), 200);
    let mut answer = (0, String::new());
    wait_until("the purge to reach the other instance", async || {
        let (status, cache, _) = get(&client, &b.url("/r/big.bin")).await;
        answer = (status, cache);
        answer.1 != "HIT"
    })
    .await;
    assert_eq!((answer.0, answer.1.as_str()), (200, "MISS"));

    // A purge on A of a path B is still filling: B's fill is cancelled by
    // the purge's message (its client gets v1 whole, nothing of it is
    // kept), so both serve what the mirror has after the purge.
    let (v1, v2) = (
        test_bytes(2 * 1024 * 1024, 31),
        test_bytes(2 * 1024 * 1024, 32),
    );
    mirror.put("/m/slow.bin", v1.clone());
    // 32 pieces, 40 ms apart: about 1.3 s.
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(40)));
    let slow = {
        let (client, url) = (client.clone(), b.url("/r/slow.bin"));
        tokio::spawn(async move { get(&client, &url).await })
    };
    wait_until("B's fill to start", async || {
        mirror.hits("/m/slow.bin") == 1
    })
    .await;
    let removed = client
        .delete(a.url("/-/cache/r/slow.bin"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), 200);
    mirror.set_fault(Fault::None);
    mirror.put("/m/slow.bin", v2.clone());
    let (status, _, bytes) = slow.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&v1));
    wait_until("B's purged fill to end", async || {
        get_json(&client, &b.url("/-/status")).await["fills_in_progress"] == 0
    })
    .await;
    for proxy in [&b, &a] {
        let (status, _, bytes) = get(&client, &proxy.url("/r/slow.bin")).await;
        assert_eq!(status, 200);
        assert_eq!(sha256_hex(&bytes.unwrap()), sha256_hex(&v2), "v1 came back");
    }
    assert_eq!(mirror.hits("/m/slow.bin"), 2);

    // Redis goes away: not one failed request.
    redis.stop();
    let mut failed = 0;
    let mut sent = 0;
    for round in 0..2 {
        for i in 0..4 {
            for proxy in [&a, &b] {
                sent += 1;
                let (status, _, bytes) = get(&client, &proxy.url(&format!("/r/f{i}"))).await;
                if status != 200
                    || sha256_hex(&bytes.unwrap()) != sha256_hex(&test_bytes(200_000, i))
                {
                    failed += 1;
                }
            }
        }
        println!("redis down, round {round}: sent {sent}, failed {failed}");
    }
    assert_eq!(failed, 0);

    // Redis is back: locks work again.
    let _redis = OwnRedis::start(redis_port).expect("redis restarts");
    wait_until("both instances to subscribe again", async || {
        OwnRedis::subscribers(redis_port).await == 2
    })
    .await;
    mirror.put("/m/after.bin", test_bytes(4 * 1024 * 1024, 77));
    mirror.set_fault(Fault::SlowBody(Duration::from_millis(5)));
    let requests = (0..20).map(|i| {
        let url = if i % 2 == 0 {
            a.url("/r/after.bin")
        } else {
            b.url("/r/after.bin")
        };
        let client = client.clone();
        async move { get(&client, &url).await.0 }
    });
    assert!(join_all(requests).await.iter().all(|s| *s == 200));
    assert_eq!(
        mirror.hits("/m/after.bin"),
        1,
        "the lock works again once redis is back"
    );
    let metrics = get_text(&client, &a.url("/-/metrics")).await;
    assert!(
        !metrics.contains("mirrorcache_redis_errors_total 0"),
        "the outage was counted"
    );
    drop(redis);
}
