# bench/lib.sh — the set-up bench/ab-hit.sh and bench/profile-hit.sh share
# (bench/compare.sh uses its tool check, ports, PIDs and mirrorcache config;
# bench/sustained-miss.sh, miss-rss.sh, first-fetch.sh, many-entries.sh and
# cpu-split.sh also their work dir, release build and tuned nginx
# proxy_cache):
# an nginx origin and mirrorcache processes on 127.0.0.1, started from a work
# dir, stopped by stop_started. Sourced, not run:
#   source "$(dirname "$0")/lib.sh"
# Each script sets its own `trap ... EXIT` that calls stop_started.

# need_tools HINT TOOL...: exits 1 naming the first TOOL that is missing
# (HINT, if not empty, is added in parentheses).
need_tools() {
    local hint=$1 tool
    shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "missing $tool${hint:+ ($hint)}" >&2; exit 1; }
    done
}

# install_nginx_wrk: installs nginx and wrk with apt where either is missing
# (the benches that run the tuned nginx; as root).
install_nginx_wrk() {
    command -v nginx >/dev/null && command -v wrk >/dev/null && return
    echo "installing nginx and wrk" >&2
    apt-get update -qq
    apt-get install -y -qq nginx-light wrk >/dev/null 2>&1 ||
        apt-get install -y -qq nginx wrk >/dev/null
}

# start_keyed_origin DIR: an nginx origin in DIR on a free port (sets
# O_PORT): /distinct/<key> is 1 KiB with the request URI put into it
# (`sub_filter`), so every key has its own bytes; /same/<key> is one 1 KiB
# file under every name.
start_keyed_origin() {
    mkdir -p "$1/www"
    python3 -c "import os,sys; b=bytearray(os.urandom(1024)); b[100:102]=b'@@'; sys.stdout.buffer.write(bytes(b))" >"$1/www/seed.bin"
    head -c 1024 /dev/urandom >"$1/www/same.bin"
    free_port
    O_PORT=$PORT
    start_nginx "$1" "$O_PORT" '
    location /distinct/ { rewrite ^ /seed.bin break; sub_filter "@@" "$request_uri"; sub_filter_once on; sub_filter_types *; }
    location /same/ { rewrite ^ /same.bin break; }'
}

# The processes started here; stop_started ends them (TERM, then waits).
PIDS=()
stop_started() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# free_port: sets PORT to a free port not yet handed out (call it directly,
# not in a subshell: USED keeps the ports given, none of them bound yet).
USED=" "
free_port() {
    while :; do
        PORT=$((20000 + RANDOM % 20000))
        [[ "$USED" == *" $PORT "* ]] && continue
        ss -Htln "sport = :$PORT" | grep -q . || { USED+="$PORT "; return; }
    done
}

# nginx_common DIR [WORKERS] [CONNECTIONS]: the main context of a bench
# nginx (foreground, root, pid and error log in DIR; workers `auto` and
# 4096 connections unless given).
nginx_common() {
    cat <<EOF
daemon off;
user root;
worker_processes ${2:-auto};
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections ${3:-4096}; }
EOF
}

# nginx_temp_paths DIR: http-context lines keeping nginx's temp files in DIR/tmp.
nginx_temp_paths() {
    cat <<EOF
    client_body_temp_path $1/tmp/body;
    proxy_temp_path $1/tmp/proxy;
    fastcgi_temp_path $1/tmp/fastcgi;
    uwsgi_temp_path $1/tmp/uwsgi;
    scgi_temp_path $1/tmp/scgi;
EOF
}

# start_nginx DIR PORT [SERVER_LINES]: nginx (one worker, sendfile, no access
# log) serving DIR/www on 127.0.0.1:PORT, its pid, temp paths and error log in
# DIR; SERVER_LINES (e.g. a rate-limited location) go into its server block.
start_nginx() {
    local dir=$1 port=$2 extra=${3:-}
    mkdir -p "$dir/www" "$dir/tmp"
    cat >"$dir/nginx.conf" <<EOF
$(nginx_common "$dir" 1 1024)
http {
$(nginx_temp_paths "$dir")
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    tcp_nodelay on;
    server { listen 127.0.0.1:$port; root $dir/www; $extra }
}
EOF
    nginx -p "$dir" -c "$dir/nginx.conf" &
    PIDS+=("$!")
}

