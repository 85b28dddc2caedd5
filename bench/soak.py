#!/usr/bin/env python3
"""bench/soak.py — the soak run's origins and clients (started by bench/soak.sh).

Two origin mirrors on 127.0.0.1 (threaded HTTP servers in this process) serve
deterministic bytes: immutable blobs `blobs/<n>-<size>.bin` (the bytes are a
function of the name) and mutable documents `docs/<k>.json` whose version
moves every DOC_PERIOD seconds. Each origin flaps on a schedule: within every
minute, origin A is faulty for seconds 0-20 and origin B for 30-50, cycling
through the faults down (connection closed), 500, hung (no answer for 60 s),
truncating (Content-Length announced, half sent) and lying (a blob: other
bytes of the same length, only for blobs an origin already sent truly — a
first download nothing declares cannot be caught lying, and becomes the
pin; a document: a Content-Length longer than its body).

Clients (WORKERS threads) mix hits, misses, documents and ranges; every
minute a fan-out of FANOUT clients asks for one cold 8 MiB blob; every
PURGE_EVERY seconds one cached blob is purged through the admin API (so its
refetch meets the pin on first use, possibly from a lying mirror). Every body
is checked against the origin's bytes (a document: against every version the
origin ever served). The proxy is killed with SIGKILL and restarted every
KILL_EVERY seconds; Postgres is restarted once and Redis stopped for a while
once (by soak.sh, through the hooks below, at PG_AT and REDIS_AT seconds).

A request is "in a fault window" when it overlaps a mirror's fault, the
proxy's restart (kill to healthy + 2 s), the Postgres restart or the Redis
outage; a failure outside every window is a failure to look at. RSS and open
file descriptors of the proxy are sampled every 10 s.

Output: a JSON report on stdout (soak.sh renders it).
"""

import hashlib
import http.client
import http.server
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

DURATION = float(os.environ.get("DURATION", "1200"))
WORKERS = int(os.environ.get("WORKERS", "8"))
FANOUT = int(os.environ.get("FANOUT", "50"))
KILL_EVERY = float(os.environ.get("KILL_EVERY", "300"))
PURGE_EVERY = float(os.environ.get("PURGE_EVERY", "10"))
DOC_PERIOD = 60.0
PG_AT = float(os.environ.get("PG_AT", str(DURATION * 0.4)))
REDIS_AT = float(os.environ.get("REDIS_AT", str(DURATION * 0.65)))
REDIS_DOWN_FOR = float(os.environ.get("REDIS_DOWN_FOR", "60"))
FAULTS = ["down", "500", "hung", "truncate", "lie"]

PROXY_CMD = os.environ["PROXY_CMD"].split()  # the binary and its arguments
PROXY_BASE = os.environ["PROXY_BASE"]  # http://127.0.0.1:PORT
PROXY_LOG = os.environ["PROXY_LOG"]
STORE_TMP = os.environ["STORE_TMP"]
ADMIN = os.environ["ADMIN_TOKEN"]
PG_RESTART = os.environ.get("PG_RESTART", "")  # shell commands, may be empty
REDIS_STOP = os.environ.get("REDIS_STOP", "")
REDIS_START = os.environ.get("REDIS_START", "")
PORTS = [int(p) for p in os.environ["ORIGIN_PORTS"].split(",")]

T0 = time.monotonic()


def now():
    return time.monotonic() - T0


# ---------------------------------------------------------------- content

_blob_cache = {}
_blob_lock = threading.Lock()


def blob_bytes(name):
    """The bytes of blobs/<n>-<size>.bin: a function of the name."""
    with _blob_lock:
        if name in _blob_cache:
            return _blob_cache[name]
    size = int(name.rsplit("-", 1)[1].split(".")[0])
    data = random.Random(name).randbytes(size)
    with _blob_lock:
        if len(_blob_cache) > 400:
            _blob_cache.clear()
        _blob_cache[name] = data
    return data


