#!/usr/bin/env bash
# bench/tls-auth.sh — issue 21's figures: 1 KiB and 1 MiB hits over TLS
# against nginx serving the same files over TLS (the same certificate,
# `ssl_session_cache` on), and hits with Basic auth on (a private remote, the
# right credentials on every request) against off (an anonymous remote), all
# over HTTP/1.1 keep-alive with wrk (2 threads, 64 connections), ROUNDS
# interleaved rounds, the median of each variant over the rounds.
#
# Usage: bash bench/tls-auth.sh [target/release/mirrorcache]
#   env: DURATION=4 ROUNDS=3 SIZES="1k 1m"
# Needs nginx, wrk, curl, openssl and python3 with `bcrypt` (for the
# htpasswd line). Results are recorded in BENCHMARKS.md ("Access control and TLS").

set -euo pipefail

BIN=${1:-target/release/mirrorcache}
DURATION=${DURATION:-4}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-1k 1m}
source "$(dirname "$0")/lib.sh"
need_tools "" nginx wrk curl openssl python3

WORK=$(mktemp -d /tmp/mc-tls.XXXXXX)
cleanup() {
    stop_started
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/www"
for size in $SIZES; do write_object "$size" "$WORK/www/$size.bin"; done
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
python3 -c 'import bcrypt, sys; print("bench:" + bcrypt.hashpw(b"bench-pass", bcrypt.gensalt(10)).decode())' >"$WORK/users"
AUTH="Authorization: Basic $(printf 'bench:bench-pass' | base64)"

free_port
O_PORT=$PORT
start_nginx "$WORK" "$O_PORT"
# nginx over TLS: the same files, the same certificate.
free_port
N_PORT=$PORT
# Tuned as bench/compare.sh's nginx-tuned: a worker per core, the access log
# buffered (mirrorcache logs every request too).
mkdir -p "$WORK/ntls/tmp"
cat >"$WORK/ntls/nginx.conf" <<NGINX
daemon off;
user root;
worker_processes auto;
pid $WORK/ntls/nginx.pid;
error_log $WORK/ntls/error.log warn;
events { worker_connections 1024; }
http {
    client_body_temp_path $WORK/ntls/tmp/body;
    proxy_temp_path $WORK/ntls/tmp/proxy;
    fastcgi_temp_path $WORK/ntls/tmp/fastcgi;
    uwsgi_temp_path $WORK/ntls/tmp/uwsgi;
    scgi_temp_path $WORK/ntls/tmp/scgi;
    access_log $WORK/ntls/access.log combined buffer=256k flush=1s;
    sendfile on;
    keepalive_requests 1000000;
    tcp_nodelay on;
    ssl_certificate $WORK/cert.pem;
    ssl_certificate_key $WORK/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    server { listen 127.0.0.1:$N_PORT ssl; root $WORK/www; }
}
NGINX
nginx -p "$WORK/ntls" -c "$WORK/ntls/nginx.conf" &
PIDS+=("$!")

# mirrorcache variants: plain, TLS, and plain with the remote private.
declare -A BASE
variant() {
    local label=$1 scheme=$2 server_keys=$3 remote_keys=$4 tail=$5
    local dir=$WORK/mc-$label
    mkdir -p "$dir"
    free_port
    cat >"$dir/mirrorcache.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
$server_keys

[storage]
path = "$dir/store"

[metadata]
url = "sqlite://$dir/meta.db"

[[remote]]
name = "o"
mirrors = ["http://127.0.0.1:$O_PORT"]
immutable = ["**"]
$remote_keys
$tail
EOF
    "$BIN" serve --config "$dir/mirrorcache.toml" 2>"$dir/log" &
    PIDS+=("$!")
    BASE[$label]=$scheme://127.0.0.1:$PORT
}
variant plain http "" "" ""
variant tls https "tls_cert = \"$WORK/cert.pem\"
tls_key = \"$WORK/key.pem\"" "" ""
variant auth http "" 'access = "authenticated"' "[auth]
htpasswd = \"$WORK/users\""

# warm URL [HEADER]: fetches (over TLS unchecked, with HEADER) until the
# proxy says HIT (until_hit), or ends the bench.
warm() { until_hit "$1" -k ${2:+-H "$2"} || exit 1; }
# nginx over TLS answering before its first round.
wait_up "https://127.0.0.1:$N_PORT/"
for size in $SIZES; do
    warm "${BASE[plain]}/o/$size.bin"
    warm "${BASE[tls]}/o/$size.bin"
    warm "${BASE[auth]}/o/$size.bin" "$AUTH"
done

rps() { # URL [HEADER]
    local args=(-t2 -c64 -d"${DURATION}s")
    [[ -n ${2:-} ]] && args+=(-H "$2")
    wrk "${args[@]}" "$1" | awk '/Requests\/sec/ { printf "%.0f\n", $2 } /Non-2xx/ { print "non-2xx" > "/dev/stderr" }'
}

echo "| size | nginx TLS req/s | mirrorcache TLS req/s | TLS ratio | auth off req/s | auth on req/s | auth ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for size in $SIZES; do
    declare -A R=()
    for round in $(seq 1 "$ROUNDS"); do
        R[nginx]+="$(rps "https://127.0.0.1:$N_PORT/$size.bin") "
        R[tls]+="$(rps "${BASE[tls]}/o/$size.bin") "
        R[plain]+="$(rps "${BASE[plain]}/o/$size.bin") "
        R[auth]+="$(rps "${BASE[auth]}/o/$size.bin" "$AUTH") "
    done
    m() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median_lines; }
    n=$(m nginx) t=$(m tls) p=$(m plain) a=$(m auth)
    printf "| %s | %s | %s | %.2f× | %s | %s | %.2f× |\n" "$size" "$n" "$t" "$(echo "$t / $n" | bc -l)" "$p" "$a" "$(echo "$a / $p" | bc -l)"
done