# start_tuned_proxy DIR PORT ORIGIN_PORT: nginx proxy_cache (the anchor, as
# operators tune it: access log buffered, sendfile on, keep-alive to the
# origin, proxy_cache_lock on) on 127.0.0.1:PORT in front of the origin at
# 127.0.0.1:ORIGIN_PORT, location /o/ -> /; cache, temp paths and logs in
# DIR. Its answers carry X-Cache-Status.
start_tuned_proxy() {
    local dir=$1 port=$2 origin_port=$3
    mkdir -p "$dir/tmp" "$dir/cache"
    cat >"$dir/nginx.conf" <<EOF
$(nginx_common "$dir")
http {
$(nginx_temp_paths "$dir")
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush off;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 1000000;
    access_log $dir/access.log combined buffer=256k flush=1s;
    # 256m: room for about 2M keys (8k a MB); at 64m nginx answered 500 past
    # about 490k keys, so many-entries.sh's 1M-key run measured it half uncached.
    proxy_cache_path $dir/cache levels=1:2 keys_zone=bench:256m max_size=8g inactive=1h use_temp_path=off;
    upstream origin {
        server 127.0.0.1:$origin_port;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$port;
        location /o/ {
            proxy_pass http://origin/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache bench;
            proxy_cache_lock on;
            proxy_cache_valid 200 1h;
            add_header X-Cache-Status \$upstream_cache_status always;
        }
    }
}
EOF
    nginx -p "$dir" -c "$dir/nginx.conf" &
    PIDS+=("$!")
}

# release_bin: sets MC_BIN to target/release/mirrorcache, built now, unless
# MC_BIN names another build already.
release_bin() {
    [[ -n "${MC_BIN:-}" ]] && return
    echo "cargo build --release" >&2
    cargo build --release --quiet
    MC_BIN="$PWD/target/release/mirrorcache"
}

# make_work NAME: sets WORK to a new $BENCH_TMP/NAME.XXXXXX (BENCH_TMP: /tmp
# unless set; bench/scratch-fs.sh makes a fresh file system for it) and, on
# exit, stops what was started and removes WORK (kept with KEEP_TMP=1).
make_work() {
    WORK=$(mktemp -d "${BENCH_TMP:-/tmp}/$1.XXXXXX")
    trap 'stop_started; if [[ "${KEEP_TMP:-0}" == 1 ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi' EXIT
}

# mirrorcache_toml DIR PORT MIRROR [STORAGE_KEYS]: prints a config listening
# on 127.0.0.1:PORT, store and SQLite in DIR, one remote `o` = MIRROR (a URL),
# `immutable = ["**"]`; STORAGE_KEYS (lines) go into [storage].
mirrorcache_toml() {
    cat <<EOF
[server]
listen = "127.0.0.1:$2"

[storage]
path = "$1/store"
${4:+$4
}
[metadata]
url = "sqlite://$1/meta.db"

[[remote]]
name = "o"
mirrors = ["$3"]
immutable = ["**"]
EOF
}

# start_mirrorcache DIR PORT ORIGIN_PORT LOG BIN [VAR=value...]: BIN serve on
# 127.0.0.1:PORT with DIR/mirrorcache.toml (mirrorcache_toml, the origin at
# 127.0.0.1:ORIGIN_PORT), stderr to LOG, the VAR=value words in its
# environment. Sets MC_PID.
start_mirrorcache() {
    local dir=$1 port=$2 origin_port=$3 log=$4 bin=$5
    shift 5
    mkdir -p "$dir"
    mirrorcache_toml "$dir" "$port" "http://127.0.0.1:$origin_port" >"$dir/mirrorcache.toml"
    env "$@" "$bin" serve --config "$dir/mirrorcache.toml" 2>"$log" &
    MC_PID=$!
    PIDS+=("$MC_PID")
}

