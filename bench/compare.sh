#!/usr/bin/env bash
# bench/compare.sh — mirrorcache against nginx proxy_cache, side by side, on
# 127.0.0.1 only. Every figure is quoted next to the direct origin measured in
# the same run (the machine is shared and noisy: absolute numbers drift, ratios
# taken minutes apart do not mean much).
#
# What runs (each with its own temp dir and free port):
#   origin      nginx serving static files (sendfile on); /slow/ is rate-limited
#               so a cold fill takes a few seconds; its access log counts
#               upstream requests (user agent tells the two proxies apart)
#   nginx       nginx proxy_cache in front of the origin (proxy_cache_lock on,
#               proxy_cache_valid 200 1h, sendfile on), cache in its temp dir,
#               access log written with one write(2) per request
#   nginx-tuned the same proxy_cache with its access log buffered
#               (`access_log ... buffer=256k flush=1s`), as operators tune it:
#               the anchor the targets are measured against
#   mirrorcache target/release/mirrorcache, one remote `o` -> origin,
#               immutable = ["**"], store and SQLite in its temp dir
#
# What is measured:
#   1. hit throughput and p50/p99 latency (wrk, 2 threads, 64 connections) for
#      1 KiB, 64 KiB and 1 MiB, each cache warmed first; ROUNDS interleaved
#      rounds of DURATION seconds (the order rotates each round); each figure
#      is the median over the rounds, with the spread (min-max) beside it,
#      and the ratios are medians of the per-round ratios
#   2. large-object hit throughput: 256 MiB with curl, LARGE_RUNS alternating
#      runs, median and spread
#   3. cold-miss fan-out: 200 concurrent clients for one cold 16 MiB object whose
#      origin sends at FILL_RATE: origin requests, per-request p50 of the
#      total time, wall time, and how many clients had their first byte
#      before the origin finished sending
#   4. miss-path overhead: ROUNDS interleaved rounds (the order rotates) of
#      MISSES (50) new cold 64 KiB objects one after another (one curl, one
#      keep-alive connection): per-request p50 and total, median over the
#      rounds with the spread, ratios the median of the per-round ratios
#   5. peak RSS (VmHWM) of mirrorcache, and the sum over nginx's workers
#
# Usage: bash bench/compare.sh          (as root: installs nginx and wrk if missing)
#   env: DURATION=7 ROUNDS=3 LARGE_RUNS=3 FILL_RATE=6m KEEP_TMP=1 (keep logs)
#        MC_BIN=path (another mirrorcache build; skips cargo build)
#        MC_ENV="VAR=value ..." (extra environment for mirrorcache)
#        ONLY_HITS=1 (hit throughput only: for A/B runs of a candidate build)
# Results are recorded in BENCHMARKS.md.

set -euo pipefail

DURATION=${DURATION:-7}
ROUNDS=${ROUNDS:-3}
LARGE_RUNS=${LARGE_RUNS:-3}
# 16 MiB at 6 MiB/s: a fill of ~2.7 s, under nginx's default 5 s
# proxy_cache_lock_timeout (past it nginx sends waiters upstream uncached).
FILL_RATE=${FILL_RATE:-6m}
FANOUT=${FANOUT:-200}
MISSES=${MISSES:-50}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

log() { printf '[compare] %s\n' "$*" >&2; }

# --- tools -------------------------------------------------------------------
source "$ROOT/bench/lib.sh"
install_nginx_wrk
need_tools "" nginx wrk curl cargo awk ss

if [[ -z "${MC_BIN:-}" ]]; then
    log "cargo build --release"
    cargo build --release --quiet
    MC_BIN="$ROOT/target/release/mirrorcache"
fi
# Extra environment for mirrorcache only, e.g. MC_ENV="MALLOC_ARENA_MAX=2".
read -r -a MC_ENV_ARGS <<<"${MC_ENV:-}"