def doc_version(t):
    return int(t // DOC_PERIOD)


def doc_bytes(k, version):
    body = json.dumps({"doc": k, "version": version, "pad": "x" * (2000 + 37 * k)})
    return body.encode()


# ---------------------------------------------------------------- faults

FAULTS_ON = [False]


def fault_of(origin, t):
    """The fault origin 0 (A) or 1 (B) has at time t, or None."""
    if not FAULTS_ON[0]:
        return None
    minute, second = divmod(t, 60.0)
    start = 0.0 if origin == 0 else 30.0
    if not (start <= second < start + 20.0):
        return None
    return FAULTS[(int(minute) + origin) % len(FAULTS)]


class Windows:
    """Intervals (start, end) during which something is deliberately wrong."""

    def __init__(self):
        self.lock = threading.Lock()
        self.intervals = []

    def add(self, start, end):
        with self.lock:
            self.intervals.append((start, end))

    def open(self, start):
        """A window whose end is not known yet; `close` gives it one."""
        with self.lock:
            self.intervals.append((start, float("inf")))
            return len(self.intervals) - 1

    def close(self, index, end):
        with self.lock:
            self.intervals[index] = (self.intervals[index][0], end)

    def overlaps(self, start, end):
        # Mirror faults, from the schedule (with a 2 s margin: a hung
        # mirror's attempt outlives its window by first_byte_timeout).
        for origin in (0, 1):
            t = start - 3.0
            while t <= end + 0.5:
                if fault_of(origin, t) is not None:
                    return True
                t += 0.5
        with self.lock:
            return any(s <= end and start <= e for s, e in self.intervals)


WINDOWS = Windows()


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    origin = 0
    served_docs = {}  # (k) -> set of versions served
    served_true = set()  # blobs some origin has sent whole and true
    served_lock = threading.Lock()
    requests = [0, 0]

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head=False):
        Origin.requests[self.origin] += 1
        fault = fault_of(self.origin, now())
        path = self.path.split("?", 1)[0].lstrip("/")
        if path.startswith("blobs/"):
            body = blob_bytes(path[len("blobs/"):])
            # A blob nobody was ever sent truly cannot be caught lying (no
            # index declares it, so its first download is its pin): a lying
            # origin lies only about blobs already fetched, and refuses the
            # others' connections.
            if fault == "lie" and path not in Origin.served_true:
                fault = "down"
        elif path.startswith("docs/"):
            k = int(path[len("docs/"):].split(".")[0])
            version = doc_version(now())
            body = doc_bytes(k, version)
            with Origin.served_lock:
                Origin.served_docs.setdefault(k, set()).add(version)
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if fault == "down":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if fault == "500":
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if fault == "hung":
            time.sleep(60)
            self.close_connection = True
            return
        # A lie: a blob's bytes are others of the same length (only its pin
        # can tell); a document announces more bytes than it sends (nothing
        # declares a mutable document's bytes, so its length is the lie a
        # proxy can catch).
        length = len(body)
        if fault == "lie" and path.startswith("blobs/"):
            body = random.Random(path + "lie").randbytes(len(body))
        elif fault == "lie":
            length += 100
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if head:
            return
        try:
            if fault == "truncate":
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(body)
            if fault is None and path.startswith("blobs/"):
                Origin.served_true.add(path)
            if length != len(body):
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True


class Quiet(http.server.ThreadingHTTPServer):
    """Connections the proxy drops (a hedge, a kill) are not worth a trace."""

    def handle_error(self, request, client_address):
        pass