# start_bench_mirrorcache ORIGIN_URL LEVEL: the measured mirrorcache of the
# miss and hit benches: MC_BIN (MC_ENV_ARGS in its environment, when set) on
# a free port, DIR $WORK/mirrorcache, a 4 GiB store, logging at LEVEL.
# Sets M_DIR, M_PORT and M_PID.
start_bench_mirrorcache() {
    M_DIR=$WORK/mirrorcache
    mkdir -p "$M_DIR"
    free_port
    M_PORT=$PORT
    {
        mirrorcache_toml "$M_DIR" "$M_PORT" "$1" 'max_size = "4GiB"'
        printf '\n[log]\nlevel = "%s"\n' "$2"
    } >"$M_DIR/mirrorcache.toml"
    env ${MC_ENV_ARGS[@]+"${MC_ENV_ARGS[@]}"} "$MC_BIN" serve --config "$M_DIR/mirrorcache.toml" 2>"$M_DIR/mirrorcache.log" &
    M_PID=$!
    PIDS+=("$M_PID")
}

# rows_now [TABLE]: the rows of TABLE (entries) in the database of
# start_bench_mirrorcache's server.
rows_now() { python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT COUNT(*) FROM ' + sys.argv[2]).fetchone()[0])" "$M_DIR/meta.db" "${1:-entries}"; }

# cold_key_lua FILE BASE ROUND: a wrk script that asks for a new key under
# the path BASE with every request: a prefix of ROUND, the wrk thread and a
# random number, then a counter.
cold_key_lua() {
    {
        echo "base = \"$2\""
        echo "round = \"$3\""
        cat <<'EOF'
local counter = 0
local threads = 0
function setup(thread)
    threads = threads + 1
    thread:set("tid", threads)
end
function init(args)
    prefix = string.format("%s/r%s-t%d-%d-", base, round, tid, math.random(1, 1000000000))
end
request = function()
    counter = counter + 1
    return wrk.format("GET", prefix .. counter)
end
EOF
    } >"$1"
}

# wait_up [-s SECONDS] URL...: waits (SECONDS, a whole number, 10 by
# default, at most for each) until each URL answers at all (any status; its
# first byte asked for; a certificate not checked); returns 1 naming the
# first that never does (under `set -e`, a plain call then ends the script).
wait_up() {
    local url tries=200
    if [[ ${1-} == -s ]]; then
        [[ ${2-} =~ ^[0-9]+$ ]] || { echo "wait_up: -s takes whole seconds, not '${2-}'" >&2; return 2; }
        tries=$(($2 * 20))
        shift 2
    fi
    (($# > 0)) || { echo "wait_up: no URL" >&2; return 2; }
    for url in "$@"; do
        for _ in $(seq 1 "$tries"); do
            curl -sk -m 2 -o /dev/null -r 0-0 "$url" && continue 2
            sleep 0.05
        done
        echo "not answering: $url" >&2
        return 1
    done
}

# fill_keys URL N CLIENTS: GETs URL0 … URL(N-1) once each (one miss a key)
# over CLIENTS keep-alive connections, each taking every CLIENTS-th key;
# exits 1 at the first answer that is not 200 (or no answer), naming it.
fill_keys() {
    python3 - "$@" <<'PY'
import http.client, sys, threading, urllib.parse
url, n, clients = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
failed = []
def run(w):
    conn = http.client.HTTPConnection(url.hostname, url.port)
    for i in range(w, n, clients):
        try:
            conn.request("GET", f"{url.path}{i}")
            r = conn.getresponse()
            r.read()
        except OSError as e:
            failed.append((i, str(e)))
            return
        if r.status != 200:
            failed.append((i, r.status))
            return
threads = [threading.Thread(target=run, args=(w,)) for w in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
if failed:
    sys.exit(f"filling {sys.argv[1]}: {len(failed)} of {clients} clients stopped at a non-200 answer or none, the first (key, answer) {min(failed, key=lambda f: f[0])}")
PY
}

# is_hit URL [CURL_ARG...]: whether a HEAD of URL (2 s at most) says
# X-Cache-Status: HIT now. CURL_ARGs go to curl (-k, -H 'Authorization: …').
is_hit() {
    local url=$1
    shift
    grep -qi '^x-cache-status: HIT' <<<"$(curl -sI -m 2 "$@" "$url")"
}

# until_hit URL [CURL_ARG...]: GETs URL (60 s at most a try, tried again
# while nothing answers, 100 times), then asks with HEAD until it is a HIT
# (is_hit; a fill commits after its client is served; 200 tries 0.05 s
# apart); returns 1 naming URL if it never is.
until_hit() {
    local url=$1 i
    shift
    for i in $(seq 1 100); do curl -s -m 60 -o /dev/null "$@" "$url" && break; sleep 0.1; done
    for i in $(seq 1 200); do
        is_hit "$url" "$@" && return 0
        sleep 0.05
    done
    echo "never a HIT: $url" >&2
    return 1
}

# wait_for_hit BASE URL: waits for BASE/-/health (wait_up), then until_hit URL.
wait_for_hit() {
    wait_up "$1/-/health" || return 1
    until_hit "$2"
}

# write_object SIZE FILE: SIZE (1k, 64k or 1m) random bytes into FILE; exits 2
# on another SIZE.
write_object() {
    local bytes
    case $1 in
        1k) bytes=1024 ;;
        64k) bytes=$((64 * 1024)) ;;
        1m) bytes=$((1024 * 1024)) ;;
        *) echo "SIZE is 1k, 64k or 1m" >&2; exit 2 ;;
    esac
    head -c "$bytes" /dev/urandom >"$2"
}