# --- processes we own: stopped by PID on any exit -----------------------------
WORK=$(mktemp -d /tmp/mc-compare.XXXXXX)
cleanup() {
    stop_started
    if [[ "${KEEP_TMP:-0}" == 1 ]]; then
        log "logs kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

# The http context every nginx here shares (nginx_common and
# nginx_temp_paths are bench/lib.sh's).
nginx_http_common() { # dir
    nginx_temp_paths "$1"
    cat <<EOF
    default_type application/octet-stream;
    sendfile on;
    # tcp_nopush (TCP_CORK) stays off: with it on (Debian's default), a 64 KiB
    # cache hit or a proxied miss stalls ~40 ms on a kept-alive connection
    # (measured: 1.9k instead of 25k req/s), which would flatter mirrorcache.
    tcp_nopush off;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 1000000;
EOF
}

# --- origin ------------------------------------------------------------------
O_DIR=$WORK/origin
mkdir -p "$O_DIR/www/hit" "$O_DIR/www/big" "$O_DIR/www/slow" "$O_DIR/www/miss" "$O_DIR/tmp"
log "writing objects"
head -c 1024 /dev/urandom >"$O_DIR/www/hit/1k.bin"
head -c $((64 * 1024)) /dev/urandom >"$O_DIR/www/hit/64k.bin"
head -c $((1024 * 1024)) /dev/urandom >"$O_DIR/www/hit/1m.bin"
if [[ "${ONLY_HITS:-0}" != 1 ]]; then
    head -c $((256 * 1024 * 1024)) /dev/urandom >"$O_DIR/www/big/256m.bin"
fi
head -c $((16 * 1024 * 1024)) /dev/urandom >"$O_DIR/www/slow/fan-nginx.bin"
cp "$O_DIR/www/slow/fan-nginx.bin" "$O_DIR/www/slow/fan-tuned.bin"
cp "$O_DIR/www/slow/fan-nginx.bin" "$O_DIR/www/slow/fan-mc.bin"
# MISSES new objects a round: each round's misses are cold for every server.
for i in $(seq 1 $((MISSES * ROUNDS))); do
    head -c $((64 * 1024)) /dev/urandom >"$O_DIR/www/miss/$i.bin"
done

free_port
O_PORT=$PORT
{
    nginx_common "$O_DIR"
    cat <<EOF
http {
$(nginx_http_common "$O_DIR")
    log_format timed '\$msec \$request_time \$status \$body_bytes_sent "\$request" "\$http_user_agent"';
    access_log $O_DIR/access.log timed;
    server {
        listen 127.0.0.1:$O_PORT;
        root $O_DIR/www;
        location /slow/ { limit_rate $FILL_RATE; }
    }
}
EOF
} >"$O_DIR/nginx.conf"
nginx -p "$O_DIR" -c "$O_DIR/nginx.conf" &
O_PID=$!
PIDS+=("$O_PID")
ORIGIN=http://127.0.0.1:$O_PORT

# --- nginx proxy_cache, twice: access log unbuffered, and tuned ---------------
# start_proxy_nginx DIR PORT ACCESS_LOG_ARGS USER_AGENT: nginx proxy_cache in
# front of the origin; sets PROXY_PID.
start_proxy_nginx() {
    local dir=$1 port=$2 access=$3 agent=$4
    mkdir -p "$dir/tmp" "$dir/cache"
    {
        nginx_common "$dir"
        cat <<EOF
http {
$(nginx_http_common "$dir")
    access_log $dir/access.log$access;
    proxy_cache_path $dir/cache levels=1:2 keys_zone=bench:16m max_size=4g inactive=1h use_temp_path=off;
    upstream origin {
        server 127.0.0.1:$O_PORT;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:$port;
        location /o/ {
            proxy_pass http://origin/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header User-Agent "$agent";
            proxy_cache bench;
            proxy_cache_lock on;
            proxy_cache_valid 200 1h;
            add_header X-Cache-Status \$upstream_cache_status always;
        }
    }
}
EOF
    } >"$dir/nginx.conf"
    nginx -p "$dir" -c "$dir/nginx.conf" &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
}
free_port
N_PORT=$PORT
start_proxy_nginx "$WORK/nginx" "$N_PORT" "" nginx-proxy-cache
N_PID=$PROXY_PID
NGINX=http://127.0.0.1:$N_PORT/o
free_port
T_PORT=$PORT
# As operators tune it: one write(2) per 256 KiB of log, or per second.
start_proxy_nginx "$WORK/nginx-tuned" "$T_PORT" " combined buffer=256k flush=1s" nginx-tuned
T_PID=$PROXY_PID
TUNED=http://127.0.0.1:$T_PORT/o

# --- mirrorcache -------------------------------------------------------------
start_bench_mirrorcache "$ORIGIN" info
MC=http://127.0.0.1:$M_PORT/o

wait_up "$ORIGIN/hit/1k.bin" "http://127.0.0.1:$N_PORT/" "http://127.0.0.1:$T_PORT/" "http://127.0.0.1:$M_PORT/-/health"
log "origin :$O_PORT (pid $O_PID), nginx :$N_PORT (pid $N_PID), nginx-tuned :$T_PORT (pid $T_PID), mirrorcache :$M_PORT (pid $M_PID)"

# warm BASE PATH: fetches until the proxy says HIT (until_hit), or ends the bench.
warm() { until_hit "$1$2" || exit 1; }

# Arithmetic helpers (floats through awk).
calc() { awk "BEGIN { printf \"%.${2:-3}f\", $1 }"; }
ratio() { # a b -> a/b
    awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }'
}
# Median and spread of the numbers on stdin (one per line): "median min max".
stats() {
    sort -g | awk '{ a[NR] = $1 } END {
        if (NR == 0) { print "- - -"; exit }
        m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        printf "%g %g %g\n", m, a[1], a[NR] }'
}
# "median (min–max)" of the words given, with DIGITS decimals.
spread() { # digits values...
    local digits=$1 m lo hi
    shift
    read -r m lo hi < <(printf '%s\n' "$@" | stats)
    [[ $m == - ]] && { echo -; return; }
    if [[ $lo == "$hi" ]]; then calc "$m" "$digits"; else echo "$(calc "$m" "$digits") ($(calc "$lo" "$digits")–$(calc "$hi" "$digits"))"; fi
}
median() { printf '%s\n' "$@" | stats | awk '{ print $1 }'; }
# Per-round ratios a_i / b_i of two lists of the same length ("a1 a2 ..." "b1 b2 ...").
ratios() {
    local -a a b
    read -r -a a <<<"$1"
    read -r -a b <<<"$2"
    local i
    for i in "${!a[@]}"; do awk -v x="${a[$i]}" -v y="${b[$i]:-0}" 'BEGIN { if (y + 0 == 0) print "-"; else printf "%.3f\n", x / y }'; done
}