def start_origins():
    servers = []
    for i, port in enumerate(PORTS):
        handler = type(f"Origin{i}", (Origin,), {"origin": i})
        server = Quiet(("127.0.0.1", port), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    return servers


# ---------------------------------------------------------------- proxy

class Proxy:
    def __init__(self):
        self.process = None
        self.lock = threading.Lock()
        self.restarts = 0

    def start(self):
        log = open(PROXY_LOG, "ab")
        self.process = subprocess.Popen(PROXY_CMD, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                status, _, _ = request("GET", "/-/health", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("the proxy did not come up")

    def kill_and_restart(self):
        window = WINDOWS.open(now())
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.start()
        self.restarts += 1
        WINDOWS.close(window, now() + 2.0)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def pid(self):
        return self.process.pid


def request(method, path, headers=None, timeout=30):
    host, port = PROXY_BASE.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        return response.status, dict(response.getheaders()), body
    finally:
        conn.close()


# ---------------------------------------------------------------- clients

class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_kind = {}
        self.failures_outside = []
        self.failures_inside = []
        self.wrong = []

    def count(self, kind, outcome, detail=""):
        with self.lock:
            row = self.by_kind.setdefault(kind, {"requests": 0, "served": 0, "failed": 0, "failed_in_window": 0, "wrong": 0})
            row["requests"] += 1
            row[outcome] += 1
            if outcome == "wrong":
                self.wrong.append(detail)
            if outcome == "failed" and detail:
                self.failures_outside.append(detail)


TALLY = Tally()
primed = []  # blob names known to be cached
primed_lock = threading.Lock()
counter = [0]
counter_lock = threading.Lock()


def new_blob(size=None):
    with counter_lock:
        counter[0] += 1
        n = counter[0]
    size = size or random.choice([1024, 16 * 1024, 200 * 1024, 1024 * 1024, 3 * 1024 * 1024])
    return f"{n}-{size}.bin"


def check(kind, method, path, headers, judge):
    start = now()
    try:
        status, response_headers, body = request(method, path, headers)
        error = None
    except (OSError, http.client.HTTPException) as e:
        status, response_headers, body, error = None, {}, b"", repr(e)
    end = now()
    if status is not None and 200 <= status < 300:
        verdict = judge(status, response_headers, body)
        if verdict is None:
            TALLY.count(kind, "served")
            return True
        TALLY.count(kind, "wrong", f"{path} at {start:.1f}s: {verdict}")
        return False
    if WINDOWS.overlaps(start, end):
        TALLY.count(kind, "failed_in_window")
        with TALLY.lock:
            if len(TALLY.failures_inside) < 2000:
                TALLY.failures_inside.append(f"{kind} at {start:.1f}-{end:.1f}s: {status or error}")
    else:
        TALLY.count(kind, "failed", f"{method} {path} at {start:.1f}-{end:.1f}s: {status or error}")
    # A client that failed waits a little before its next request (a proxy
    # restarting is not hammered; the counts stay comparable).
    time.sleep(0.2)
    return False


def judge_blob(name, wanted_range=None):
    def judge(status, headers, body):
        full = blob_bytes(name)
        if status == 206 and wanted_range:
            a, b = wanted_range
            return None if body == full[a : b + 1] else f"range {a}-{b} differs"
        if body != full:
            return f"{len(body)} bytes, sha256 {hashlib.sha256(body).hexdigest()[:12]}"
        return None

    return judge


def judge_doc(k):
    def judge(status, headers, body):
        with Origin.served_lock:
            versions = set(Origin.served_docs.get(k, set()))
        if any(body == doc_bytes(k, v) for v in versions):
            return None
        return "not a version the origin served"

    return judge


def worker(stop, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        roll = rng.random()
        with primed_lock:
            known = list(primed[-500:])
        if roll < 0.45 and known:
            name = rng.choice(known)
            check("hit", "GET", f"/gen/blobs/{name}", {}, judge_blob(name))
        elif roll < 0.65:
            name = new_blob()
            if check("miss", "GET", f"/gen/blobs/{name}", {}, judge_blob(name)):
                with primed_lock:
                    primed.append(name)
        elif roll < 0.85:
            k = rng.randrange(5)
            check("document", "GET", f"/gen/docs/{k}.json", {}, judge_doc(k))
        elif known:
            name = rng.choice(known)
            size = len(blob_bytes(name))
            a = rng.randrange(size)
            b = min(size - 1, a + rng.randrange(64 * 1024))
            check("range", "GET", f"/gen/blobs/{name}", {"Range": f"bytes={a}-{b}"}, judge_blob(name, (a, b)))


def fan_out(stop):
    """At second 25 of every minute (both origins healthy then)."""
    while True:
        delay = (25.0 - now() % 60.0) % 60.0
        if delay < 1.0:
            delay += 60.0
        if stop.wait(delay):
            return
        name = new_blob(8 * 1024 * 1024)
        threads = [
            threading.Thread(target=check, args=("fan-out", "GET", f"/gen/blobs/{name}", {}, judge_blob(name)))
            for _ in range(FANOUT)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with primed_lock:
            primed.append(name)


def purger(stop):
    rng = random.Random(7)
    while not stop.wait(PURGE_EVERY):
        with primed_lock:
            if not primed:
                continue
            name = rng.choice(primed)
        try:
            request("DELETE", f"/-/cache/gen/blobs/{name}", {"Authorization": f"Bearer {ADMIN}"})
        except OSError:
            pass


def sampler(stop, proxy, samples):
    while not stop.wait(10.0):
        pid = proxy.pid()
        try:
            status = open(f"/proc/{pid}/status").read()
            rss = int(next(l for l in status.splitlines() if l.startswith("VmRSS:")).split()[1])
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, StopIteration):
            continue
        samples.append({"t": round(now(), 1), "pid": pid, "rss_kib": rss, "fds": fds})


def run_hook(command, what):
    if command:
        subprocess.run(command, shell=True, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def outages(stop, proxy):
    """The kills, the Postgres restart and the Redis outage, on schedule."""
    events = []
    schedule = [(KILL_EVERY * i, "kill") for i in range(1, int(DURATION // KILL_EVERY) + 1) if KILL_EVERY * i < DURATION - 30]
    if PG_RESTART:
        schedule.append((PG_AT, "postgres"))
    if REDIS_STOP:
        schedule.append((REDIS_AT, "redis"))
    for at, what in sorted(schedule):
        if stop.wait(max(0.0, at - now())):
            return events
        start = now()
        if what == "kill":
            proxy.kill_and_restart()
        elif what == "postgres":
            window = WINDOWS.open(start)
            run_hook(PG_RESTART, what)
            WINDOWS.close(window, now() + 5.0)
        elif what == "redis":
            window = WINDOWS.open(start)
            run_hook(REDIS_STOP, what)
            stopped = stop.wait(REDIS_DOWN_FOR)
            run_hook(REDIS_START, what)
            WINDOWS.close(window, now() + 5.0)
            if stopped:
                return events
        events.append({"what": what, "at": round(start, 1), "took": round(now() - start, 1)})
    return events


def slope_per_hour(points):
    if len(points) < 3:
        return None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var * 3600


def main():
    start_origins()
    proxy = Proxy()
    proxy.start()
    # Warm-up, before any fault: some blobs cached (and pinned) from good bytes.
    global T0
    for _ in range(40):
        name = new_blob()
        status, _, body = request("GET", f"/gen/blobs/{name}")
        if status == 200 and body == blob_bytes(name):
            primed.append(name)
    # The fault schedule starts now.
    T0 = time.monotonic()
    FAULTS_ON[0] = True
    stop = threading.Event()
    samples = []
    threads = [threading.Thread(target=worker, args=(stop, i), daemon=True) for i in range(WORKERS)]
    threads += [
        threading.Thread(target=fan_out, args=(stop,), daemon=True),
        threading.Thread(target=purger, args=(stop,), daemon=True),
        threading.Thread(target=sampler, args=(stop, proxy, samples), daemon=True),
    ]
    events = []
    outage_thread = threading.Thread(target=lambda: events.extend(outages(stop, proxy)), daemon=True)
    for t in threads + [outage_thread]:
        t.start()
    time.sleep(DURATION)
    stop.set()
    for t in threads[:WORKERS]:
        t.join(timeout=90)
    outage_thread.join(timeout=120)
    proxy.stop()
    temp_left = [f for f in os.listdir(STORE_TMP) if not f.endswith(".lock")]
    # Slopes per process (a kill resets the RSS), and over the run.
    by_pid = {}
    for s in samples:
        by_pid.setdefault(s["pid"], []).append(s)
    segments = []
    for pid, rows in by_pid.items():
        segments.append({
            "pid": pid,
            "from_s": rows[0]["t"],
            "to_s": rows[-1]["t"],
            "samples": len(rows),
            "rss_mib_first": round(rows[0]["rss_kib"] / 1024, 1),
            "rss_mib_last": round(rows[-1]["rss_kib"] / 1024, 1),
            "rss_mib_max": round(max(r["rss_kib"] for r in rows) / 1024, 1),
            "rss_slope_mib_per_h": (lambda v: None if v is None else round(v / 1024, 1))(
                slope_per_hour([(r["t"], r["rss_kib"]) for r in rows[len(rows) // 3 :]])
            ),
            "fds_first": rows[0]["fds"],
            "fds_last": rows[-1]["fds"],
            "fds_max": max(r["fds"] for r in rows),
            "fds_slope_per_h": (lambda v: None if v is None else round(v, 1))(
                slope_per_hour([(r["t"], r["fds"]) for r in rows[len(rows) // 3 :]])
            ),
        })
    totals = {"requests": 0, "served": 0, "failed": 0, "failed_in_window": 0, "wrong": 0}
    for row in TALLY.by_kind.values():
        for key in totals:
            totals[key] += row[key]
    report = {
        "duration_s": DURATION,
        "workers": WORKERS,
        "fan_out_clients": FANOUT,
        "by_kind": TALLY.by_kind,
        "totals": totals,
        "wrong_bodies": TALLY.wrong[:20],
        "failures_outside_windows": TALLY.failures_outside[:20],
        "failures_inside_windows": TALLY.failures_inside,
        "temp_files_left": len(temp_left),
        "restarts": proxy.restarts,
        "events": events,
        "origin_requests": Origin.requests,
        "segments": segments,
        "samples": samples,
    }
    json.dump(report, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
