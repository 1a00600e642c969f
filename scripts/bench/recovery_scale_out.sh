#!/usr/bin/env bash
# Scale-out mode of scripts/bench-recovery.sh (RECOVERY_MODE=scale-out): the restart of a
# `seckill serve` whose Redis lost everything, with history in its PostgreSQL ledger.
#
# The ledger is written directly in PostgreSQL (on the schema `seckill serve` itself migrated):
# SO_CLOSED closed stock campaigns of SO_BUYERS buyers each (one unit per buyer) and one live
# campaign of SO_LIVE buyers with as many units still unsold. For each of RECOVERY_RUNS runs
# Redis is flushed (FLUSHALL) while no server runs, then the release build is started and the
# script measures, from exec: the first 200 of GET /healthz and the first `won` of a claim by a
# new buyer on the live campaign; then, for 3 s, one claim at a time on the live campaign (the
# slowest answer: an install script rebuilding a closed campaign would block Redis meanwhile),
# the longest command Redis ran (SLOWLOG) and how many closed campaigns are in Redis (an older
# build rebuilds them all; now none is, until a change needs one). Each run checks that a buyer
# of the live campaign hears `already_claimed`, a claim on a closed one `closed`, and a closed
# campaign's view (total, remaining 0, closed).
#
# Usage: RECOVERY_MODE=scale-out scripts/bench-recovery.sh
#        SO_CLOSED=5 SO_BUYERS=200000 SO_LIVE=10000 RECOVERY_RUNS=3 BENCH_BIN=/path/to/seckill ...
# needs: redis-server, redis-cli, PostgreSQL binaries (initdb, pg_ctl, createdb, psql).
set -euo pipefail
cd "$(dirname "$0")/../.."

CLOSED=${SO_CLOSED:-5}
BUYERS=${SO_BUYERS:-200000}
LIVE=${SO_LIVE:-10000}
RUNS=${RECOVERY_RUNS:-3}
CPU=${BENCH_SERVER_CPU:-1}
TOKEN=bench-$RANDOM$RANDOM
if [ -z "${BENCH_BIN:-}" ]; then cargo build --release --quiet; fi
BIN=${BENCH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/seckill}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$PGBIN" ] || { echo "missing PostgreSQL (apt-get install postgresql)"; exit 1; }

WORK=$(mktemp -d /tmp/seckill-recovery.XXXXXX)
PIDS=()
PID=
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
    if [ -n "$PID" ]; then kill -9 "$PID" 2>/dev/null || true; fi
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -f "$WORK/pg/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }
since() { python3 -c "print(f'{($(now_ns) - $1) / 1e9:.2f}')"; }

RPORT=$(free_port); PGPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --dir "$WORK" --save '' --appendonly no \
    --maxmemory-policy noeviction >"$WORK/redis.log" &
