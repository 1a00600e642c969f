#!/usr/bin/env bash
# seckill's benchmark suite: one run, one machine, every row measured against ceilings taken in
# the same run, written to docs/BENCHMARKS.md.
#
# Rows: the HTTP ceiling (a trivial axum handler, `seckill baseline`), the Redis ceiling
# (redis-benchmark EVALSHA of scripts/bench/claim.lua, 50 clients, no pipelining), seckill
# embedded (hot / soldout / seed002), seckill on Redis with one and two instances (only when the
# binary supports `serve --redis`), wrk cross-checks, and criterion's claim-step benches.
#
# Server and generator are pinned to different cores (BENCH_SERVER_CPU, BENCH_GEN_CPU) so the
# two share the machine the same way in every row; ratios are what to compare across machines.
#
# The timed rows run in BENCH_ROUNDS interleaved rounds (ceiling, seckill, ceiling, ...) and the
# report takes medians, so a burst of load from another process skews one round, not a ratio.
#
# Usage: scripts/bench.sh                 (defaults: 3 rounds of 5s per row, 128 connections)
#        BENCH_ROUNDS=5 BENCH_DURATION=10s BENCH_CRITERION=0 scripts/bench.sh
#        BENCH_OUT=/tmp/b.md scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${BENCH_DURATION:-5s}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNECTIONS:-128}
SERVER_CPU=${BENCH_SERVER_CPU:-1}
GEN_CPU=${BENCH_GEN_CPU:-0}
CRITERION=${BENCH_CRITERION:-1}
OUT=${BENCH_OUT:-docs/BENCHMARKS.md}
TOKEN=bench-$RANDOM$RANDOM

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
command -v taskset >/dev/null || need+=(util-linux)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing benchmark tools: ${need[*]}"
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

cargo build --release --quiet
if [ "$CRITERION" = 1 ]; then cargo bench --quiet --bench claim_step --no-run 2>/dev/null; fi
BIN=$PWD/target/release/seckill
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
echo "work dir $WORK; server on CPU $SERVER_CPU, generator on CPU $GEN_CPU"
UPTIME_BEFORE=$(uptime)

