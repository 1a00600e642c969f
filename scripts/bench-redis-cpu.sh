#!/usr/bin/env bash
# The scale-out rows of issue 10 on their own, in one run: redis-server CPU per won claim of
# seckill (claim scripts + the pipeline's reads, acknowledgements and deletes) against redis-server
# CPU per call of seed 002's 4-command script under `redis-benchmark -c 50`, and won claims/s of
# seckill against the Node.js peer (seed 002's script through ioredis, bench/peers/node-lua), both
# stormed by the same wrk script. redis-server CPU is read from /proc around each row, so it holds
# up on a busy machine better than any claims/s figure.
#
# usage: scripts/bench-redis-cpu.sh [seconds=5] [connections=128]
#        SECKILL_CLAIM_BATCH=1 scripts/bench-redis-cpu.sh   (one script call per claim: the
#                                                            figures before batching)
# needs: a release build (built if missing), redis-server, redis-benchmark, wrk, node + npm,
#        PostgreSQL on BENCH_POSTGRES_ADMIN (default postgres://postgres@127.0.0.1:5432/postgres)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CONNS=${2:-128}
SERVER_CPU=${BENCH_SERVER_CPU:-1}
GEN_CPU=${BENCH_GEN_CPU:-0}
PG=${BENCH_POSTGRES_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
BIN=${BENCH_BIN:-target/release/seckill}
[ -x "$BIN" ] || cargo build --release
for b in redis-server redis-benchmark redis-cli wrk node npm psql; do
    command -v "$b" >/dev/null || { echo "missing $b (apt-get install redis-server redis-tools wrk nodejs npm postgresql-client)"; exit 1; }
done
(cd bench/peers/node-lua && npm ci --silent --no-audit --no-fund)

WORK=$(mktemp -d /tmp/seckill-redis-cpu.XXXXXX)
PIDS=()
DB=seckill_rcpu_$RANDOM$RANDOM
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    psql "$PG" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_of() { python3 -c "print($(awk '{print $14 + $15}' "/proc/$1/stat") / $(getconf CLK_TCK))"; }

RPORT=$(free_port); NPORT=$(free_port)
taskset -c "$SERVER_CPU" redis-server --port "$RPORT" --bind 127.0.0.1 --save '' \
    --appendonly no --maxmemory-policy noeviction >"$WORK/redis.log" 2>&1 &
REDIS=$!; PIDS+=("$REDIS")
until redis-cli -p "$RPORT" ping >/dev/null 2>&1; do sleep 0.05; done
psql "$PG" -qc "CREATE DATABASE $DB" >/dev/null
TOKEN=bench-$RANDOM
taskset -c "$SERVER_CPU" "$BIN" serve --listen 127.0.0.1:0 --admin-token "$TOKEN" \
    --redis "redis://127.0.0.1:$RPORT" --postgres "${PG%/*}/$DB" >"$WORK/serve.out" 2>"$WORK/serve.log" &
SECKILL=$!; PIDS+=("$SECKILL")
taskset -c "$SERVER_CPU" node bench/peers/node-lua/server.js "$NPORT" "$RPORT" air_id:bench \
    >"$WORK/node.log" 2>&1 &
PIDS+=($!)
URL=
for _ in $(seq 1200); do
    URL=$(grep -o 'listening on http://[0-9.:]*' "$WORK/serve.log" | head -1 | sed 's/listening on //') || true
    [ -n "$URL" ] && break
    sleep 0.05
done
[ -n "$URL" ] || { cat "$WORK/serve.log"; exit 1; }
until grep -q listening "$WORK/node.log"; do sleep 0.05; done
curl -sf -XPOST "$URL/v1/campaigns" -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
    -d '{"id":"hot","stock":1000000000,"per_user_limit":1}' >/dev/null
redis-cli -p "$RPORT" SET air_id:bench 1000000000000 >/dev/null
SHA=$(redis-cli -p "$RPORT" SCRIPT LOAD "$(cat bench/peers/node-lua/seed002.lua)")

drained() {
    for _ in $(seq 300); do
        curl -sf "$URL/healthz" | grep -q '"pipeline_lag":0' && return 0
        sleep 0.1
    done
}
# row NAME CMD...: prints redis-server CPU µs per won claim and claims/s
row() {
    local name=$1; shift
    local before after
    before=$(cpu_of "$REDIS")
    taskset -c "$GEN_CPU" "$@" >"$WORK/$name.txt" 2>&1
    drained
    after=$(cpu_of "$REDIS")
    python3 - "$name" "$before" "$after" "$WORK/$name.txt" <<'EOF'
import re, sys
name, before, after, path = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
text = open(path).read()
if "Requests/sec" in text:
    n = int(re.search(r"(\d+) requests in", text).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    won = n - (int(bad.group(1)) if bad else 0)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
elif name == "seckill_batches_redis_benchmark":  # 1,000 calls of 128 claims, all won
    won = 128000
    rate = float(text.strip().splitlines()[-1].replace('"', '').split(',')[1]) * 128
else:  # redis-benchmark: every call of the script wins
    won = 200000
    rate = float(text.strip().splitlines()[-1].replace('"', '').split(',')[1])
print(f"{name:28s} {rate:>10,.0f}/s  won {won:>9,}  redis-server {1e6 * (after - before) / won:6.2f} µs/won claim")
EOF
}
echo "redis-server CPU per won claim, $SECS s rows, $CONNS connections (load: $(cut -d' ' -f1-3 /proc/loadavg))"
row seed002_redis_benchmark redis-benchmark -p "$RPORT" -c 50 -P 1 -n 200000 -r 1000000000 --csv \
    EVALSHA "$SHA" 1 user_id:__rand_int__ air_id:bench 1
row node_peer_wrk wrk -t1 -c"$CONNS" -d"${SECS}s" -s scripts/bench/wrk-claims.lua \
    "http://127.0.0.1:$NPORT/claims" -- "n$RANDOM"
row seckill_wrk wrk -t1 -c"$CONNS" -d"${SECS}s" -s scripts/bench/wrk-claims.lua \
    "$URL/v1/campaigns/hot/claims" -- "s$RANDOM"
# The batch script alone, as the batcher sends it when 128 claims wait (redis-benchmark, 50
# clients), into the same campaign, so the pipeline moves these orders too: Redis's cost per won
# claim of a full batch, without the HTTP side's pace deciding the batch size.
BSHA=$(redis-cli -p "$RPORT" SCRIPT LOAD "$(cat src/engine/scale_out/lua/claims.lua)")
BARGS=()
for _ in $(seq 128); do BARGS+=("b__rand_int__" 1 0); done
row seckill_batches_redis_benchmark redis-benchmark -p "$RPORT" -c 50 -P 1 -n 1000 -r 1000000000 --csv \
    EVALSHA "$BSHA" 9 '{c:hot}:meta' '{c:hot}:users' '{c:hot}:codes' '{c:hot}:seq' '{c:hot}:orders' \
    '{c:hot}:held' '{c:hot}:deadlines' '{c:hot}:idemrej:' '{c:hot}:packed' 86400 600 64 100000 0 "${BARGS[@]}"
echo "seckill claim batch: ${SECKILL_CLAIM_BATCH:-128} (SECKILL_CLAIM_BATCH)"
redis-cli -p "$RPORT" INFO commandstats | grep cmdstat_ | tr -d '\r' | sed -E 's/,rejected_calls.*//' || true