# One wrk run: prints "rps p50_ms p99_ms errors".
run_wrk() { # url
    wrk -t2 -c64 -d"${DURATION}s" --latency "$1" | awk '
        function ms(v) {
            if (v ~ /us$/) return v / 1000
            if (v ~ /ms$/) return v + 0
            if (v ~ /m$/) return v * 60000
            if (v ~ /s$/) return v * 1000
            return v
        }
        /Requests\/sec/ { rps = $2 }
        /^ +50%/ { p50 = ms($2) }
        /^ +99%/ { p99 = ms($2) }
        /Non-2xx/ { err += $NF }
        /Socket errors/ { gsub(/,/, ""); err += $6 + $8 + $10 }
        END { printf "%.0f %.3f %.3f %d\n", rps, p50, p99, err }'
}

declare -A R # results: R[key]=value (lists are space-separated, one per round)

# mirrorcache's peak RSS after each phase, to tell which one sets it.
hwm_kib() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
PHASE_RSS=""
note_rss() { # phase
    local mib
    mib=$(calc "$(hwm_kib "$M_PID") / 1024" 1)
    PHASE_RSS+="$1 $mib MiB; "
    log "mirrorcache peak RSS after $1: $mib MiB"
}
note_rss start

WHO=(direct nginx tuned mc)
declare -A BASE=([direct]=$ORIGIN [nginx]=$NGINX [tuned]=$TUNED [mc]=$MC)
# The order of round r: WHO rotated by r, so no server always runs first.
order_of() {
    local r=$1 i n=${#WHO[@]} out=()
    for i in $(seq 0 $((n - 1))); do out+=("${WHO[$(((i + r) % n))]}"); done
    echo "${out[*]}"
}

# --- 1. hit throughput -------------------------------------------------------
for obj in 1k 64k 1m; do
    for who in nginx tuned mc; do warm "${BASE[$who]}" "/hit/$obj.bin"; done
done
for obj in 1k 64k 1m; do
    for round in $(seq 1 "$ROUNDS"); do
        for who in $(order_of "$round"); do
            read -r rps p50 p99 err < <(run_wrk "${BASE[$who]}/hit/$obj.bin")
            log "hit $obj $who round $round: $rps req/s p50 ${p50}ms p99 ${p99}ms errors $err"
            R[hit_${obj}_${who}_rps]+="$rps "
            R[hit_${obj}_${who}_p50]+="$p50 "
            R[hit_${obj}_${who}_p99]+="$p99 "
            R[hit_${obj}_${who}_err]=$(( ${R[hit_${obj}_${who}_err]:-0} + err ))
        done
    done
done

note_rss "hit runs"

if [[ "${ONLY_HITS:-0}" != 1 ]]; then

# --- 2. large object ---------------------------------------------------------
log "large object: filling the caches"
for who in nginx tuned mc; do warm "${BASE[$who]}" /big/256m.bin; done
for run in $(seq 1 "$LARGE_RUNS"); do
    for who in $(order_of "$run"); do
        bps=$(curl -s -o /dev/null -w '%{speed_download}' "${BASE[$who]}/big/256m.bin")
        mbs=$(calc "$bps / 1048576" 0)
        log "256 MiB $who run $run: $mbs MiB/s"
        R[big_${who}]+="$mbs "
    done
done

note_rss "256 MiB"

# --- 3. cold-miss fan-out ----------------------------------------------------
fanout() { # who url path -> sets R[fan_*_who]
    local who=$1 url=$2 path=$3 args=() i t0 t1 end
    for i in $(seq 1 "$FANOUT"); do args+=(-o /dev/null "$url$path"); done
    t0=$(date +%s.%N)
    curl -s --no-progress-meter -Z --parallel-immediate --parallel-max "$FANOUT" \
        -w '%{time_starttransfer} %{time_total} %{http_code} %{size_download}\n' \
        "${args[@]}" >"$WORK/fan-$who.txt"
    t1=$(date +%s.%N)
    sleep 0.5 # the origin writes its log line when the response is done
    end=$(awk -v p="GET $path " '$0 ~ p { print $1; exit }' "$O_DIR/access.log")
    R[fan_requests_$who]=$(grep -c "GET $path " "$O_DIR/access.log" || true)
    R[fan_wall_$who]=$(calc "$t1 - $t0" 2)
    R[fan_fill_$who]=$(calc "$end - $t0" 2)
    # Client first-byte times are relative to their start (~t0); the fill
    # completes when the origin finishes sending, at `end`.
    R[fan_early_$who]=$(awk -v fill="$(calc "$end - $t0")" '$1 < fill { n++ } END { print n + 0 }' "$WORK/fan-$who.txt")
    R[fan_ok_$who]=$(awk '$3 == 200 && $4 == 16777216 { n++ } END { print n + 0 }' "$WORK/fan-$who.txt")
    R[fan_ttfb_p50_$who]=$(awk '{ print $1 }' "$WORK/fan-$who.txt" | stats | awk '{ printf "%.3f", $1 }')
    R[fan_ttfb_max_$who]=$(sort -n "$WORK/fan-$who.txt" | awk 'END { printf "%.3f", $1 }')
    R[fan_p50_$who]=$(awk '{ print $2 }' "$WORK/fan-$who.txt" | stats | awk '{ printf "%.3f", $1 }')
    log "fan-out $who: ${R[fan_requests_$who]} origin requests, per-request p50 ${R[fan_p50_$who]}s, wall ${R[fan_wall_$who]}s, fill ${R[fan_fill_$who]}s, first byte before fill end ${R[fan_early_$who]}/$FANOUT, complete ${R[fan_ok_$who]}/$FANOUT"
}
fanout nginx "$NGINX" /slow/fan-nginx.bin
fanout tuned "$TUNED" /slow/fan-tuned.bin
fanout mc "$MC" /slow/fan-mc.bin

note_rss "fan-out"

# --- 4. miss-path overhead ---------------------------------------------------
misses() { # who base round -> "p50_ms total_s" over the round's MISSES sequential cold fetches
    local args=() i
    for i in $(seq $(($3 * MISSES - MISSES + 1)) $(($3 * MISSES))); do
        args+=(-o /dev/null "$2/miss/$i.bin")
    done
    curl -s -w '%{time_total} %{http_code}\n' "${args[@]}" >"$WORK/miss-$1.txt"
    awk '$2 != 200 { bad++ } END { exit bad ? 1 : 0 }' "$WORK/miss-$1.txt"
    printf '%s %s\n' \
        "$(awk '{ print $1 * 1000 }' "$WORK/miss-$1.txt" | stats | awk '{ printf "%.3f", $1 }')" \
        "$(awk '{ t += $1 } END { printf "%.4f", t }' "$WORK/miss-$1.txt")"
}
for round in $(seq 1 "$ROUNDS"); do
    for who in $(order_of "$round"); do
        read -r p50 total < <(misses "$who" "${BASE[$who]}" "$round")
        log "misses $who round $round: p50 $p50 ms, $total s for $MISSES"
        R[miss_p50_$who]+="$p50 "
        R[miss_total_$who]+="$total "
    done
done

note_rss misses

fi # ONLY_HITS

# --- 5. peak RSS -------------------------------------------------------------
R[rss_mc]=$(calc "$(hwm_kib "$M_PID") / 1024" 1)
workers_mib() { # master pid
    local kib=0 child
    for child in $(ps -o pid= --ppid "$1"); do
        if grep -q "worker process" "/proc/$child/cmdline" 2>/dev/null; then
            kib=$((kib + $(hwm_kib "$child")))
        fi
    done
    calc "$kib / 1024" 1
}
R[rss_nginx]=$(workers_mib "$N_PID")
R[rss_tuned]=$(workers_mib "$T_PID")

# Upstream requests each proxy made for the hit and miss objects: 1 each if
# they cached.
for who in nginx tuned mc; do
    case $who in
        nginx) agent=nginx-proxy-cache ;;
        tuned) agent=nginx-tuned ;;
        mc) agent=mirrorcache/ ;;
    esac
    R[miss_origin_$who]=$(grep -c "\"GET /miss/.*$agent" "$O_DIR/access.log" || true)
    R[hit_origin_$who]=$(grep -c "\"GET /hit/.*$agent" "$O_DIR/access.log" || true)
