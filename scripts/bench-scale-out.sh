#!/usr/bin/env bash
# Measures claims/s of the scale-out deployment on this machine: one fresh redis-server, one
# throwaway PostgreSQL cluster, two `seckill serve` instances, one wrk per instance firing
# claims of distinct users at a campaign that does not sell out (every claim wins, so each one
# runs the whole path: Lua script, stream, pipeline into PostgreSQL). Then redis-benchmark
# EVALSHA of claim.lua alone, the ceiling Redis puts on any number of instances.
#
# usage: scripts/bench-scale-out.sh [seconds=20] [connections per instance=64] [appendfsync=everysec]
#                                   [instances loaded: 2, or 1 for a single-instance baseline]
# needs: redis-server, redis-benchmark, PostgreSQL binaries, wrk (apt-get install wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
CONNS=${2:-64}
FSYNC=${3:-everysec}
LOADED=${4:-2}
BIN=target/release/seckill
[ -x "$BIN" ] || cargo build --release
for b in redis-server redis-benchmark redis-cli wrk; do
    command -v "$b" >/dev/null || { echo "missing $b (apt-get install redis-server wrk)"; exit 1; }
done
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$PGBIN" ] || { echo "missing PostgreSQL (apt-get install postgresql)"; exit 1; }

WORK=$(mktemp -d /tmp/seckill-bench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -f "$WORK/pg/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

RPORT=$(free_port); PGPORT=$(free_port); P1=$(free_port); P2=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --dir "$WORK" --save '' \
    --appendonly yes --appendfsync "$FSYNC" --maxmemory-policy noeviction >"$WORK/redis.log" &
PIDS+=($!)
[ "$(id -u)" -eq 0 ] && chown postgres "$WORK"
as_pg "$PGBIN/initdb" -U postgres -A trust -N -D "$WORK/pg" >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg.log" -o "-p $PGPORT -k $WORK -c listen_addresses=127.0.0.1" -w start >/dev/null
as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres bench
until redis-cli -p "$RPORT" ping >/dev/null 2>&1; do sleep 0.1; done

TOKEN=bench-token
for port in "$P1" "$P2"; do
    RUST_LOG=warn "$BIN" serve --listen "127.0.0.1:$port" --admin-token "$TOKEN" \
        --redis "redis://127.0.0.1:$RPORT" --postgres "postgres://postgres@127.0.0.1:$PGPORT/bench" \
        >"$WORK/serve-$port.log" 2>&1 &
    PIDS+=($!)
done
for port in "$P1" "$P2"; do
    until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; do sleep 0.1; done
done
curl -sf -XPOST "http://127.0.0.1:$P1/v1/campaigns" -H "authorization: Bearer $TOKEN" \
    -H 'content-type: application/json' \
    -d '{"id": "bench", "stock": 1000000000, "per_user_limit": 1}' >/dev/null

cat >"$WORK/claim.lua" <<'LUA'
local n, tid = 0, 0
function setup(thread) thread:set("tid", tid); tid = tid + 1 end
function init(args) prefix = args[1] end
function request()
  n = n + 1
  return wrk.format("POST", "/v1/campaigns/bench/claims", {["content-type"] = "application/json"},
                    '{"user_id":"' .. prefix .. "-" .. tid .. "-" .. n .. '"}')
end
LUA
echo "== $LOADED instance(s) loaded, $CONNS connections each, ${SECS}s, appendfsync $FSYNC (load average: $(cut -d" " -f1-3 /proc/loadavg))"
wrk -t2 -c"$CONNS" -d"${SECS}s" --latency -s "$WORK/claim.lua" "http://127.0.0.1:$P1" -- a >"$WORK/wrk1.txt" &
W1=$!
if [ "$LOADED" -ge 2 ]; then
    wrk -t2 -c"$CONNS" -d"${SECS}s" --latency -s "$WORK/claim.lua" "http://127.0.0.1:$P2" -- b >"$WORK/wrk2.txt" &
    wait $W1 $!
else
    wait $W1
    echo "Requests/sec: 0" >"$WORK/wrk2.txt"
fi
for f in "$WORK/wrk1.txt" "$WORK/wrk2.txt"; do grep -E "Requests/sec|Non-2xx|Socket errors|99%|50%" "$f" | sed 's/^/  /'; echo; done
R1=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk1.txt"); R2=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk2.txt")
echo "claims/s, all loaded instances together: $(python3 -c "print(round($R1 + $R2))")"

echo "== draining the pipeline"
until curl -sf "http://127.0.0.1:$P1/healthz" | grep -q '"pipeline_lag":0'; do sleep 0.2; done
ORDERS=$("$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -tA bench -c "SELECT count(*) FROM orders")
REMAINING=$(curl -sf "http://127.0.0.1:$P1/v1/campaigns/bench" | python3 -c 'import json,sys; print(json.load(sys.stdin)["remaining"])')
echo "orders in PostgreSQL: $ORDERS; units sold per the gate: $((1000000000 - REMAINING))"
[ "$ORDERS" -eq $((1000000000 - REMAINING)) ] || { echo "MISMATCH"; exit 1; }

echo "== redis-benchmark: EVALSHA claim.lua alone (50 clients, 300000 calls, distinct users)"
SHA=$(redis-cli -p "$RPORT" SCRIPT LOAD "$(cat src/engine/scale_out/lua/claim.lua)")
redis-cli -p "$RPORT" HSET '{c:rb}:meta' id rb kind stock total 1000000000 remaining 1000000000 \
    limit 1 status active starts '' ends '' >/dev/null
redis-benchmark -p "$RPORT" -c 50 -n 300000 -r 100000000 -q \
    EVALSHA "$SHA" 5 '{c:rb}:meta' '{c:rb}:users' '{c:rb}:codes' '{c:rb}:seq' '{c:rb}:orders' \
    'user:__rand_int__' 1 86400 | tr '\r' '\n' | grep 'requests per second' | tail -1
