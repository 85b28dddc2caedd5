#!/usr/bin/env python3
"""bench/pack-io.py — what a small blob costs the disk and the kernel, with
and without the pack store: deterministic counts, no timing.

  misses  N distinct 1 KiB misses (C keep-alive clients, an origin giving
          every key its own bytes), then a `sync`: KB written to the
          device a miss (from /sys/block/DEV/stat), so the blob's file,
          directory and inode (or its share of a pack) and SQLite's rows
  hits    M hits on uniformly random keys of those N, one client, under
          `strace -c -f`: system calls a hit, and `openat` calls a hit

Run it as root on a fresh journaled file system (bench/scratch-fs.sh), once
per setting of `storage.pack_below`, alternating:

    python3 bench/pack-io.py target/release/mirrorcache /mnt/benchfs/a loop0 0
    python3 bench/pack-io.py target/release/mirrorcache /mnt/benchfs/b loop0 64KiB

  env: N=2000 C=8 M=2000 (M=0: no strace run)
Only 127.0.0.1 is used. Results: BENCHMARKS.md ("The pack store")."""
import hashlib
import http.client
import http.server
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time

mc, root, dev, pack_below = sys.argv[1:5]
N = int(os.environ.get("N", "2000"))
C = int(os.environ.get("C", "8"))
M = int(os.environ.get("M", "2000"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        seed = hashlib.sha256(self.path.encode()).digest()
        body = (seed * 32)[:1024]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def sectors_written():
    return int(open(f"/sys/block/{dev}/stat").read().split()[6])


def get_all(port, keys):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    for key in keys:
        conn.request("GET", f"/r/{key}")
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
    conn.close()


def settle(port):
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        conn.request("GET", "/-/status")
        status = json.loads(conn.getresponse().read())
        conn.close()
        if status.get("fills_in_progress", 0) == 0:
            return
        time.sleep(0.05)


shutil.rmtree(root, ignore_errors=True)
os.makedirs(root)
origin_port = free_port()
origin = http.server.ThreadingHTTPServer(("127.0.0.1", origin_port), Origin)
threading.Thread(target=origin.serve_forever, daemon=True).start()
port = free_port()
with open(f"{root}/mc.toml", "w") as f:
    f.write(
        f'[server]\nlisten = "127.0.0.1:{port}"\n\n'
        f'[storage]\npath = "{root}/store"\nmemory_cache_size = "0"\npack_below = "{pack_below}"\n\n'
        f'[metadata]\nurl = "sqlite://{root}/meta.db"\n\n'
        f'[[remote]]\nname = "r"\nmirrors = ["http://127.0.0.1:{origin_port}/d"]\nimmutable = ["**"]\n'
    )
log = open(f"{root}/mc.log", "w")
server = subprocess.Popen([mc, "serve", "--config", f"{root}/mc.toml"], stderr=log, stdout=log)
try:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    get_all(port, [f"warm-{i}" for i in range(64)])
    settle(port)
    subprocess.run(["sync", "-f", root], check=True)
    s0 = sectors_written()
    keys = [f"k{i}" for i in range(N)]
    workers = [threading.Thread(target=get_all, args=(port, keys[w::C])) for w in range(C)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    settle(port)
    subprocess.run(["sync", "-f", root], check=True)
    kb = (sectors_written() - s0) * 512 / N / 1000
    print(f"pack_below={pack_below}: {N} distinct 1 KiB misses, {C} clients, {kb:.1f} KB written to {dev} a miss")
    if M:
        sample = [random.choice(keys) for _ in range(M)]
        get_all(port, sample[:100])
        out = f"{root}/strace.txt"
        tracer = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(server.pid)])
        time.sleep(1.0)
        get_all(port, sample)
        tracer.terminate()
        tracer.wait()
        total = opens = 0
        for line in open(out):
            parts = line.split()
            if len(parts) >= 5 and parts[3].isdigit():
                name = parts[-1]
                if name == "total":
                    total = int(parts[3])
                elif name in ("openat", "open"):
                    opens = int(parts[3])
        print(f"pack_below={pack_below}: {M} random hits, {total / M:.1f} system calls and {opens / M:.2f} openat a hit")
finally:
    server.terminate()
    server.wait()
    origin.shutdown()
    shutil.rmtree(root, ignore_errors=True)
