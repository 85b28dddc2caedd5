#!/usr/bin/env python3
"""A fixture Hugging Face hub and its CDN, on 127.0.0.1, imitating what
huggingface_hub (2.x) relies on:

hub (one port):
  GET  /api/{models,datasets,spaces}/{repo}[/revision/{rev}]  repository info (sha, siblings)
  GET  /api/{type}s/{repo}/tree/{rev}?recursive=..&expand=..[&cursor=N]
       a page of PAGE entries, the next page in `Link: <absolute url>; rel="next"`;
       LFS files carry `lfs` and `xetHash` (as the hub does for Xet-backed repos)
  HEAD/GET /[{type}s/]{repo}/resolve/{rev}/{file}
       a file in git: 200, ETag "<git blob sha1>", X-Repo-Commit; 304 on If-None-Match
       an LFS file: 302 to the CDN with a signed URL (Expires, Signature), X-Repo-Commit,
       X-Linked-Etag "<sha256>", X-Linked-Size, ETag, and the Xet headers
       (X-Xet-Hash, Link rel="xet-auth") a client must never see through the proxy
  a gated repo (org/gated) wants `Authorization: Bearer <--token>`: 401 otherwise
  unknown revision / file: 404 with X-Error-Code RevisionNotFound / EntryNotFound

cdn (another port): GET/HEAD /repos/{aa}/{bb}/{sha256}?Expires=..&Signature=..
  403 when the signature is wrong or expired, 400 when an Authorization header
  came along (a signed URL is its own authority); single byte ranges.

control (on the hub port): GET /_fixture/log (requests, CDN bytes, Authorization
seen at the CDN), POST /_fixture/tamper/{on,off} (the CDN flips one byte of every
LFS body), POST /_fixture/hold/{on,off} (the CDN sends the first MiB of a body,
then waits for off), POST /_fixture/reset.

Prints one JSON line {"hub": url, "cdn": url, "files": {...}} once listening.
"""

import argparse
import hashlib
import hmac
import json
import os
import mmap
import random
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = os.urandom(16)
PAGE = 2
LOCK = threading.Lock()
LOG = {"hub": [], "cdn": [], "cdn_bytes": 0, "cdn_authorization": 0}
STATE = {"tamper": False, "hold": None}


def git_blob_sha1(data):
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def pseudo_random(n, seed):
    return random.Random(seed).randbytes(n)


class Repo:
    def __init__(self, repo_id, files, lfs, gated=False):
        self.repo_id = repo_id
        self.files = files  # path -> bytes
        self.lfs = lfs  # paths stored in LFS
        self.gated = gated
        # (git blob sha1, sha256) of each file, hashed once.
        self.sums = {p: (git_blob_sha1(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()}
        tree = "".join(f"{p}:{self.sums[p][0]}\n" for p in sorted(files))
        self.sha = hashlib.sha1(tree.encode()).hexdigest()
        self.refs = {"main": self.sha, "v1.0": self.sha}

    def entry(self, path):
        data = self.files[path]
        oid, sha = self.sums[path]
        item = {"type": "file", "oid": oid, "size": len(data), "path": path}
        if path in self.lfs:
            item["lfs"] = {"oid": sha, "size": len(data), "pointerSize": 134}
            item["xetHash"] = hashlib.sha256(b"xet" + sha.encode()).hexdigest()
        return item

    def tree(self):
        entries = []
        dirs = sorted({p.rsplit("/", 1)[0] for p in self.files if "/" in p})
        for d in dirs:
            entries.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d})
        entries.extend(self.entry(p) for p in sorted(self.files))
        return entries


def make_repos(lfs_mib, lfs_file=None):
    if lfs_file:
        # A large file (the benchmark's) is served from the page cache, not copied.
        with open(lfs_file, "rb") as f:
            weights = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    else:
        weights = pseudo_random(lfs_mib * 1024 * 1024, "weights")
    model = Repo(
        "org/tiny-model",
        {
            "config.json": json.dumps({"model_type": "tiny", "hidden_size": 8}).encode(),
            "README.md": b"# tiny model\n",
            "tokenizer/vocab.txt": b"[PAD]\n[UNK]\nhello\nworld\n",
            "model.safetensors": weights,
        },
        {"model.safetensors"},
    )
    # The same weights under another repository: one blob in the proxy.
    copy = Repo(
        "org/tiny-model-copy",
        {"config.json": b'{"copy": true}', "model.safetensors": weights},
        {"model.safetensors"},
    )
    gated = Repo("org/gated", {"config.json": b'{"gated": true}'}, set(), gated=True)
    data = Repo("org/tiny-data", {"train.csv": b"a,b\n1,2\n"}, set())
    return {("model", r.repo_id): r for r in (model, copy, gated)} | {("dataset", data.repo_id): data}


def signature(path, expires):
    return hmac.new(SECRET, f"{path}:{expires}".encode(), hashlib.sha256).hexdigest()