done

# --- report ------------------------------------------------------------------
verdict() { # condition-as-awk-expression
    awk "BEGIN { print (($1) ? \"yes\" : \"**no**\") }"
}
# A row of per-round figures: median (spread) for each server, and the
# medians of the per-round ratios mirrorcache / tuned nginx and / nginx.
round_row() { # label key digits target want-expression-over-r
    local label=$1 key=$2 digits=$3 target=$4 want=$5 who cells=() r rn
    for who in "${WHO[@]}"; do
        read -r -a vals <<<"${R[${key/@/$who}]:-}"
        cells+=("$( ((${#vals[@]})) && spread "$digits" "${vals[@]}" || echo -)")
    done
    read -r -a rt < <(ratios "${R[${key/@/mc}]}" "${R[${key/@/tuned}]}" | tr '\n' ' '; echo)
    read -r -a rn < <(ratios "${R[${key/@/mc}]}" "${R[${key/@/nginx}]}" | tr '\n' ' '; echo)
    r=$(median "${rt[@]}")
    local met=-
    [[ -n $want ]] && met=$(verdict "$r $want")
    echo "| $label | ${cells[0]} | ${cells[1]} | ${cells[2]} | ${cells[3]} | $(spread 2 "${rt[@]}") | $(spread 2 "${rn[@]}") | $target | $met |"
}
{
    echo
    echo "## bench/compare.sh — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), wrk -t2 -c64 -d${DURATION}s, $ROUNDS rounds"
    echo
    echo "mirrorcache: \`${MC_BIN#"$ROOT"/}\`${MC_ENV:+ with \`$MC_ENV\`}; nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'); wrk $(wrk -v 2>&1 | awk 'NR == 1 { print $2 }')."
    echo "Each cell: median over the rounds (min–max); ratios: median of the per-round ratios (min–max)."
    echo "nginx = access log unbuffered (one write per request); nginx tuned = \`access_log … buffer=256k flush=1s\` (the anchor)."
    echo
    echo "| measure | direct origin | nginx | nginx tuned | mirrorcache | mirrorcache ÷ nginx tuned | mirrorcache ÷ nginx | target | met |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|---|"
    for obj in 1k 64k 1m; do
        if [[ $obj == 1k ]]; then want=1.2; else want=1.0; fi
        round_row "hit $obj req/s" "hit_${obj}_@_rps" 0 "≥ ${want}× nginx tuned" ">= $want"
        round_row "hit $obj p50 ms" "hit_${obj}_@_p50" 3 "-" ""
        round_row "hit $obj p99 ms" "hit_${obj}_@_p99" 3 "-" ""
    done
    if [[ "${ONLY_HITS:-0}" != 1 ]]; then
    read -r -a bd <<<"${R[big_direct]}"
    read -r -a bn <<<"${R[big_nginx]}"
    read -r -a bt <<<"${R[big_tuned]}"
    read -r -a bm <<<"${R[big_mc]}"
    read -r -a bmd < <(ratios "${R[big_mc]}" "${R[big_direct]}" | tr '\n' ' '; echo)
    read -r -a btd < <(ratios "${R[big_tuned]}" "${R[big_direct]}" | tr '\n' ' '; echo)
    read -r -a bnd < <(ratios "${R[big_nginx]}" "${R[big_direct]}" | tr '\n' ' '; echo)
    echo "| hit 256 MiB MiB/s ($LARGE_RUNS runs) | $(spread 0 "${bd[@]}") | $(spread 0 "${bn[@]}") | $(spread 0 "${bt[@]}") | $(spread 0 "${bm[@]}") | - | - | ≥ 0.9× direct | $(verdict "$(median "${bmd[@]}") >= 0.9") |"
    echo "| hit 256 MiB ÷ direct (per run) | - | $(spread 2 "${bnd[@]}") | $(spread 2 "${btd[@]}") | $(spread 2 "${bmd[@]}") | - | - | ≥ 0.9 | - |"
    echo "| fan-out: origin requests ($FANOUT clients, 16 MiB at $FILL_RATE/s) | - | ${R[fan_requests_nginx]} | ${R[fan_requests_tuned]} | ${R[fan_requests_mc]} | - | - | exactly 1 | $(verdict "${R[fan_requests_mc]} == 1") |"
    echo "| fan-out: per-request p50 s | - | ${R[fan_p50_nginx]} | ${R[fan_p50_tuned]} | ${R[fan_p50_mc]} | $(ratio "${R[fan_p50_mc]}" "${R[fan_p50_tuned]}") | $(ratio "${R[fan_p50_mc]}" "${R[fan_p50_nginx]}") | ≤ 0.8× nginx tuned | $(verdict "${R[fan_p50_mc]} <= 0.8 * ${R[fan_p50_tuned]}") |"
    echo "| fan-out: wall time s (fill took ${R[fan_fill_nginx]} / ${R[fan_fill_tuned]} / ${R[fan_fill_mc]} s) | - | ${R[fan_wall_nginx]} | ${R[fan_wall_tuned]} | ${R[fan_wall_mc]} | $(ratio "${R[fan_wall_mc]}" "${R[fan_wall_tuned]}") | $(ratio "${R[fan_wall_mc]}" "${R[fan_wall_nginx]}") | - | - |"
    echo "| fan-out: clients with first byte before the fill completed | - | ${R[fan_early_nginx]}/$FANOUT | ${R[fan_early_tuned]}/$FANOUT | ${R[fan_early_mc]}/$FANOUT | - | - | all | $(verdict "${R[fan_early_mc]} == $FANOUT") |"
    echo "| fan-out: first byte p50 / max s | - | ${R[fan_ttfb_p50_nginx]} / ${R[fan_ttfb_max_nginx]} | ${R[fan_ttfb_p50_tuned]} / ${R[fan_ttfb_max_tuned]} | ${R[fan_ttfb_p50_mc]} / ${R[fan_ttfb_max_mc]} | - | - | - | - |"
    echo "| fan-out: complete 200 responses | - | ${R[fan_ok_nginx]}/$FANOUT | ${R[fan_ok_tuned]}/$FANOUT | ${R[fan_ok_mc]}/$FANOUT | - | - | all | $(verdict "${R[fan_ok_mc]} == $FANOUT") |"
    round_row "miss: $MISSES cold 64 KiB one after another a round, per-request p50 ms" "miss_p50_@" 3 "≤ nginx tuned" "<= 1"
    round_row "miss: the same, total s" "miss_total_@" 4 "-" ""
    fi # ONLY_HITS
    if [[ "${ONLY_HITS:-0}" == 1 ]]; then want_misses=0; else want_misses=$((MISSES * ROUNDS)); fi
    echo "| origin requests for the hit and miss objects | - | ${R[hit_origin_nginx]} + ${R[miss_origin_nginx]} | ${R[hit_origin_tuned]} + ${R[miss_origin_tuned]} | ${R[hit_origin_mc]} + ${R[miss_origin_mc]} | - | - | 3 + $want_misses | $(verdict "${R[hit_origin_mc]} == 3 && ${R[miss_origin_mc]} == $want_misses") |"
    echo "| peak RSS MiB (nginx: sum of workers' VmHWM) | - | ${R[rss_nginx]} | ${R[rss_tuned]} | ${R[rss_mc]} | - | - | < 100 MiB | $(verdict "${R[rss_mc]} < 100") |"
    errors=""
    for key in "${!R[@]}"; do
        if [[ $key == *_err && ${R[$key]} != 0 ]]; then errors+=" $key=${R[$key]}"; fi
    done
    echo
    echo "wrk errors (non-2xx or socket): ${errors:- none}"
    echo
    echo "mirrorcache peak RSS after each phase: $PHASE_RSS"
    echo
    echo "Per-round req/s (order of rounds):"
    for obj in 1k 64k 1m; do
        for who in "${WHO[@]}"; do echo "    hit $obj $who: ${R[hit_${obj}_${who}_rps]}"; done
    done
}
