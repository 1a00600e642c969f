#!/usr/bin/env bash
# The waiting room under a crowd (docs/WAITING_ROOM.md, "The opening bench"): `seckill bench
# --scenario opening` with BENCH_USERS users (default 100,000) joining a room: 70% during a
# BENCH_PREQUEUE pre-queue (default 20s), the rest as long again after `starts_at`; every user
# polls with backoff and claims with its ticket once admitted, every tenth also tries the door
# without a valid ticket. Prints join, status and claim latency, the room's pace and fairness
# figures, and the verifier's result (the bench exits 2 on a violation).
#
# usage: scripts/bench-room.sh                     (embedded, one server)
#        BENCH_DEPLOY=scale-out scripts/bench-room.sh   (two instances, a fresh redis-server
#                                                   with AOF everysec, a throwaway PostgreSQL)
#        BENCH_DEPLOY=scale-out BENCH_REPLICA=1 scripts/bench-room.sh   (the same with a replica
#                                                   redis-server and --redis-wait-replicas 1:
#                                                   every join waits for the replica)
# knobs: BENCH_USERS, BENCH_RATE (admissions/s, default 5000), BENCH_PREQUEUE, BENCH_CONNECTIONS
#        (requests in flight, default 256)
# needs: curl, python3; scale-out also redis-server, redis-cli and PostgreSQL's binaries
set -euo pipefail
cd "$(dirname "$0")/.."
DEPLOY=${BENCH_DEPLOY:-embedded}
USERS=${BENCH_USERS:-100000}
RATE=${BENCH_RATE:-5000}
PRE=${BENCH_PREQUEUE:-20s}
CONNS=${BENCH_CONNECTIONS:-256}
for b in curl python3; do
    command -v "$b" >/dev/null || { echo "missing $b (apt-get install curl python3)"; exit 1; }
done
cargo build --release --quiet
BIN=$PWD/target/release/seckill
WORK=$(mktemp -d /tmp/seckill-room.XXXXXX)
PIDS=()
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -f "$WORK/pg/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

TOKEN=bench-$RANDOM$RANDOM
URLS=()
serve() { # serve PORT ARGS...
    local port=$1; shift
    RUST_LOG=warn "$BIN" serve --listen "127.0.0.1:$port" --admin-token "$TOKEN" "$@" \
        >"$WORK/serve-$port.log" 2>&1 &
    PIDS+=($!)
    URLS+=("http://127.0.0.1:$port")
}
if [ "$DEPLOY" = embedded ]; then
    serve "$(free_port)" --data "$WORK/data"
else
    for b in redis-server redis-cli; do
        command -v "$b" >/dev/null || { echo "missing $b (apt-get install redis-server)"; exit 1; }
    done
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -n "$PGBIN" ] || { echo "missing PostgreSQL (apt-get install postgresql)"; exit 1; }
    RPORT=$(free_port); PGPORT=$(free_port)
    redis-server --port "$RPORT" --bind 127.0.0.1 --dir "$WORK" --save '' \
        --appendonly yes --appendfsync everysec --maxmemory-policy noeviction >"$WORK/redis.log" &
    PIDS+=($!)
    [ "$(id -u)" -eq 0 ] && chown postgres "$WORK"
    as_pg "$PGBIN/initdb" -U postgres -A trust -N -D "$WORK/pg" >/dev/null
    as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg.log" -o "-p $PGPORT -k $WORK -c listen_addresses=127.0.0.1" -w start >/dev/null
    as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres bench
    until redis-cli -p "$RPORT" ping >/dev/null 2>&1; do sleep 0.1; done
    WAIT_ARGS=()
    if [ "${BENCH_REPLICA:-0}" = 1 ]; then
        REPPORT=$(free_port)
        mkdir -p "$WORK/replica"
        redis-server --port "$REPPORT" --bind 127.0.0.1 --dir "$WORK/replica" --save '' \
            --replicaof 127.0.0.1 "$RPORT" >"$WORK/replica.log" &
        PIDS+=($!)
        until redis-cli -p "$RPORT" info replication | grep -q 'state=online'; do sleep 0.1; done
        WAIT_ARGS=(--redis-wait-replicas 1)
    fi
    for _ in 1 2; do
        serve "$(free_port)" --redis "redis://127.0.0.1:$RPORT" \
            --postgres "postgres://postgres@127.0.0.1:$PGPORT/bench" "${WAIT_ARGS[@]}"
    done
fi
for u in "${URLS[@]}"; do
    for _ in $(seq 600); do curl -sf "$u/healthz" >/dev/null && break; sleep 0.1; done
done
LIST=$(IFS=,; echo "${URLS[*]}")
echo "== opening on $DEPLOY (${#URLS[@]} instance(s)): $USERS users, $RATE admitted/s, pre-queue $PRE, $CONNS in flight (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
set +e
"$BIN" bench --scenario opening --url "$LIST" --admin-token "$TOKEN" --users "$USERS" \
    --admit-per-second "$RATE" --prequeue "$PRE" -c "$CONNS" --drain-timeout 120s --json \
    >"$WORK/report.json"
RC=$?
set -e
python3 - "$WORK/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def lat(name):
    l = r[name]
    return f"p50 {l['p50']:.1f}  p90 {l['p90']:.1f}  p99 {l['p99']:.1f}  max {l['max']:.1f} ms"
room = r["room"]
print(f"joins        {r['joins']:>8}  {lat('join_ms')}")
print(f"status reads {r['status_reads']:>8}  {lat('status_ms')}")
print(f"claims       {r['claims']:>8}  {lat('claim_ms')}")
print(f"outcomes {r['outcomes']}, not 200 {r['non_200']}, transport errors {r['transport_errors']}, gave up {r['gave_up']}")
print(f"pre-queue {room['prequeue_users']} (admitted {room['admitted_prequeue']}), later {room['later_users']} (admitted {room['admitted_later']}), sent before the start but placed at once {room['straddling_start']}, read sold_out {room['sold_out_in_room']}")
print(f"rank correlation with join order: pre-queue {room['prequeue_rank_correlation']}, later joiners {room['later_rank_correlation']}")
print(f"most admitted in one second {room['max_admitted_in_one_second']} (rate {r['params']['admit_per_second']}), first admission {room['first_admission_ms']} ms after the start")
print(f"door: {room['cheat_claims']} claims without a valid ticket, {room['cheat_claims_refused_not_admitted']} refused 403 not_admitted")
v = r.get("verification") or {}
print(f"ledger: {v.get('orders')} orders, remaining {v.get('remaining')}, violations {len(v.get('violations', []))}")
for x in v.get("violations", [])[:10]:
    print("  ", x["invariant"], x["message"])
PY
exit $RC