# start_variants WORK ORIGIN_PORT 'label=binary [VAR=value...]'...: one
# mirrorcache per argument (dir WORK/mc-label, log WORK/mc-label/log), in
# front of the origin; fills LABELS (in order), URL[label] (base URL of the
# remote `o`) and MC_PIDS[label]. Declare `URL` and `MC_PIDS` with
# `declare -A` first.
LABELS=()
start_variants() {
    local work=$1 origin_port=$2 spec label dir words
    shift 2
    for spec in "$@"; do
        label=${spec%%=*}
        read -r -a words <<<"${spec#*=}"
        dir=$work/mc-$label
        free_port
        start_mirrorcache "$dir" "$PORT" "$origin_port" "$dir/log" "${words[@]}"
        LABELS+=("$label")
        URL[$label]=http://127.0.0.1:$PORT/o
        MC_PIDS[$label]=$MC_PID
    done
}

# wrk_rps_p99 URL: one wrk run (2 threads, 64 connections, DURATION
# seconds); prints "req/s p99_ms non2xx" (non2xx: 1 if any answer was not
# a 2xx).
wrk_rps_p99() {
    wrk -t2 -c64 -d"${DURATION}s" --latency "$1" | awk '
        function ms(v) {
            if (v ~ /us$/) return v / 1000
            if (v ~ /ms$/) return v + 0
            if (v ~ /s$/) return v * 1000
            return v
        }
        /Requests\/sec/ { rps = $2 }
        /^ +99%/ { p99 = ms($2) }
        /Non-2xx/ { bad = 1 }
        END { printf "%.0f %.2f %d\n", rps, p99, bad }'
}

# spread DIGITS VALUE...: "median (min–max)" of the values, DIGITS decimals
# (the median alone when they are all equal).
spread() { # digits values...
    local d=$1
    shift
    printf '%s\n' "$@" | sort -g | awk -v d="$d" '{ a[NR] = $1 } END {
        m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        f = "%." d "f"
        if (a[1] == a[NR]) printf f, m; else printf f " (" f "–" f ")", m, a[1], a[NR] }'
}

# median_lines: the median of the numbers on standard input, one a line.
median_lines() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
