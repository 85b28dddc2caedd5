#!/usr/bin/env bash
# bench/hf-fanout.sh — a cold LFS file (2 GiB by default) fetched by 8
# concurrent `hf_hub_download`s from fresh homes through a `huggingface`
# remote, against the fixture hub and CDN (tests/it/support/hf_hub.py, the
# file served from the page cache through mmap), all in one run:
#   1. one `hf_hub_download` straight from the fixture (the baseline; with
#      HF_HUB_DISABLE_XET=1, since the fixture sends the Xet headers the real
#      hub sends and the client would otherwise ask for a Xet token);
#   2. 8 at once through the proxy, cold: wall time until the last is done,
#      the bytes the CDN sent (target: 1× the file), the hub's GETs of it;
#   3. the proxy's peak RSS (VmHWM) over the run;
#   4. one more through the proxy, warm.
# Recorded in BENCHMARKS.md ("Model weights"). Needs huggingface_hub in the
# venv .ci/tools.sh makes.
#
#   SIZE_MIB=2048 CLIENTS=8 bash bench/hf-fanout.sh
#   MIRRORCACHE_BIN=target/debug/mirrorcache bash bench/hf-fanout.sh   # no release build
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
SIZE_MIB=${SIZE_MIB:-2048}
CLIENTS=${CLIENTS:-8}
PY=${MIRRORCACHE_HF_VENV:-$HOME/.cache/mirrorcache/hf-venv}/bin/python
need_tools "bash .ci/tools.sh" python3 curl ss "$PY"
if [ -z "${MIRRORCACHE_BIN:-}" ]; then
    cargo build --release -q
    MIRRORCACHE_BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/mirrorcache
fi
WORK=$(mktemp -d)
trap 'stop_started; rm -rf "$WORK"' EXIT

head -c "$((SIZE_MIB * 1024 * 1024))" /dev/urandom >"$WORK/weights.bin"
python3 tests/it/support/hf_hub.py --lfs-file "$WORK/weights.bin" >"$WORK/hub.json" &
PIDS+=($!)
until [ -s "$WORK/hub.json" ]; do sleep 0.2; done
json() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }
HUB=$(json "$WORK/hub.json" '["hub"]')
CDN=$(json "$WORK/hub.json" '["cdn"]')
SHA=$(json "$WORK/hub.json" '["files"]["org/tiny-model/model.safetensors"]')

# download HOME ENDPOINT [ENV...]: one hf_hub_download, its sha256 checked.
download() {
    local home=$1 endpoint=$2
    shift 2
    env HF_HOME="$home" HF_ENDPOINT="$endpoint" HF_HUB_DISABLE_TELEMETRY=1 \
        HF_HUB_DISABLE_PROGRESS_BARS=1 "$@" "$PY" -c '
import hashlib, sys
from huggingface_hub import hf_hub_download
p = hf_hub_download("org/tiny-model", "model.safetensors")
h = hashlib.sha256()
with open(p, "rb") as f:
    for b in iter(lambda: f.read(1 << 22), b""):
        h.update(b)
sys.exit(h.hexdigest() != sys.argv[1])' "$SHA"
}
now() { date +%s.%N; }
cdn_bytes() { curl -s "$HUB/_fixture/log" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cdn_bytes"])'; }

start=$(now)
download "$WORK/direct" "$HUB" HF_HUB_DISABLE_XET=1
direct=$(python3 -c "print($(now) - $start)")
rm -rf "$WORK/direct"

free_port
cat >"$WORK/mirrorcache.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
[storage]
path = "$WORK/store"
[metadata]
url = "sqlite://$WORK/meta.db"
[[remote]]
name = "hf"
kind = "huggingface"
mirrors = ["$HUB"]
files = ["$CDN"]
EOF
"$MIRRORCACHE_BIN" serve --config "$WORK/mirrorcache.toml" 2>"$WORK/proxy.log" &
PROXY=$!
PIDS+=("$PROXY")
wait_up -s 30 "http://127.0.0.1:$PORT/-/health"
curl -s -XPOST "$HUB/_fixture/reset" >/dev/null

start=$(now)
waits=()
for n in $(seq "$CLIENTS"); do
    download "$WORK/home$n" "http://127.0.0.1:$PORT/hf" &
    waits+=($!)
done
failed=0
for pid in "${waits[@]}"; do wait "$pid" || failed=$((failed + 1)); done
cold=$(python3 -c "print($(now) - $start)")
upstream=$(cdn_bytes)
hub_gets=$(curl -s "$HUB/_fixture/log" | python3 -c 'import json,sys; print(sum(1 for r in json.load(sys.stdin)["hub"] if r["method"] == "GET" and "model.safetensors" in r["path"]))')
rm -rf "$WORK"/home*

start=$(now)
download "$WORK/warm" "http://127.0.0.1:$PORT/hf"
warm=$(python3 -c "print($(now) - $start)")
rss=$(awk '/VmHWM/ {print $2}' "/proc/$PROXY/status")

python3 - "$SIZE_MIB" "$CLIENTS" "$direct" "$cold" "$warm" "$upstream" "$hub_gets" "$rss" "$failed" <<'EOF'
import os, sys
size_mib, clients, direct, cold, warm, upstream, hub_gets, rss, failed = sys.argv[1:]
size = int(size_mib) * 1024 * 1024
print(f"file {size_mib} MiB, {clients} clients, load average {os.getloadavg()[0]:.1f}, failed clients {failed}")
print(f"one direct download:           {float(direct):7.2f} s")
print(f"{clients} cold through the proxy:    {float(cold):7.2f} s  ({float(cold) / float(direct):.2f}x one direct)")
print(f"one warm through the proxy:    {float(warm):7.2f} s  ({float(warm) / float(direct):.2f}x one direct)")
print(f"upstream bytes (CDN):          {int(upstream)}  ({int(upstream) / size:.2f}x the file), hub GETs of it: {hub_gets}")
print(f"proxy peak RSS (VmHWM):        {int(rss) / 1024:.0f} MiB")
EOF