class Hub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    repos = {}
    cdn_url = ""
    token = None

    def log_message(self, *args):
        pass

    def record(self):
        with LOCK:
            LOG["hub"].append({"method": self.command, "path": self.path})

    def send(self, status, body=b"", headers=(), head=False):
        self.send_response(status)
        sent_length = False
        for name, value in headers:
            self.send_header(name, value)
            sent_length |= name.lower() == "content-length"
        if not sent_length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message, extra=()):
        body = json.dumps({"error": message}).encode()
        self.send(status, body, [("Content-Type", "application/json"), ("X-Error-Code", code),
                                 ("X-Error-Message", message), *extra])

    def do_POST(self):
        if self.path == "/_fixture/tamper/on":
            STATE["tamper"] = True
        elif self.path == "/_fixture/tamper/off":
            STATE["tamper"] = False
        elif self.path == "/_fixture/hold/on":
            STATE["hold"] = threading.Event()
        elif self.path == "/_fixture/hold/off":
            if STATE["hold"] is not None:
                STATE["hold"].set()
            STATE["hold"] = None
        elif self.path == "/_fixture/reset":
            with LOCK:
                LOG["hub"].clear()
                LOG["cdn"].clear()
                LOG["cdn_bytes"] = 0
                LOG["cdn_authorization"] = 0
        else:
            return self.send(404)
        self.send(200, b"ok\n")

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        if self.path == "/_fixture/log":
            with LOCK:
                body = json.dumps(LOG).encode()
            return self.send(200, body, [("Content-Type", "application/json")])
        self.record()
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        if path.startswith("/api/"):
            return self.api(path[len("/api/"):], urllib.parse.parse_qs(url.query), url.query)
        return self.resolve(path[1:])

    def find(self, repo_type, repo_id):
        repo = self.repos.get((repo_type, repo_id))
        if repo is None:
            self.error(401, "RepoNotFound", "Repository not found")
            return None
        if repo.gated and self.headers.get("Authorization") != f"Bearer {self.token}":
            self.error(401, "GatedRepo", "Access to this repository is restricted")
            return None
        return repo

    def revision(self, repo, rev):
        rev = urllib.parse.unquote(rev)
        if rev in repo.refs:
            return repo.refs[rev]
        if rev == repo.sha:
            return rev
        self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return None

    def api(self, rest, query, raw_query):
        m = re.fullmatch(r"(models|datasets|spaces)/([^/]+(?:/[^/]+)?)(?:/(revision|tree)/([^/]+)(/.*)?)?", rest)
        if not m:
            return self.error(404, "NotFound", "no such endpoint")
        repo_type, repo_id, what, rev = m.group(1)[:-1], m.group(2), m.group(3), m.group(4) or "main"
        repo = self.find(repo_type, repo_id)
        if repo is None:
            return
        sha = self.revision(repo, rev)
        if sha is None:
            return
        if what == "tree":
            if query.get("recursive", ["false"])[0].lower() != "true":
                return self.error(400, "BadRequest", "the fixture lists recursively only")
            entries = repo.tree()
            cursor = int(query.get("cursor", ["0"])[0])
            page = entries[cursor:cursor + PAGE]
            headers = [("Content-Type", "application/json")]
            if cursor + PAGE < len(entries):
                kept = [(k, v) for k, v in urllib.parse.parse_qsl(raw_query) if k != "cursor"]
                kept.append(("cursor", str(cursor + PAGE)))
                host = self.headers.get("Host")
                next_url = f"http://{host}/api/{repo_type}s/{repo_id}/tree/{rev}?{urllib.parse.urlencode(kept)}"
                headers.append(("Link", f'<{next_url}>; rel="next"'))
            return self.send(200, json.dumps(page).encode(), headers)
        info = {
            "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
            "id": repo_id,
            "modelId": repo_id,
            "author": repo_id.split("/")[0],
            "sha": sha,
            "lastModified": "2026-01-01T00:00:00.000Z",
            "private": False,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "downloads": int(time.time()) % 1000,
            "likes": 0,
            "tags": [],
            "siblings": [{"rfilename": p} for p in sorted(repo.files)],
        }
        self.send(200, json.dumps(info).encode(), [("Content-Type", "application/json")])

    def resolve(self, rest):
        repo_type = "model"
        for prefix in ("datasets/", "spaces/"):
            if rest.startswith(prefix):
                repo_type, rest = prefix[:-2], rest[len(prefix):]
        m = re.fullmatch(r"([^/]+(?:/[^/]+)?)/resolve/([^/]+)/(.+)", rest)
        if not m:
            return self.error(404, "NotFound", "no such page")
        repo = self.find(repo_type, m.group(1))
        if repo is None:
            return
        sha = self.revision(repo, m.group(2))
        if sha is None:
            return
        file = urllib.parse.unquote(m.group(3))
        if file not in repo.files:
            return self.error(404, "EntryNotFound", f"{file} does not exist", [("X-Repo-Commit", sha)])
        data = repo.files[file]
        oid, sha256 = repo.sums[file]
        etag = f'"{oid}"'
        common = [("X-Repo-Commit", sha), ("Accept-Ranges", "bytes"), ("Vary", "Origin, Accept")]
        if file not in repo.lfs:
            if self.headers.get("If-None-Match") == etag:
                return self.send(304, b"", [("ETag", etag), *common])
            return self.send(200, data, [("ETag", etag), ("Content-Type", "text/plain; charset=utf-8"), *common])
        cdn_path = f"/repos/{sha256[:2]}/{sha256[2:4]}/{sha256}"
        expires = int(time.time()) + 3600
        query = urllib.parse.urlencode({
            "response-content-disposition": f"inline; filename*=UTF-8''{file.rsplit('/', 1)[-1]}",
            "Expires": str(expires),
            "Signature": signature(cdn_path, expires),
            "Key-Pair-Id": "K3FIXTURE",
        })
        host = self.headers.get("Host")
        self.send(302, b"Found. Redirecting", [
            ("Location", f"{self.cdn_url}{cdn_path}?{query}"),
            ("ETag", etag),
            ("X-Linked-Etag", f'"{sha256}"'),
            ("X-Linked-Size", str(len(data))),
            ("X-Xet-Hash", hashlib.sha256(b"xet" + sha256.encode()).hexdigest()),
            ("X-Xet-Refresh-Route", f"/api/{repo_type}s/{repo.repo_id}/xet-read-token/{sha}"),
            ("Link", f'<http://{host}/api/{repo_type}s/{repo.repo_id}/xet-read-token/{sha}>; rel="xet-auth"'),
            ("Content-Type", "text/plain; charset=utf-8"),
            *common,
        ])


