#!/usr/bin/env bash
# bench/many-entries.sh — hits with many entries: does a hit care how big the
# cache is? For each N (default 10k, 1M and 5M), N rows are made quickly
# (mirrorcache creates its schema once, then Python's sqlite3 inserts N rows
# in one transaction, all naming one 1 KiB blob, so hits are served from the
# in-memory blob tier and only the entry lookup differs), then mirrorcache is
# started on them and measured:
#   startup      from exec to the first HIT answered (s); the entry index
#                loads in the background meanwhile (an unlisted key is read
#                from its row until it is loaded)
#   index loaded from exec to the log's "entry index loaded" (s)
#   RSS idle     VmRSS once the index is loaded, before any load (MiB), and
#                per entry (RSS less the 10k run's, divided by the extra
#                entries)
#   random hits  wrk -t2 -c64, every request a uniformly random one of the N
#                keys (a Lua script), req/s
#   hot hits     the same server, 1,000 keys, req/s
#   ratio        random ÷ hot (target ≥ 0.8 at 1M)
# Each round also logs the server's CPU and its threads' preemptions a
# request, and wrk's own CPU a request (wrk shares the cores).
# The hit rounds start once the index is loaded. Each measure is ROUNDS rounds (random and hot alternating), median and
# spread. Nothing but 127.0.0.1 is used; no origin is needed (every request
# is a hit; the remote's mirror is a closed port).
#
# With DIGESTS=distinct every row past the first 1,000 names its own
# digest (as in a real cache: the entry index then counts every digest,
# `cache/references.rs`), no blob behind it: startup, the load and the idle
# RSS are measured, the hit rounds are not.
#
# With DISTINCT=1 every key has its own BODY bytes (1 KiB unless set) and a
# blob behind it,
# as in a real cache of distinct artifacts: an nginx origin gives each key
# its own bytes (`sub_filter` putting the URI in), mirrorcache and the tuned
# nginx proxy_cache (bench/compare.sh's anchor) are each filled by one miss
# a key (16 keep-alive clients), mirrorcache is restarted on what it stored
# (startup, load and RSS as above), and the random-key hits of both over
# the same keys are measured side by side (nginx's column, and ours ÷
# nginx's). PACK_BELOW sets `storage.pack_below` ("0": a file a blob, as a
# store made before packs).
#
# Usage: bash bench/many-entries.sh     (as root: installs wrk, and nginx for DISTINCT=1, if missing)
#   env: SIZES="10000 1000000 5000000" DURATION=7 ROUNDS=3 MC_BIN=path
#        DIGESTS=one|distinct DISTINCT=0|1 BODY=1024 PACK_BELOW=64KiB
#        PROFILE=dir (after the rounds: perf profiles of one random and one
#        hot run, flat by symbol, and the server's CPU a request of each)
#        IDLE=35 (after the rounds: the idle server's CPU over that many
#        seconds, one write of the hits' access times among it)
#        WRK_BATCH=1 (wrk under SCHED_BATCH: its wake-ups do not preempt
#        the server, as clients on other machines do not; both servers'
#        rounds alike)
# Results are recorded in BENCHMARKS.md.

set -euo pipefail

SIZES=${SIZES:-"10000 1000000 5000000"}
DURATION=${DURATION:-7}
ROUNDS=${ROUNDS:-3}
DIGESTS=${DIGESTS:-one}
[[ $DIGESTS == distinct ]] && ROUNDS=0
DISTINCT=${DISTINCT:-0}
PACK_BELOW=${PACK_BELOW:-64KiB}
BODY=${BODY:-1024}
WRK=(wrk)
[[ ${WRK_BATCH:-0} == 1 ]] && WRK=(chrt -b 0 wrk)

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
log() { printf '[many-entries] %s\n' "$*" >&2; }

if ! command -v wrk >/dev/null || { ((DISTINCT)) && ! command -v nginx >/dev/null; }; then
    log "installing wrk and nginx"
    apt-get update -qq
    apt-get install -y -qq wrk nginx-light >/dev/null 2>&1 || apt-get install -y -qq wrk nginx >/dev/null
fi
source "$ROOT/bench/lib.sh"
need_tools "" wrk curl python3 awk ss

release_bin

make_work mc-many

