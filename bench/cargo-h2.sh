#!/usr/bin/env bash
# bench/cargo-h2.sh — issue 21's `cargo fetch` figure: a project depending on
# 100 tiny crates, fetched through mirrorcache over TLS from a warm cache,
# with cargo's HTTP/2 multiplexing on (ALPN h2) and off (HTTP/1.1), ROUNDS
# interleaved rounds, a fresh CARGO_HOME each time; the median wall time of
# each. The crates and the sparse index are made here and served by nginx.
#
# Usage: bash bench/cargo-h2.sh [target/release/mirrorcache]
#   env: ROUNDS=5 CRATES=100
# Needs nginx, cargo, curl, openssl, python3. Results are in BENCHMARKS.md
# ("Access control and TLS").

set -euo pipefail

BIN=${1:-target/release/mirrorcache}
ROUNDS=${ROUNDS:-5}
CRATES=${CRATES:-100}
source "$(dirname "$0")/lib.sh"
need_tools "" nginx cargo curl openssl python3

WORK=$(mktemp -d /tmp/mc-cargo-h2.XXXXXX)
cleanup() {
    stop_started
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port
O_PORT=$PORT
free_port
M_PORT=$PORT
# The crates (valid .crate tarballs), their sparse index files and config.json.
python3 - "$WORK/www" "$O_PORT" "$CRATES" <<'PY'
import hashlib, io, json, os, sys, tarfile
www, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(www, exist_ok=True)
with open(f"{www}/config.json", "w") as f:
    json.dump({"dl": f"http://127.0.0.1:{port}/crates"}, f)
for i in range(n):
    name = f"mc_c{i}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, text in [("Cargo.toml", f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n'),
                           ("src/lib.rs", "pub fn f() {}\n")]:
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-0.1.0/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    crate = buf.getvalue()
    os.makedirs(f"{www}/crates/{name}/0.1.0", exist_ok=True)
    with open(f"{www}/crates/{name}/0.1.0/download", "wb") as f:
        f.write(crate)
    prefix = f"{name[0:2]}/{name[2:4]}" if len(name) > 3 else f"3/{name[0]}"
    os.makedirs(f"{www}/{prefix}", exist_ok=True)
    line = {"name": name, "vers": "0.1.0", "deps": [], "cksum": hashlib.sha256(crate).hexdigest(),
            "features": {}, "yanked": False}
    with open(f"{www}/{prefix}/{name}", "w") as f:
        f.write(json.dumps(line) + "\n")
PY
start_nginx "$WORK" "$O_PORT"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
mkdir -p "$WORK/mc"
cat >"$WORK/mc/mirrorcache.toml" <<EOF
[server]
listen = "127.0.0.1:$M_PORT"
tls_cert = "$WORK/cert.pem"
tls_key = "$WORK/key.pem"

[storage]
path = "$WORK/mc/store"

[metadata]
url = "sqlite://$WORK/mc/meta.db"

[[remote]]
name = "crates"
kind = "cargo"
mirrors = ["http://127.0.0.1:$O_PORT"]
files = ["http://127.0.0.1:$O_PORT/crates"]
EOF
"$BIN" serve --config "$WORK/mc/mirrorcache.toml" 2>"$WORK/mc/log" &
PIDS+=("$!")
wait_up "https://127.0.0.1:$M_PORT/-/health"

mkdir -p "$WORK/project/src"
: >"$WORK/project/src/lib.rs"
{
    printf '[package]\nname = "consumer"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n'
    for i in $(seq 0 $((CRATES - 1))); do printf 'mc_c%d = { version = "0.1", registry = "mc" }\n' "$i"; done
} >"$WORK/project/Cargo.toml"

fetch() { # HOME_DIR MULTIPLEXING: seconds of one `cargo fetch`
    mkdir -p "$1"
    printf '[registries.mc]\nindex = "sparse+https://127.0.0.1:%s/crates/"\n' "$M_PORT" >"$1/config.toml"
    local start end
    start=$(date +%s.%N)
    (cd "$WORK/project" && CARGO_HOME="$1" CARGO_HTTP_CAINFO="$WORK/cert.pem" \
        CARGO_HTTP_MULTIPLEXING="$2" cargo fetch --quiet)
    end=$(date +%s.%N)
    echo "$end - $start" | bc -l
}

fetch "$WORK/warm" true >/dev/null   # warms the proxy's cache (and writes Cargo.lock)
H2=() H1=()
for round in $(seq 1 "$ROUNDS"); do
    H2+=("$(fetch "$WORK/h2-$round" true)")
    H1+=("$(fetch "$WORK/h1-$round" false)")
done
h2=$(printf '%s\n' "${H2[@]}" | median_lines)
h1=$(printf '%s\n' "${H1[@]}" | median_lines)
echo "| crates | HTTP/2 (multiplexed) s | HTTP/1.1 s | HTTP/1.1 ÷ HTTP/2 |"
echo "|---:|---:|---:|---:|"
printf "| %s | %.2f | %.2f | %.2f× |\n" "$CRATES" "$h2" "$h1" "$(echo "$h1 / $h2" | bc -l)"
echo "rounds: h2 ${H2[*]} / h1 ${H1[*]}" >&2
grep -c 'status=200' "$WORK/mc/log" >&2 || true
