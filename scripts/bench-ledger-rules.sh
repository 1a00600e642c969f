#!/usr/bin/env bash
# What PostgreSQL's ledger rules (migration 0007: the statement-level triggers on `orders` that
# keep campaigns.live_units, holdings and live_codes and refuse what the guarantees forbid)
# cost per durable win, in instructions counted by callgrind inside PostgreSQL.
#
# A throwaway PostgreSQL cluster runs under callgrind, counting inside each backend (its
# `PostgresMain`: parse, plan, execute, triggers, WAL inserts, commit); the WAL writer and the
# checkpointer are not counted. One redis-server runs natively. Phases alternate: `rules` (the
# triggers as migrated) and `none` (`ALTER TABLE orders DISABLE TRIGGER USER`). Each phase starts
# a release `seckill serve`, fires BENCH_RULES_CLAIMS claims of distinct buyers at a fresh
# campaign (every claim wins), waits until the pipeline wrote every order and stops the server:
# its backends exit and callgrind writes their counts. A phase `idle` (the same, no claims)
# gives what a server costs PostgreSQL without orders (connections, start-up reads), which is
# taken off. (Ir − idle) ÷ the orders the phase wrote = instructions per durable win inside
# PostgreSQL. The seckill side is the same either way (the pipeline sends the same statements).
#
# Usage: scripts/bench-ledger-rules.sh [BIN]      (default target/release/seckill)
#        BENCH_RULES_CLAIMS=4000 BENCH_RULES_ROUNDS=2 scripts/bench-ledger-rules.sh
#        BENCH_RULES_KEEP=DIR keeps the backends' profiles (`callgrind_annotate DIR/pg.PID`)
# needs: valgrind, redis-server, PostgreSQL binaries, curl
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-$PWD/target/release/seckill}
CLAIMS=${BENCH_RULES_CLAIMS:-4000}
ROUNDS=${BENCH_RULES_ROUNDS:-2}
for b in valgrind callgrind_control redis-server redis-cli curl; do
    command -v "$b" >/dev/null || { echo "missing $b (apt-get install valgrind redis-server curl)"; exit 1; }
done
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$PGBIN" ] || { echo "missing PostgreSQL (apt-get install postgresql)"; exit 1; }
[ -x "$BIN" ] || cargo build --release --quiet

WORK=$(mktemp -d /tmp/seckill-rules.XXXXXX)
PIDS=()
PGPID=
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ -n "$PGPID" ]; then
        kill -INT "$PGPID" 2>/dev/null || true
        while kill -0 "$PGPID" 2>/dev/null; do sleep 0.5; done
    fi
    if [ -n "${BENCH_RULES_KEEP:-}" ]; then mkdir -p "$BENCH_RULES_KEEP" && cp "$WORK"/cg/* "$BENCH_RULES_KEEP"/; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

RPORT=$(free_port); PGPORT=$(free_port)
mkdir -p "$WORK/cg"
[ "$(id -u)" -eq 0 ] && chown -R postgres "$WORK"
as_pg "$PGBIN/initdb" -U postgres -A trust -N -D "$WORK/pg" >/dev/null
# Every process of the cluster is a fork of the postmaster, so all of them run under callgrind,
# each writing its own file when it exits.
as_pg valgrind --tool=callgrind --collect-atstart=no --toggle-collect=PostgresMain \
    --callgrind-out-file="$WORK/cg/pg.%p" \
    "$PGBIN/postgres" -D "$WORK/pg" -p "$PGPORT" -k "$WORK" -c listen_addresses=127.0.0.1 \
    -c autovacuum=off >"$WORK/pg.log" 2>&1 &
until "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT"; do sleep 0.5; done
PGPID=$(head -1 "$WORK/pg/postmaster.pid")
"$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres bench
# psql SQL: one value; the backend that answered is noted, so its count is left out.
psql() {
    local out
    out=$("$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -tAq bench \
        -c "SELECT pg_backend_pid()" -c "$1")
    echo "pg.$(echo "$out" | head -1)" >>"$WORK/ours"
    echo "$out" | sed -n 2p
}
touch "$WORK/ours"

redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
until redis-cli -p "$RPORT" ping >/dev/null 2>&1; do sleep 0.1; done
TOKEN=rules-token
IDLE=0

# phase NAME CLAIMS: a server, a fresh campaign, CLAIMS wins, the pipeline drained, the server
# stopped; prints Ir per durable win (less the idle phase's Ir).
phase() {
    local name=$1 claims=$2 id=$1$RANDOM port files ir wins serve
    port=$(free_port)
    ls "$WORK/cg" | sort >"$WORK/files.before"
    RUST_LOG=warn "$BIN" serve --listen "127.0.0.1:$port" --admin-token "$TOKEN" \
        --redis "redis://127.0.0.1:$RPORT" --postgres "postgres://postgres@127.0.0.1:$PGPORT/bench" \
        >>"$WORK/serve.log" 2>&1 &
    serve=$!
    PIDS+=("$serve")
    until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; do sleep 0.2; done
    curl -sf -XPOST "http://127.0.0.1:$port/v1/campaigns" -H "authorization: Bearer $TOKEN" \
        -H 'content-type: application/json' \
        -d "{\"id\":\"$id\",\"stock\":1000000000,\"per_user_limit\":1}" >/dev/null
    if [ "$claims" -gt 0 ]; then
        "$BIN" bench --url "http://127.0.0.1:$port" --campaign "$id" -c 16 -n "$claims" \
            --users "$claims" --pick once --no-verify >"$WORK/bench-$id.txt" 2>&1
    fi
    until curl -sf "http://127.0.0.1:$port/healthz" | grep -q '"pipeline_lag":0'; do sleep 0.2; done
    wins=$(psql "SELECT count(*) FROM orders WHERE campaign_id = '$id'")
    kill -TERM "$serve"; wait "$serve" 2>/dev/null || true
    # The backends exit once their connections close; each writes its file then.
    until [ "$(psql "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")" -le 1 ]; do sleep 0.5; done
    sleep 2
    ls "$WORK/cg" | sort >"$WORK/files.after"
    files=$(comm -13 "$WORK/files.before" "$WORK/files.after" | grep -vxFf "$WORK/ours" || true)
    ir=0
    for f in $files; do
        ir=$((ir + $(awk '/^(summary|totals):/ {print $2; exit}' "$WORK/cg/$f")))
    done
    if [ "$claims" -eq 0 ]; then
        IDLE=$ir
        printf '%-6s %13d Ir over %d processes: a server without orders, taken off below\n' "$name" "$ir" "$(echo "$files" | wc -w)"
    else
        printf '%-6s %6d durable wins  %13d Ir  %8.0f instructions per durable win\n' \
            "$name" "$wins" "$ir" "$(python3 -c "print(($ir - $IDLE) / max($wins, 1))")"
    fi
}

echo "== PostgreSQL under callgrind, $CLAIMS claims per phase, $ROUNDS rounds"
phase idle 0
for _ in $(seq "$ROUNDS"); do
    psql "ALTER TABLE orders ENABLE TRIGGER USER" >/dev/null
    phase rules "$CLAIMS"
    psql "ALTER TABLE orders DISABLE TRIGGER USER" >/dev/null
    phase none "$CLAIMS"
done