# With DISTINCT=1: the origin, every key its own bytes.
MIRROR=http://127.0.0.1:9
if ((DISTINCT)); then
    mkdir -p "$WORK/origin/www"
    python3 -c "import os,sys; b=bytearray(os.urandom(int(sys.argv[1]))); b[100:102]=b'@@'; sys.stdout.buffer.write(bytes(b))" "$BODY" >"$WORK/origin/www/seed.bin"
    free_port
    O_PORT=$PORT
    start_nginx "$WORK/origin" "$O_PORT" '
    location /k/ { rewrite ^ /seed.bin break; sub_filter "@@" "$request_uri"; sub_filter_once on; sub_filter_types *; }'
    MIRROR=http://127.0.0.1:$O_PORT
fi

# rps LUA URL: wrk's req/s; its own user and system seconds go to
# $WORK/wrk.time. Fails, with wrk's message, if wrk does.
rps() {
    local TIMEFORMAT='%U %S' LC_NUMERIC=C
    { time "${WRK[@]}" -t2 -c64 -d"${DURATION}s" -s "$1" "$2" >"$WORK/wrk.out" 2>"$WORK/wrk.err"; } 2>"$WORK/wrk.time" ||
        { cat "$WORK/wrk.err" >&2; return 1; }
    awk '/Requests\/sec/ { printf "%.0f", $2 }' "$WORK/wrk.out"
}
# wrk_per RPS: the last rps run's wrk CPU microseconds a request.
wrk_per() { awk -v r="$1" -v d="$DURATION" '{ printf "%.1f", ($1 + $2) * 1e6 / (r * d) }' "$WORK/wrk.time"; }
# cpu_us PID: the process's CPU so far (utime + stime), in microseconds.
cpu_us() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.0f", ($14 + $15) / hz * 1e6 }' "/proc/$1/stat"; }
# a_request FORMAT BEFORE NOW RPS: (NOW - BEFORE) a request of a DURATION run.
a_request() { awk -v f="$1" -v a="$2" -v b="$3" -v r="$4" -v d="$DURATION" 'BEGIN { printf f, (b - a) / (r * d) }'; }
# per_request PID BEFORE RPS: CPU microseconds a request since BEFORE.
per_request() { a_request %.1f "$2" "$(cpu_us "$1")" "$3"; }
# preempted PID: the times its threads were switched out while runnable so far.
preempted() { { cat /proc/"$1"/task/*/status 2>/dev/null || true; } | awk '/^nonvoluntary_ctxt_switches/ { n += $2 } END { print n + 0 }'; }
# preempted_per PID BEFORE RPS: those a request since BEFORE.
preempted_per() { a_request %.2f "$2" "$(preempted "$1")" "$3"; }
rss_mib() { awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

ROWS=()
for n in $SIZES; do
    dir=$WORK/n$n
    mkdir -p "$dir"
    free_port
    port=$PORT
    # A closed port: no request goes upstream (each one is a hit).
    storage_keys=""
    ((DISTINCT)) && storage_keys="pack_below = \"$PACK_BELOW\""
    mirrorcache_toml "$dir" "$port" "$MIRROR" "$storage_keys" >"$dir/mirrorcache.toml"
    # The cache's own info lines (the index's load), no request lines.
    printf '\n[log]\nlevel = "warn,mirrorcache::cache=info"\n' >>"$dir/mirrorcache.toml"
    # The schema, once.
    "$MC_BIN" serve --config "$dir/mirrorcache.toml" 2>"$dir/first.log" &
    pid=$!
    PIDS+=("$pid")
    wait_up "http://127.0.0.1:$port/-/health"
    if ((DISTINCT)); then
        log "N=$n: filling mirrorcache and nginx, one miss a key"
        fill_keys "http://127.0.0.1:$port/o/k/" "$n" 16
        for _ in $(seq 1 600); do
            curl -s "http://127.0.0.1:$port/-/status" | grep -q '"fills_in_progress":0' && break
            sleep 0.1
        done
        free_port
        n_port=$PORT
        start_tuned_proxy "$dir/nginx" "$n_port" "$O_PORT"
        n_pid=${PIDS[-1]}
        wait_up "http://127.0.0.1:$n_port/"
        fill_keys "http://127.0.0.1:$n_port/o/k/" "$n" 16
    fi
    kill -TERM "$pid"; wait "$pid" || true
    ((DISTINCT)) || { log "N=$n: making the rows"; t0=$(date +%s.%N); python3 - "$dir" "$n" "$DIGESTS" <<'EOF'
import hashlib, os, sqlite3, sys, time
d, n, digests = sys.argv[1], int(sys.argv[2]), sys.argv[3]
blob = os.urandom(1024)
hexd = hashlib.sha256(blob).hexdigest()
os.makedirs(f"{d}/store/blobs/{hexd[0:2]}/{hexd[2:4]}", exist_ok=True)
with open(f"{d}/store/blobs/{hexd[0:2]}/{hexd[2:4]}/{hexd}", "wb") as f:
    f.write(blob)
db = sqlite3.connect(f"{d}/meta.db")
db.execute("PRAGMA journal_mode = WAL")
db.execute("PRAGMA synchronous = OFF")
now = int(time.time() * 1000)
lm = "Tue, 01 Dec 2026 10:00:00 GMT"
def digest(i):
    if digests == "distinct" and i >= 1000:
        return hashlib.sha256(i.to_bytes(8, "little")).hexdigest()
    return hexd
rows = ((("o", f"k/{i}", digest(i), 1024, "application/octet-stream", f'"e{i}"', lm, now, now)) for i in range(n))
db.executemany("INSERT INTO entries (remote, path, digest, size, content_type, upstream_etag, upstream_last_modified, fetched_at, last_access) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
db.commit()
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
db.close()
EOF
        log "N=$n: rows made in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"; }
    sync
    t0=$(date +%s.%N)
    "$MC_BIN" serve --config "$dir/mirrorcache.toml" 2>"$dir/mc.log" &
    pid=$!
    PIDS+=("$pid")
    until curl -s -I "http://127.0.0.1:$port/o/k/0" 2>/dev/null | grep -qi '^x-cache-status: HIT'; do sleep 0.01; done
    startup=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    until grep -qE 'entry index loaded|could not load the entry index' "$dir/mc.log"; do sleep 0.05; done
    loaded=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    sleep 1
    rss=$(rss_mib "$pid")
    log "N=$n: first hit after $startup s; index loaded after $loaded s; idle RSS $rss MiB"
    # Each wrk thread seeds its own sequence (seeded by the second alone,
    # both threads would ask for the same keys at the same moments).
    seeded='local threads = 0
function setup(thread) thread:set("id", threads); threads = threads + 1 end
function init(args) math.randomseed(os.time() * 1000 + id) end'
    cat >"$dir/random.lua" <<EOF
$seeded
request = function() return wrk.format("GET", "/o/k/" .. math.random(0, $((n - 1)))) end
EOF
    cat >"$dir/hot.lua" <<EOF
$seeded
request = function() return wrk.format("GET", "/o/k/" .. math.random(0, 999)) end
EOF
    # Warm the hot keys (and the blob in memory).
    ((ROUNDS > 0)) && "${WRK[@]}" -t2 -c64 -d2s -s "$dir/hot.lua" "http://127.0.0.1:$port" >/dev/null
    random=() hot=() ratios=() nginx=() over=()
    for round in $(seq 1 "$ROUNDS"); do
        c0=$(cpu_us "$pid") p0=$(preempted "$pid")
        r=$(rps "$dir/random.lua" "http://127.0.0.1:$port")
        rc=$(per_request "$pid" "$c0" "$r") rp=$(preempted_per "$pid" "$p0" "$r") rw=$(wrk_per "$r")
        c0=$(cpu_us "$pid") p0=$(preempted "$pid")
        h=$(rps "$dir/hot.lua" "http://127.0.0.1:$port")
        hc=$(per_request "$pid" "$c0" "$h") hp=$(preempted_per "$pid" "$p0" "$h") hw=$(wrk_per "$h")
        random+=("$r") hot+=("$h")
        ratios+=("$(awk -v a="$r" -v b="$h" 'BEGIN { printf "%.6f", a / b }')")
        x=""
        if ((DISTINCT)); then
            x=$(rps "$dir/random.lua" "http://127.0.0.1:$n_port") xw=$(wrk_per "$x")
            nginx+=("$x")
            over+=("$(awk -v a="$r" -v b="$x" 'BEGIN { printf "%.6f", a / b }')")
        fi
        log "N=$n round $round: random $r req/s ($rc us of CPU, $rp preemptions a request; wrk $rw us), hot $h req/s ($hc us, $hp; wrk $hw us)${x:+, nginx random $x req/s (wrk $xw us)}"
    done
    if [[ -n ${PROFILE:-} ]]; then
        # Where a random hit's time goes beside a hot one's: perf's cpu-clock
        # samples of the server over one run of each, flat by symbol, and
        # its CPU a request (utime + stime from /proc).
        mkdir -p "$PROFILE"
        for which in random hot; do
            c0=$(cpu_us "$pid")
            perf record -q -e cpu-clock -F 1999 -p "$pid" -o "$PROFILE/$which.data" 2>/dev/null &
            rec=$!
            "${WRK[@]}" -t2 -c64 -d"${DURATION}s" -s "$dir/$which.lua" "http://127.0.0.1:$port" >"$PROFILE/$which.wrk"
            kill -INT "$rec"; wait "$rec" || true
            rate=$(awk '/Requests\/sec/ { printf "%.0f", $2 }' "$PROFILE/$which.wrk")
            echo "$which: $rate req/s, $(per_request "$pid" "$c0" "$rate") us of CPU a request" | tee -a "$PROFILE/summary.txt"
            { perf report -q -i "$PROFILE/$which.data" --no-children --sort sym 2>/dev/null || true; } | head -60 >"$PROFILE/$which.txt" || true
        done
        log "profiles in $PROFILE"
    fi
    if ((${IDLE:-0} > 0)); then
        # What the hits leave to do once they stop (the access times and
        # hit counts written every 30 s): the idle server's CPU.
        c0=$(cpu_us "$pid")
        sleep "$IDLE"
        log "N=$n: CPU of the idle server over the $IDLE s after the rounds: $(awk -v a="$c0" -v b="$(cpu_us "$pid")" 'BEGIN { printf "%.0f", (b - a) / 1000 }') ms"
    fi
    ((ROUNDS > 0)) || random=(0) hot=(0) ratios=(0)
    ((DISTINCT && ROUNDS > 0)) || nginx=(0) over=(0)
    peak=$(awk '/^VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")
    errors=$(grep -c ' ERROR ' "$dir/mc.log" || true)
    ROWS+=("$n|$startup|$loaded|$rss|$peak|$(spread 0 "${random[@]}")|$(spread 0 "${hot[@]}")|$(spread 2 "${ratios[@]}")|$errors|$(spread 0 "${nginx[@]}")|$(spread 2 "${over[@]}")")
    kill -TERM "$pid"; wait "$pid" || true
    if ((DISTINCT)); then kill -TERM "$n_pid"; wait "$n_pid" || true; rm -rf "$dir/nginx"; fi
    [[ ${KEEP_TMP:-0} == 1 ]] || rm -rf "$dir/store" "$dir/meta.db"*
done

base_rss=""
base_n=""
{
    echo
    echo "## bench/many-entries.sh — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), ${WRK[*]} -t2 -c64 -d${DURATION}s, $ROUNDS rounds, digests: $DIGESTS, distinct bytes: $DISTINCT ($BODY bytes a key; pack_below $PACK_BELOW)"
    echo
    echo "| entries | startup to first HIT s | index loaded s | idle RSS MiB | bytes per entry (over the smallest run) | peak RSS MiB | random-key hits req/s | hot-key hits req/s (1,000 keys) | random ÷ hot | errors logged | nginx random-key hits req/s | random ÷ nginx's random |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for row in "${ROWS[@]}"; do
        IFS='|' read -r n startup loaded rss peak random hot ratio errors nginx versus <<<"$row"
        if [[ -z $base_rss ]]; then
            base_rss=$rss base_n=$n per=-
        else
            per=$(awk -v r="$rss" -v b="$base_rss" -v n="$n" -v bn="$base_n" 'BEGIN { printf "%.0f", (r - b) * 1048576 / (n - bn) }')
        fi
        echo "| $n | $startup | $loaded | $rss | $per | $peak | $random | $hot | $ratio | $errors | $nginx | $versus |"
    done
}
