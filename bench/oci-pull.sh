#!/usr/bin/env bash
# bench/oci-pull.sh — container image pulls through an `oci` remote, all
# measured in one run against one Debian `docker-registry` on 127.0.0.1:
#   1. 8 `skopeo copy` clients pull a cold image with one 64 MiB layer at
#      once through the proxy: the registry's access log counts the upstream
#      GETs of each blob and of the manifest;
#   2. the proxy's peak RSS (VmHWM) while they pull;
#   3. one `skopeo copy` of another cold 64 MiB image: straight from the
#      registry, cold through the proxy, then warm through the proxy.
# Recorded in BENCHMARKS.md ("Container image pulls"). Needs what
# .ci/tools.sh installs (docker-registry, skopeo, umoci).
#
#   RUNS=3 bash bench/oci-pull.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
RUNS=${RUNS:-3}
need_tools "bash .ci/tools.sh" docker-registry skopeo umoci curl ss
cargo build --release -q
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/mirrorcache
WORK=$(mktemp -d)
trap 'stop_started; rm -rf "$WORK"' EXIT

echo '{"default":[{"type":"insecureAcceptAnything"}]}' >"$WORK/policy.json"
sk() { REGISTRY_AUTH_FILE=$WORK/auth.json skopeo --policy "$WORK/policy.json" "$@"; }

# Two images of one 64 MiB layer of random (incompressible) bytes each.
umoci init --layout "$WORK/layout"
for tag in shared solo; do
    umoci new --image "$WORK/layout:$tag"
    head -c 64M /dev/urandom >"$WORK/$tag.data"
    umoci insert --rootless --image "$WORK/layout:$tag" "$WORK/$tag.data" /data
done

free_port
REG_PORT=$PORT
cat >"$WORK/registry.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $WORK/registry
http:
  addr: 127.0.0.1:$REG_PORT
EOF
docker-registry serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
PIDS+=("$!")
wait_up "http://127.0.0.1:$REG_PORT/v2/"
REG=127.0.0.1:$REG_PORT
for tag in shared solo; do
    sk copy -q --dest-tls-verify=false "oci:$WORK/layout:$tag" "docker://$REG/bench/img:$tag"
done

free_port
MC_PORT=$PORT
mkdir -p "$WORK/mc"
cat >"$WORK/mc/mirrorcache.toml" <<EOF
[server]
listen = "127.0.0.1:$MC_PORT"

[storage]
path = "$WORK/mc/store"

[metadata]
url = "sqlite://$WORK/mc/meta.db"

[log]
level = "warn"

[[remote]]
name = "hub"
kind = "oci"
mirrors = ["http://$REG"]
EOF
"$BIN" serve --config "$WORK/mc/mirrorcache.toml" 2>"$WORK/mc.log" &
MC_PID=$!
PIDS+=("$MC_PID")
wait_up "http://127.0.0.1:$MC_PORT/-/health"
PROXY=127.0.0.1:$MC_PORT

hwm() { awk '/^VmHWM/ {print $2}' "/proc/$MC_PID/status"; }
# seconds COMMAND...: the wall time of COMMAND, in seconds (3 decimals).
seconds() {
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null
    end=$(date +%s.%N)
    awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }'
}
pull() { sk copy -q --src-tls-verify=false "docker://$1" "dir:$2"; }
count() { grep -c "\"$1 $2 HTTP/" "$WORK/registry.log" || true; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "mirrorcache $("$BIN" --version 2>/dev/null || echo '?'), $(skopeo --version), docker-registry $(docker-registry --version | cut -d' ' -f3)"

# 1 and 2: 8 concurrent cold pulls.
RSS_BEFORE=$(hwm)
start=$(date +%s.%N)
PULLS=()
for i in $(seq 1 8); do
    pull "$PROXY/hub/bench/img:shared" "$WORK/shared$i" &
    PULLS+=("$!")
done
for pid in "${PULLS[@]}"; do wait "$pid"; done
end=$(date +%s.%N)
RSS_PEAK=$(hwm)
MANIFEST=$(cat "$WORK/shared1/manifest.json")
echo "8 concurrent cold pulls of a 64 MiB image: $(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }') s"
for blob in $(echo "$MANIFEST" | grep -o 'sha256:[0-9a-f]\{64\}'); do
    echo "  upstream GETs of blob $blob: $(count GET "/v2/bench/img/blobs/$blob")"
done
echo "  upstream GETs of the manifest (by tag): $(count GET /v2/bench/img/manifests/shared)"
echo "  proxy peak RSS (VmHWM): before $((RSS_BEFORE / 1024)) MiB, after the 8 pulls $((RSS_PEAK / 1024)) MiB"

# 3: one client, direct vs cold vs warm through the proxy.
for i in $(seq 1 "$RUNS"); do
    echo "direct pull from the registry, run $i: $(seconds pull "$REG/bench/img:solo" "$WORK/direct$i") s"
done
echo "cold pull through the proxy: $(seconds pull "$PROXY/hub/bench/img:solo" "$WORK/cold") s"
for i in $(seq 1 "$RUNS"); do
    echo "warm pull through the proxy, run $i: $(seconds pull "$PROXY/hub/bench/img:solo" "$WORK/warm$i") s"
done
echo "upstream GETs of solo's blobs after all of that: $(grep -c '"GET /v2/bench/img/blobs/' "$WORK/registry.log") in all (shared: 2, solo direct: $((RUNS * 2)), solo cold: 2)"
