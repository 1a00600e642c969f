#!/usr/bin/env bash
# What `--redis-wait-replicas` costs: one seckill instance behind Redis Sentinel (a primary and
# one replica, both with AOF `appendfsync always`, one sentinel), stormed with the `hot` preset
# (every claim wins) and then the `soldout` preset (every claim refused), once with the wait
# off (`--redis-wait-replicas 0`) and once on (`1`, the default behind Sentinel). Prints
# claims/s and p99 of each row.
#
# usage: scripts/bench-wait-replicas.sh [duration=10s] [connections=64]
# needs: redis-server, psql, PostgreSQL on BENCH_POSTGRES_ADMIN (default
#        postgres://postgres@127.0.0.1:5432/postgres); BENCH_BIN (default target/release/seckill,
#        built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10s}
CONNS=${2:-64}
PG=${BENCH_POSTGRES_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
BIN=${BENCH_BIN:-target/release/seckill}
[ -x "$BIN" ] || cargo build --release
for b in redis-server redis-cli psql; do
    command -v "$b" >/dev/null || { echo "missing $b (apt-get install redis-server redis-tools postgresql-client)"; exit 1; }
done

WORK=$(mktemp -d /tmp/seckill-wait-replicas.XXXXXX)
PIDS=()
DB=seckill_wait_$RANDOM$RANDOM
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    psql "$PG" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
    [ -n "${BENCH_KEEP:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

P=$(free_port); R=$(free_port); S=$(free_port)
for port in "$P" "$R"; do
    mkdir -p "$WORK/$port"
    extra=()
    [ "$port" = "$R" ] && extra=(--replicaof 127.0.0.1 "$P")
    redis-server --port "$port" --bind 127.0.0.1 --dir "$WORK/$port" --save "" \
        --appendonly yes --appendfsync always --maxmemory-policy noeviction \
        --repl-diskless-sync-delay 0 "${extra[@]}" >"$WORK/redis-$port.log" 2>&1 &
    PIDS+=($!)
done
printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor m 127.0.0.1 %s 1\n' "$S" "$WORK" "$P" >"$WORK/sentinel.conf"
redis-server "$WORK/sentinel.conf" --sentinel >"$WORK/sentinel.log" 2>&1 &
PIDS+=($!)
until redis-cli -p "$R" info replication 2>/dev/null | grep -q master_link_status:up; do sleep 0.2; done
psql "$PG" -qc "CREATE DATABASE $DB" >/dev/null
PGURL="${PG%/*}/$DB"

echo "| --redis-wait-replicas | preset | claims/s | p99 ms | won | 503 |"
echo "| --- | --- | --- | --- | --- | --- |"
for wait in 0 1; do
    L=$(free_port)
    "$BIN" serve --listen "127.0.0.1:$L" --admin-token bench --redis "redis://127.0.0.1:$S" \
        --redis-sentinel m --postgres "$PGURL" --redis-wait-replicas "$wait" \
        >"$WORK/serve-$wait.log" 2>&1 &
    SERVE=$!
    PIDS+=($SERVE)
    until curl -fs "http://127.0.0.1:$L/healthz" >/dev/null 2>&1; do sleep 0.2; done
    for preset in hot soldout; do
        out=$("$BIN" bench --url "http://127.0.0.1:$L" --admin-token bench --scenario "$preset" \
            -z "$DUR" -c "$CONNS" --no-verify --json 2>/dev/null)
        OUT="$out" WAIT="$wait" PRESET="$preset" python3 - <<'PY'
import json, os
r = json.loads(os.environ["OUT"])
n503 = r.get("non_2xx", {}).get("503", 0)
won = r["outcomes"].get("won", 0)
cps = r["claims_per_second"]
p99 = r["latency_ms"]["p99"]
print(f"| {os.environ['WAIT']} | {os.environ['PRESET']} | {cps:.0f} | {p99:.1f} | {won} | {n503} |")
PY
    done
    kill "$SERVE"; wait "$SERVE" 2>/dev/null || true
    # Why any claim was not answered: the server's warnings and errors, most frequent first.
    if grep -qE " (WARN|ERROR) " "$WORK/serve-$wait.log"; then
        echo "  --redis-wait-replicas $wait, server warnings and errors (count, line without its time):"
        grep -E " (WARN|ERROR) " "$WORK/serve-$wait.log" | sed -E 's/^[^ ]+ +//' | cut -c1-200 \
            | sort | uniq -c | sort -rn | head -8 | sed 's/^/  /'
    fi
done
