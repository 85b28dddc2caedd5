//! Hits on plain HTTP/1 connections are sent from the blob's file with
//! `sendfile`: bodies from the in-memory tier's blobs, packed blobs, blobs
//! of their own, bodies larger than one stand-in chunk, byte ranges and
//! small bodies sent from memory, all on one keep-alive connection with
//! the requests pipelined, each body hashing to the mirror's bytes.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::proxy::{config_text, start_text};
use crate::support::{sha256_hex, test_bytes, MirrorServer};

/// (path, body) the mirror serves.
fn bodies() -> Vec<(String, Vec<u8>)> {
    [1_000, 40_000, 65_535, 100_000, 300_000, 3_000_000]
        .iter()
        .enumerate()
        .map(|(i, &size)| (format!("/r/b-{size}"), test_bytes(size, 700 + i as u64)))
        .collect()
}

/// Reads one response off `stream` (after `buffered` bytes already read):
/// its status, its body (by `Content-Length`) and what followed it.
async fn read_response(
    stream: &mut tokio::net::TcpStream,
    mut buffered: Vec<u8>,
) -> (u16, Vec<u8>, Vec<u8>) {
    let mut chunk = vec![0; 64 * 1024];
    let end = loop {
        if let Some(at) = buffered.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed inside a response head");
        buffered.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffered[..end]).to_string();
    let status: u16 = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .expect("a content-length");
    while buffered.len() < end + length {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed inside a body");
        buffered.extend_from_slice(&chunk[..n]);
    }
    let rest = buffered.split_off(end + length);
    (status, buffered.split_off(end), rest)
}

async fn pipelined_hits_are_whole(storage: &str) {
    let mirror = MirrorServer::start().await;
    let bodies = bodies();
    for (path, body) in &bodies {
        mirror.put(
            &format!("/m{}", path.trim_start_matches("/r")),
            body.clone(),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let remote = format!(
        "[[remote]]\nname = \"r\"\nmirrors = [\"{}\"]\nimmutable = [\"**\"]\n",
        mirror.url("/m")
    );
    let text =
        config_text(dir.path(), &remote).replace("[storage]\n", &format!("[storage]\n{storage}\n"));
    let running = start_text(&text).await;
    let client = reqwest::Client::new();
    let base = format!("http://{}", running.local_addr);
    for (path, body) in &bodies {
        let fetched = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(
            sha256_hex(&fetched.bytes().await.unwrap()),
            sha256_hex(body)
        );
    }
    running.proxy.fills.wait_idle().await;

    // Every body twice (the first hit may read into the memory tier), and
    // two ranges, pipelined on one connection: the client reads nothing
    // until all are asked, so the large bodies wait on a full socket.
    let mut asked = Vec::new();
    for _ in 0..2 {
        for (path, body) in &bodies {
            asked.push((path.clone(), None, body.clone()));
        }
    }
    let large = &bodies[5].1;
    asked.push((
        bodies[5].0.clone(),
        Some("bytes=1000-2000000"),
        large[1000..2_000_001].to_vec(),
    ));
    asked.push((
        bodies[3].0.clone(),
        Some("bytes=-40000"),
        bodies[3].1[60_000..].to_vec(),
    ));
    let mut stream = tokio::net::TcpStream::connect(running.local_addr)
        .await
        .unwrap();
    let mut requests = String::new();
    for (path, range, _) in &asked {
        requests.push_str(&format!("GET {path} HTTP/1.1\r\nHost: test\r\n"));
        if let Some(range) = range {
            requests.push_str(&format!("Range: {range}\r\n"));
        }
        requests.push_str("\r\n");
    }
    stream.write_all(requests.as_bytes()).await.unwrap();
    let mut rest = Vec::new();
    for (path, range, body) in &asked {
        let (status, got, after) = read_response(&mut stream, rest).await;
        rest = after;
        let expected = if range.is_some() { 206 } else { 200 };
        assert_eq!(status, expected, "{path} {range:?}");
        assert_eq!(
            sha256_hex(&got),
            sha256_hex(body),
            "{path} {range:?} ({storage})"
        );
    }
    assert!(rest.is_empty());
    for (path, _) in &bodies {
        assert_eq!(
            mirror.hits(&format!("/m{}", path.trim_start_matches("/r"))),
            1
        );
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_hits_from_the_memory_tier_and_files_are_whole() {
    pipelined_hits_are_whole("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_hits_from_packs_and_files_without_the_memory_tier_are_whole() {
    pipelined_hits_are_whole("memory_cache_size = \"0\"").await;
}