# start NAME CMD...: runs CMD pinned to the server core, waits for its "listening on" log line
# and sets URL and PID.
start() {
    local name=$1; shift
    taskset -c "$SERVER_CPU" "$@" >"$WORK/$name.out" 2>"$WORK/$name.log" &
    PID=$!
    PIDS+=("$PID")
    for _ in $(seq 200); do
        URL=$(grep -o 'listening on http://[0-9.:]*' "$WORK/$name.log" | head -1 | sed 's/listening on //') || true
        [ -n "$URL" ] && return 0
        sleep 0.05
    done
    echo "$name did not start:"; cat "$WORK/$name.log"; exit 1
}
stop() { kill -INT "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# CPU seconds (user + system) the server process $SERVER has used so far. Its per-claim CPU is
# the figure contention from other processes disturbs least.
SERVER=
server_cpu() {
    local ticks
    if [ -n "$SERVER" ] && ticks=$(awk '{print $14 + $15}' "/proc/$SERVER/stat" 2>/dev/null); then
        python3 -c "print($ticks / $(getconf CLK_TCK))"
    else
        echo ""
    fi
}

# CPU seconds redis-server has used so far (empty before it runs): every row that goes through
# Redis records it around the row, and once the orders of the row have left Redis (pipeline
# lag 0), so the pipeline's reads, acknowledgements and deletes count too.
RPID=
redis_cpu() {
    local ticks
    if [ -n "$RPID" ] && ticks=$(awk '{print $14 + $15}' "/proc/$RPID/stat" 2>/dev/null); then
        python3 -c "print($ticks / $(getconf CLK_TCK))"
    fi
}
# drained URL...: waits (at most 30 s) until each seckill instance reports pipeline_lag 0.
drained() {
    local u
    for u in "$@"; do
        for _ in $(seq 300); do
            curl -sf "$u/healthz" | grep -q '"pipeline_lag":0' && break
            sleep 0.1
        done
    done
}
DRAIN_URLS=()

# bench ROW ARGS...: `seckill bench` pinned to the generator core, JSON kept as $WORK/ROW.json.
bench() {
    local row=$1; shift
    echo "== $row (round $ROUND): seckill bench $*"
    echo "seckill bench $*" >"$WORK/$row.cmd"
    local f="$WORK/$row.r$ROUND" rc=0 before rbefore
    before=$(server_cpu); rbefore=$(redis_cpu)
    local pid=()
    [ -n "$SERVER" ] && pid=(--server-pid "$SERVER")
    taskset -c "$GEN_CPU" "$BIN" bench --threads 1 --json --progress never \
        --admin-token "$TOKEN" "${pid[@]}" "$@" >"$f.json" 2>"$f.err" || rc=$?
    echo "$before $(server_cpu)" >"$f.cpu"
    [ ${#DRAIN_URLS[@]} -gt 0 ] && drained "${DRAIN_URLS[@]}"
    [ -n "$rbefore" ] && echo "$rbefore $(redis_cpu)" >"$f.rcpu"
    echo "$rc" >"$f.rc"
    python3 - "$f.json" <<'EOF' || cat "$f.err"
import json, sys
r = json.load(open(sys.argv[1]))
v = r.get("verification")
print(f"   {r['claims_per_second']:.0f} claims/s  p50 {r['latency_ms']['p50']:.2f} ms  "
      f"p99 {r['latency_ms']['p99']:.2f} ms  "
      + ("unverified" if v is None else f"violations {len(v['violations'])}"))
EOF
}

# wrk_row ROW URL: wrk, one thread, $CONNS connections, POSTing claims of distinct users.
wrk_row() {
    local row=$1 url=$2
    echo "== $row (round $ROUND): wrk -t1 -c$CONNS -d$DURATION $url"
    echo "wrk -t1 -c$CONNS -d$DURATION --latency -s scripts/bench/wrk-claims.lua $url" >"$WORK/$row.cmd"
    local f="$WORK/$row.r$ROUND" before rbefore
    before=$(server_cpu); rbefore=$(redis_cpu)
    # A fresh user range per run: wrk's Lua random generator starts from the same seed.
    taskset -c "$GEN_CPU" wrk -t1 -c"$CONNS" -d"$DURATION" --latency \
        -s scripts/bench/wrk-claims.lua "$url" -- "$ROUND$RANDOM" >"$f.wrk"
    echo "$before $(server_cpu)" >"$f.cpu"
    [ ${#DRAIN_URLS[@]} -gt 0 ] && drained "${DRAIN_URLS[@]}"
    [ -n "$rbefore" ] && echo "$rbefore $(redis_cpu)" >"$f.rcpu"
    grep -E 'Requests/sec|50%|99%' "$f.wrk" | tr -s ' \n' ' ' | sed 's/^/   /'; echo
}

skip() { echo "$2" >"$WORK/$1.skip"; echo "== $1: $2"; }

# --- servers: all started up front, all pinned to the server core; an idle one costs nothing ---
start baseline "$BIN" baseline --listen 127.0.0.1:0
BASE_URL=$URL; BASE_PID=$PID
start embedded_full "$BIN" serve --listen 127.0.0.1:0 --data "$WORK/data-full" \
    --admin-token "$TOKEN" --sync full
FULL_URL=$URL; FULL_PID=$PID
start embedded_normal "$BIN" serve --listen 127.0.0.1:0 --data "$WORK/data-normal" \
    --admin-token "$TOKEN" --sync normal
NORMAL_URL=$URL; NORMAL_PID=$PID
curl -sf -XPOST "$FULL_URL/v1/campaigns" -H "authorization: Bearer $TOKEN" \
    -H 'content-type: application/json' \
    -d '{"id":"wrk-hot","stock":1000000000,"per_user_limit":1}' >/dev/null
# A sold-out campaign for wrk's rejection row: one unit, claimed once before the storm.
curl -sf -XPOST "$FULL_URL/v1/campaigns" -H "authorization: Bearer $TOKEN" \
    -H 'content-type: application/json' \
    -d '{"id":"wrk-gone","stock":1,"per_user_limit":1}' >/dev/null
curl -sf -XPOST "$FULL_URL/v1/campaigns/wrk-gone/claims" -H 'content-type: application/json' \
    -d '{"user_id":"first"}' | grep -q '"won"'

# Redis ceiling: redis-benchmark EVALSHA of scripts/bench/claim.lua, 50 clients, no pipelining.
RPORT=$((20000 + RANDOM % 20000))
taskset -c "$SERVER_CPU" redis-server --port "$RPORT" --save "" --appendonly no \
    >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!; PIDS+=("$REDIS_PID")
for _ in $(seq 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
SHA=$(redis-cli -p "$RPORT" SCRIPT LOAD "$(cat scripts/bench/claim.lua)")
redis-cli -p "$RPORT" HSET '{c:bench}:meta' status active remaining 1000000000 limit 1 >/dev/null
export BENCH_REDIS_REQUESTS=${BENCH_REDIS_REQUESTS:-300000}
RB_CMD="redis-benchmark -p $RPORT -c 50 -P 1 -n $BENCH_REDIS_REQUESTS -r 1000000000 --csv EVALSHA $SHA 4 {c:bench}:meta {c:bench}:users {c:bench}:seq {c:bench}:orders u__rand_int__ 1"
redis_ceiling() {
    echo "== redis_ceiling (round $ROUND): $RB_CMD"
    echo "$RB_CMD" >"$WORK/redis_ceiling.cmd"
    local before
    SERVER=$REDIS_PID; before=$(server_cpu)
    # shellcheck disable=SC2086
    taskset -c "$GEN_CPU" $RB_CMD >"$WORK/redis_ceiling.r$ROUND.csv"
    echo "$before $(server_cpu)" >"$WORK/redis_ceiling.r$ROUND.cpu"
    cp "$WORK/redis_ceiling.r$ROUND.cpu" "$WORK/redis_ceiling.r$ROUND.rcpu"
    tail -1 "$WORK/redis_ceiling.r$ROUND.csv" | cut -d, -f2- | sed 's/^/   rps,avg,min,p50,p95,p99,max: /'
    # One more claim by a fresh user shows the script still sells (stock left, not erroring).
    redis-cli -p "$RPORT" EVALSHA "$SHA" 4 '{c:bench}:meta' '{c:bench}:users' '{c:bench}:seq' \
        '{c:bench}:orders' "check-$ROUND" 1 >"$WORK/redis_ceiling.r$ROUND.check"
}

# Seed 002's own script (4 commands: SISMEMBER, GET, DECRBY, SADD), the same way: the Redis
# CPU per call it costs is what seckill's Redis CPU per won claim is compared with.
SEED002_LUA=bench/peers/node-lua/seed002.lua
SHA002=$(redis-cli -p "$RPORT" SCRIPT LOAD "$(cat "$SEED002_LUA")")
redis-cli -p "$RPORT" SET air_id:bench 1000000000000 >/dev/null
RB002_CMD="redis-benchmark -p $RPORT -c 50 -P 1 -n $BENCH_REDIS_REQUESTS -r 1000000000 --csv EVALSHA $SHA002 1 user_id:__rand_int__ air_id:bench 1"
seed002_ceiling() {
    echo "== seed002_ceiling (round $ROUND): $RB002_CMD"
    echo "$RB002_CMD" >"$WORK/seed002_ceiling.cmd"
    local f="$WORK/seed002_ceiling.r$ROUND" before
    SERVER=$REDIS_PID; before=$(server_cpu)
    # shellcheck disable=SC2086
    taskset -c "$GEN_CPU" $RB002_CMD >"$f.csv"
    echo "$before $(server_cpu)" >"$f.cpu"
    cp "$f.cpu" "$f.rcpu"
    tail -1 "$f.csv" | cut -d, -f2- | sed 's/^/   rps,avg,min,p50,p95,p99,max: /'
    redis-cli -p "$RPORT" EVALSHA "$SHA002" 1 "user_id:check-$ROUND" air_id:bench 1 >"$f.check"
    sed -i 's/^1$/won/' "$f.check"
}

# The Node.js peer: seed 002's script behind a tiny ioredis HTTP server (bench/peers/node-lua),
# what a user would write from seed 002; wrk storms it with the same claims as seckill.
NODE_OK=0
if command -v npm >/dev/null && (cd bench/peers/node-lua && npm ci --silent --no-audit --no-fund >/dev/null 2>&1); then
    NPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    taskset -c "$SERVER_CPU" node bench/peers/node-lua/server.js "$NPORT" "$RPORT" air_id:bench \
        >"$WORK/node_peer.log" 2>&1 &
    NODE_PID=$!; PIDS+=("$NODE_PID")
    for _ in $(seq 100); do grep -q listening "$WORK/node_peer.log" && break; sleep 0.05; done
    grep -q listening "$WORK/node_peer.log" && NODE_OK=1
fi
[ "$NODE_OK" = 1 ] || skip node_peer_wrk "skipped: node/npm missing or the Node peer did not start (see bench/peers/node-lua)"

# seckill on Redis, one and two instances, when this binary has the scale-out deployment.
SCALE_OUT=0
if "$BIN" serve --help 2>/dev/null | grep -q -- '--redis'; then
    SCALE_OUT=1
    DB=seckill_bench_$RANDOM$RANDOM
    PG=${BENCH_POSTGRES_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
    psql "$PG" -qc "CREATE DATABASE $DB" >/dev/null
    PGURL="${PG%/*}/$DB"
    start redis_1 "$BIN" serve --listen 127.0.0.1:0 --admin-token "$TOKEN" \
        --redis "redis://127.0.0.1:$RPORT" --postgres "$PGURL"
    R1_URL=$URL; R1_PID=$PID
    start redis_2 "$BIN" serve --listen 127.0.0.1:0 --admin-token "$TOKEN" \
        --redis "redis://127.0.0.1:$RPORT" --postgres "$PGURL"
    R2_URL=$URL
    curl -sf -XPOST "$R1_URL/v1/campaigns" -H "authorization: Bearer $TOKEN" \
        -H 'content-type: application/json' \
        -d '{"id":"wrk-hot","stock":1000000000,"per_user_limit":1}' >/dev/null
else
    for r in redis_1_hot redis_1_hot_wrk redis_1_seed002 redis_2_hot redis_2_seed002; do
        skip "$r" "skipped: this seckill binary is not built with scale-out (serve has no --redis)"
    done
fi

# --- timed rows, interleaved in rounds so each ratio compares rows minutes apart at most ------
# Embedded rows first, Redis rows after. With the two interleaved, every row after the first
# Redis round ran slower (HTTP ceiling 49k -> 36k/s, `soldout` 42k -> 19k/s): the scale-out rows
# leave work behind on the unpinned PostgreSQL and a grown redis-server, which then competes
# with the rows that follow.
for ROUND in $(seq "$ROUNDS"); do
    SERVER=$BASE_PID
    bench http_ceiling --url "$BASE_URL" --campaign ceiling --no-verify --scenario hot \
        -z "$DURATION" -c "$CONNS"
    wrk_row http_ceiling_wrk "$BASE_URL/v1/campaigns/ceiling/claims"
    SERVER=$FULL_PID
    bench embedded_full_hot --url "$FULL_URL" --scenario hot -z "$DURATION" -c "$CONNS"
    wrk_row embedded_full_hot_wrk "$FULL_URL/v1/campaigns/wrk-hot/claims"
    bench embedded_full_soldout --url "$FULL_URL" --scenario soldout -z "$DURATION" -c "$CONNS"
    wrk_row embedded_full_soldout_wrk "$FULL_URL/v1/campaigns/wrk-gone/claims"
    SERVER=$NORMAL_PID
    bench embedded_normal_hot --url "$NORMAL_URL" --scenario hot -z "$DURATION" -c "$CONNS"
done
ROUND=1  # seed 002 with full verification, once per deployment
SERVER=$FULL_PID
bench embedded_full_seed002 --url "$FULL_URL" --scenario seed002
RPID=$REDIS_PID  # from here on every row records redis-server's CPU too
for ROUND in $(seq "$ROUNDS"); do
    redis_ceiling
    seed002_ceiling
    if [ "$NODE_OK" = 1 ]; then
        SERVER=$NODE_PID
        wrk_row node_peer_wrk "http://127.0.0.1:$NPORT/claims"
    fi
    if [ "$SCALE_OUT" = 1 ]; then
        DRAIN_URLS=("$R1_URL" "$R2_URL")
        SERVER=$R1_PID
        wrk_row redis_1_hot_wrk "$R1_URL/v1/campaigns/wrk-hot/claims"
        bench redis_1_hot --url "$R1_URL" --scenario hot -z "$DURATION" -c "$CONNS"
        SERVER=
        bench redis_2_hot --url "$R1_URL,$R2_URL" --scenario hot -z "$DURATION" -c "$CONNS"
        DRAIN_URLS=()
    fi
done

ROUND=1
if [ "$SCALE_OUT" = 1 ]; then
    DRAIN_URLS=("$R1_URL" "$R2_URL")
    SERVER=$R1_PID
    bench redis_1_seed002 --url "$R1_URL" --scenario seed002
    SERVER=
    bench redis_2_seed002 --url "$R1_URL,$R2_URL" --scenario seed002
    psql "$PG" -qc "DROP DATABASE $DB" >/dev/null 2>&1 || true
fi
for p in "${PIDS[@]}"; do stop "$p"; done
PIDS=()

# --- criterion: the claim step --------------------------------------------------------------------
if [ "$CRITERION" = 1 ]; then
    echo "== criterion: cargo bench --bench claim_step"
    taskset -c "$SERVER_CPU" cargo bench --quiet --bench claim_step 2>/dev/null \
        | tee "$WORK/criterion.txt" | grep -E 'time:|thrpt:' || true
fi

UPTIME_AFTER=$(uptime)
python3 scripts/bench/report.py "$WORK" "$OUT" \
    "$UPTIME_BEFORE" "$UPTIME_AFTER" "$DURATION" "$CONNS" "$SERVER_CPU" "$GEN_CPU" "$ROUNDS"
echo "wrote $OUT"

# --- recovery: restart time and memory with a full ledger (its own section of $OUT) ---------------
if [ "${BENCH_RECOVERY:-1}" = 1 ]; then
    RECOVERY_SIZES=${RECOVERY_SIZES:-"100000 1000000"} BENCH_OUT=$OUT scripts/bench-recovery.sh
fi