PIDS+=($!)
[ "$(id -u)" -eq 0 ] && chown postgres "$WORK"
as_pg "$PGBIN/initdb" -U postgres -A trust -N -D "$WORK/pg" >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg.log" -o "-p $PGPORT -k $WORK -c listen_addresses=127.0.0.1" -w start >/dev/null
as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres bench
until redis-cli -p "$RPORT" ping >/dev/null 2>&1; do sleep 0.1; done
PG=postgres://postgres@127.0.0.1:$PGPORT/bench
psql_() { "$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -q -tA bench "$@"; }

# start: starts the server (Redis empty) and waits for /healthz; sets PID, URL, T0, HEALTHY.
start() {
    local log=$WORK/serve.log url=
    rm -f "$log"
    T0=$(now_ns)
    RUST_LOG=${RUST_LOG:-info} taskset -c "$CPU" "$BIN" serve --listen 127.0.0.1:0 --admin-token "$TOKEN" \
        --redis "redis://127.0.0.1:$RPORT" --postgres "$PG" >"$log" 2>&1 &
    PID=$!
    while :; do
        [ -n "$url" ] || url=$(grep -so 'listening on http://[0-9.:]*' "$log" | head -1 | sed 's/listening on //') || true
        if [ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/healthz")" = 200 ]; then break; fi
        kill -0 "$PID" 2>/dev/null || { echo "server died:"; tail -20 "$log"; exit 1; }
        sleep 0.01
    done
    HEALTHY=$(since "$T0")
    URL=$url
}
claim() {
    curl -s -XPOST "$URL/v1/campaigns/$1/claims" -H 'content-type: application/json' \
        -d "{\"user_id\": \"$2\"}" | grep -o '"outcome": *"[a-z_]*"' | cut -d'"' -f4
}

start
kill -INT "$PID"; wait "$PID" 2>/dev/null || true; PID=
t=$(now_ns)
NOW_US=$(($(date +%s) * 1000000))
for c in $(seq "$CLOSED"); do
    psql_ -c "INSERT INTO campaigns (id, kind, total, per_user_limit, status, created_at) VALUES ('old$c', 'stock', $BUYERS, 1, 'closed', $NOW_US + $c)"
    psql_ -c "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, state, created_at) SELECT 'old$c-' || s, 'old$c', s, 'u' || s, 1, 'active', $NOW_US FROM generate_series(1, $BUYERS) s"
done
psql_ -c "INSERT INTO campaigns (id, kind, total, per_user_limit, status, created_at) VALUES ('live', 'stock', $((2 * LIVE)), 1, 'active', $NOW_US + 100)"
psql_ -c "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, state, created_at) SELECT 'live-' || s, 'live', s, 'u' || s, 1, 'active', $NOW_US FROM generate_series(1, $LIVE) s"
psql_ -c "VACUUM ANALYZE"
echo "ledger: $CLOSED closed campaigns x $BUYERS buyers + 1 live of $LIVE buyers, written in $(since "$t")s"

for run in $(seq "$RUNS"); do
    redis-cli -p "$RPORT" FLUSHALL >/dev/null
    redis-cli -p "$RPORT" SLOWLOG RESET >/dev/null
    start
    n=0
    until [ "$(claim live "new$run-$n")" = won ]; do n=$((n + 1)); sleep 0.005; done
    FIRST=$(since "$T0")
    [ "$(claim live u1)" = already_claimed ] || { echo "u1 should hear already_claimed"; exit 1; }
    [ "$(claim old1 newcomer)" = closed ] || { echo "a claim on old1 should hear closed"; exit 1; }
    view=$(curl -s "$URL/v1/campaigns/old1" | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["total"], v["remaining"], v["status"])')
    [ "$view" = "$BUYERS 0 closed" ] || { echo "old1 reads '$view'"; exit 1; }
    # For 3 s, one claim at a time on the live campaign: the slowest answer.
    SLOWEST=0 n=0 end=$(($(now_ns) + 3000000000))
    while [ "$(now_ns)" -lt "$end" ]; do
        n=$((n + 1))
        took=$(curl -s -o /dev/null -w '%{time_total}' -XPOST "$URL/v1/campaigns/live/claims" \
            -H 'content-type: application/json' -d "{\"user_id\": \"slow$run-$n\"}")
        SLOWEST=$(awk -v a="$SLOWEST" -v b="$took" 'BEGIN {print (b > a ? b : a)}')
    done
    # The longest single command Redis ran since the flush (an install script blocks it).
    BLOCKED=$(redis-cli -p "$RPORT" --no-raw SLOWLOG GET 1000 |
        awk '/^ *3\) \(integer\)/ {if ($3 > m) m = $3} END {printf "%.0f", m / 1000}')
    IN=0
    for c in $(seq "$CLOSED"); do
        [ "$(redis-cli -p "$RPORT" EXISTS "{c:old$c}:meta")" = 1 ] && IN=$((IN + 1))
    done
    echo "run $run: /healthz 200 after ${HEALTHY}s, first won claim after ${FIRST}s; next 3 s: $n claims, slowest ${SLOWEST}s; longest Redis command ${BLOCKED} ms; closed campaigns in Redis: $IN of $CLOSED"
    kill -INT "$PID"; wait "$PID" 2>/dev/null || true; PID=
done
