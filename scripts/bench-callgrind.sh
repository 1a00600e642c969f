#!/usr/bin/env bash
# Instructions per claim, counted by valgrind's callgrind: the one figure of seckill's claim
# path that other processes on the machine cannot disturb (it counts the server's user-space
# instructions, all threads, whatever the scheduler does). Kernel work (the response `writev`,
# the ledger's `pwrite`/`fsync`) is not counted: read it with the CPU per claim of
# scripts/bench.sh.
#
# For each row the server runs under callgrind; after a warm-up its counters are zeroed, wrk
# sends claims of distinct users for BENCH_CG_DURATION, and the counters are dumped. Ir ÷ the
# requests wrk completed = instructions per claim. Rows:
#   ceiling  `seckill baseline` (parses the same body, one atomic increment)
#   soldout  embedded, a sold-out campaign: every claim refused by the stock board
#   hot      embedded, `--sync full`: every claim won, answered after its group commit
#   redis    scale-out (a throwaway redis-server and PostgreSQL database): every claim won; the
#            seckill process only (redis-server's share: scripts/bench-claims-lua.sh)
#   shed     embedded, `--max-in-flight 1`: the claims beyond the one in flight answered 503
#            `overloaded` (works with builds older than the per-address shares, for a before
#            and after)
#   refused  embedded, a flood from one address held to one place (`--max-in-flight-per-ip 1`,
#            loopback held): nearly every claim answered 503 `overloaded` — the refusal path of
#            an attack (counted per request; the share of 503s is printed beside it)
#
# Usage: scripts/bench-callgrind.sh [BIN]     (default target/release/seckill)
#        BENCH_CG_DURATION=10s BENCH_CG_ROWS="ceiling soldout" scripts/bench-callgrind.sh
# The annotated profiles stay in BENCH_CG_KEEP (default: a temporary directory, removed);
# `callgrind_annotate FILE | head -60` shows where each row's instructions go.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${1:-$PWD/target/release/seckill}
DURATION=${BENCH_CG_DURATION:-5s}
ROWS=${BENCH_CG_ROWS:-"ceiling soldout hot"}
CONNS=${BENCH_CG_CONNECTIONS:-16}
TOKEN=cg-$RANDOM

need=()
command -v valgrind >/dev/null || need+=(valgrind)
command -v wrk >/dev/null || need+=(wrk)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing: ${need[*]}"
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
[ -x "$BIN" ] || cargo build --release --quiet

WORK=${BENCH_CG_KEEP:-$(mktemp -d)}
mkdir -p "$WORK"
PID=
cleanup() {
    if [ -n "$PID" ]; then kill -INT "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    [ -n "${BENCH_CG_KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

# start ROW ARGS...: the server under callgrind, collection on, URL set once it listens.
start() {
    local row=$1; shift
    # Uncompressed names: each dump (the storm is the second) reads alone in callgrind_annotate.
    valgrind --tool=callgrind --compress-strings=no --compress-pos=no --callgrind-out-file="$WORK/$row.%p.out" \
        "$BIN" "$@" >"$WORK/$row.stdout" 2>"$WORK/$row.log" &
    PID=$!
    URL=
    for _ in $(seq 600); do
        URL=$(grep -o 'listening on http://[0-9.:]*' "$WORK/$row.log" | head -1 | sed 's/listening on //') || true
        [ -n "$URL" ] && return 0
        sleep 0.1
    done
    echo "$row did not start:"; cat "$WORK/$row.log"; exit 1
}

campaign() { # ID STOCK
    curl -sf -XPOST "$URL/v1/campaigns" -H "authorization: Bearer $TOKEN" \
        -H 'content-type: application/json' \
        -d "{\"id\":\"$1\",\"stock\":$2,\"per_user_limit\":1}" >/dev/null
}

# measure ROW CAMPAIGN: warm-up, zero, timed wrk, dump; prints instructions per claim.
measure() {
    local row=$1 id=$2 n ir
    wrk -t1 -c"$CONNS" -d2s -s scripts/bench/wrk-claims.lua \
        "$URL/v1/campaigns/$id/claims" -- "warm$RANDOM" >/dev/null
    callgrind_control -z "$PID" >/dev/null 2>&1
    wrk -t1 -c"$CONNS" -d"$DURATION" -s scripts/bench/wrk-claims.lua \
        "$URL/v1/campaigns/$id/claims" -- "cg$RANDOM" >"$WORK/$row.wrk"
    callgrind_control -d "$row" "$PID" >/dev/null 2>&1
    n=$(awk '/requests in/ {print $1}' "$WORK/$row.wrk")
    # The dump of `callgrind_control -d` is part 1 (all threads in one file).
    ir=$(awk '/^summary:/ {print $2}' "$WORK/$row.$PID.out.1")
    local refused
    refused=$(awk '/Non-2xx/ {print $NF}' "$WORK/$row.wrk")
    if [ -n "$refused" ] && [ "$row" != refused ] && [ "$row" != shed ]; then echo "$row: wrk saw non-2xx answers"; cat "$WORK/$row.wrk"; exit 1; fi
    printf '%-8s %8d claims  %12d Ir  %8.0f instructions per claim%s\n' "$row" "$n" "$ir" \
        "$(python3 -c "print($ir / $n)")" "${refused:+  ($refused answered 503)}"
    kill -INT "$PID"; wait "$PID" 2>/dev/null || true; PID=
}

for row in $ROWS; do
    case $row in
        ceiling)
            start ceiling baseline --listen 127.0.0.1:0
            measure ceiling ceiling ;;
        soldout)
            start soldout serve --listen 127.0.0.1:0 --data "$WORK/data-soldout" --admin-token "$TOKEN"
            campaign gone 1
            curl -sf -XPOST "$URL/v1/campaigns/gone/claims" -H 'content-type: application/json' \
                -d '{"user_id":"first"}' | grep -q '"won"'
            measure soldout gone ;;
        shed)
            start shed serve --listen 127.0.0.1:0 --data "$WORK/data-shed" --admin-token "$TOKEN" \
                --max-in-flight 1
            campaign hot 1000000000
            measure shed hot ;;
        refused)
            start refused serve --listen 127.0.0.1:0 --data "$WORK/data-refused" --admin-token "$TOKEN" \
                --max-in-flight-per-ip 1 --share-loopback
            campaign hot 1000000000
            measure refused hot ;;
        hot)
            start hot serve --listen 127.0.0.1:0 --data "$WORK/data-hot" --admin-token "$TOKEN" --sync full
            campaign hot 1000000000
            measure hot hot ;;
        redis)
            PG=${BENCH_POSTGRES_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
            RPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
            redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
            REDIS=$!
            until redis-cli -p "$RPORT" ping >/dev/null 2>&1; do sleep 0.05; done
            DB=seckill_cg_$RANDOM$RANDOM
            psql "$PG" -qc "CREATE DATABASE $DB" >/dev/null
            start redis serve --listen 127.0.0.1:0 --admin-token "$TOKEN" \
                --redis "redis://127.0.0.1:$RPORT" --postgres "${PG%/*}/$DB"
            campaign hot 1000000000
            measure redis hot
            kill "$REDIS"; wait "$REDIS" 2>/dev/null || true
            psql "$PG" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null ;;
        *) echo "unknown row $row"; exit 2 ;;
    esac
done