class Cdn(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    blobs = {}

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        with LOCK:
            LOG["cdn"].append({"method": self.command, "path": url.path, "range": self.headers.get("Range")})
            if "Authorization" in self.headers:
                LOG["cdn_authorization"] += 1
        if "Authorization" in self.headers:
            return self.plain(400, b"<Error><Code>InvalidArgument</Code>Only one auth mechanism allowed</Error>")
        expires = query.get("Expires", ["0"])[0]
        good = hmac.compare_digest(query.get("Signature", [""])[0], signature(url.path, expires))
        if not good or int(expires) < time.time():
            return self.plain(403, b"<Error><Code>AccessDenied</Code></Error>")
        data = self.blobs.get(url.path.rsplit("/", 1)[-1])
        if data is None:
            return self.plain(404, b"<Error><Code>NoSuchKey</Code></Error>")
        tamper, hold = STATE["tamper"], STATE["hold"]
        start, end, status = 0, len(data) - 1, 200
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m:
            start = int(m.group(1))
            end = min(int(m.group(2)), end) if m.group(2) else end
            status = 206
        body = memoryview(data)[start:end + 1]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "binary/octet-stream")
        self.send_header("ETag", '"' + url.path.rsplit("/", 1)[-1][:32] + '"')
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        if self.command == "GET":
            for at in range(0, len(body), 1 << 20):
                chunk = body[at:at + (1 << 20)]
                if tamper and at == 0 and start == 0:
                    chunk = bytes([chunk[0] ^ 0xFF]) + bytes(chunk[1:])
                self.wfile.write(chunk)
                if hold is not None and at == 0:
                    # The first MiB is out; the rest waits for hold/off.
                    self.wfile.flush()
                    hold.wait(60)
            with LOCK:
                LOG["cdn_bytes"] += len(body)

    def plain(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/xml")
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lfs-mib", type=int, default=4)
    parser.add_argument("--lfs-file", help="serve this file as the LFS weights")
    parser.add_argument("--token", default="hf_fixture_token")
    args = parser.parse_args()
    repos = make_repos(args.lfs_mib, args.lfs_file)
    cdn = ThreadingHTTPServer(("127.0.0.1", 0), Cdn)
    cdn.daemon_threads = True
    for repo in repos.values():
        for path in repo.lfs:
            Cdn.blobs[repo.sums[path][1]] = repo.files[path]
    Hub.repos = repos
    Hub.token = args.token
    Hub.cdn_url = f"http://127.0.0.1:{cdn.server_address[1]}"
    hub = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    hub.daemon_threads = True
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    files = {
        f"{repo_id}/{path}": repo.sums[path][1]
        for (_, repo_id), repo in repos.items()
        for path in repo.files
    }
    commits = {repo_id: repo.sha for (_, repo_id), repo in repos.items()}
    print(json.dumps({"hub": f"http://127.0.0.1:{hub.server_address[1]}", "cdn": Hub.cdn_url,
                      "files": files, "commits": commits}), flush=True)
    hub.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
