#!/usr/bin/env bash
# The cost of holds on the claim path and the expiry lateness under load (docs/HOLDS.md).
# One embedded server, three campaigns side by side: `plain` (no holds), `long`
# (hold_seconds=86400: every win stays pending, so the storm pays the claim path's share of
# holds only) and `held` (hold_seconds=1: every win also expires a second later while the storm
# goes on, the worst case). The `hot` storm runs against plain, long, held, twice, each for
# DURATION; then /metrics gives the expiries and their lateness (pay_by → units back).
# BENCH_HOLDS_DEPLOY=scale-out runs the same against one instance on a throwaway redis-server
# (no persistence) and a fresh PostgreSQL database (BENCH_POSTGRES_ADMIN, default the local
# trust-auth server), so the lateness there is the gate's deadline → units back in Redis.
#
# usage: [BENCH_HOLDS_DEPLOY=embedded|scale-out] scripts/bench-holds.sh [duration=10s] [binary=target/release/seckill]
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10s}
BIN=${2:-target/release/seckill}
[ -x "$BIN" ] || cargo build --release

DEPLOY=${BENCH_HOLDS_DEPLOY:-embedded}
WORK=$(mktemp -d /tmp/seckill-holds.XXXXXX)
SERVER=""
REDIS=""
DB=""
PG=${BENCH_POSTGRES_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
cleanup() {
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true
    [ -n "$REDIS" ] && kill "$REDIS" 2>/dev/null || true
    wait 2>/dev/null || true
    [ -n "$DB" ] && psql "$PG" -qc "DROP DATABASE $DB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

TOKEN=bench-token
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
case "$DEPLOY" in
embedded) STORE=(--data "$WORK/data") ;;
scale-out)
    command -v redis-server >/dev/null || { echo "redis-server missing: apt-get install redis-server" >&2; exit 1; }
    RPORT=$(free_port)
    redis-server --port "$RPORT" --save "" --appendonly no >"$WORK/redis.log" 2>&1 &
    REDIS=$!
    for _ in $(seq 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
    DB=seckill_holds_$RANDOM$RANDOM
    psql "$PG" -qc "CREATE DATABASE $DB" >/dev/null
    STORE=(--redis "redis://127.0.0.1:$RPORT" --postgres "${PG%/*}/$DB")
    ;;
*) echo "BENCH_HOLDS_DEPLOY is embedded or scale-out, not $DEPLOY" >&2; exit 2 ;;
esac
RUST_LOG=warn "$BIN" serve --listen "127.0.0.1:$PORT" "${STORE[@]}" --admin-token "$TOKEN" \
    >/dev/null 2>"$WORK/serve.log" &
SERVER=$!
for _ in $(seq 200); do curl -sf "$URL/healthz" >/dev/null && break; sleep 0.05; done

admin() { curl -sf -XPOST "$URL$1" -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' -d "$2"; echo; }
admin /v1/campaigns '{"id": "plain", "stock": 1000000000, "per_user_limit": 1}' >/dev/null
admin /v1/campaigns '{"id": "long", "stock": 1000000000, "per_user_limit": 1, "hold_seconds": 86400}' >/dev/null
admin /v1/campaigns '{"id": "held", "stock": 1000000000, "per_user_limit": 1, "hold_seconds": 1}' >/dev/null

echo "# holds on the claim path ($DEPLOY): hot storm of $DUR per run ($(date -u +%FT%TZ), $(nproc) cores, $BIN)"
for c in plain long held plain long held; do
    out=$("$BIN" bench --url "$URL" --admin-token "$TOKEN" --campaign "$c" --scenario hot \
        -z "$DUR" --no-verify --json)
    python3 -c 'import json,sys; r=json.loads(sys.argv[2]); t=r.get("throughput") or r;
print(sys.argv[1], json.dumps({k: v for k, v in t.items() if not isinstance(v, (dict, list))}))' "$c" "$out"
done
sleep 2
echo "# expiries (hold_seconds=1, expired during and after the storms)"
curl -sf "$URL/metrics" -H "authorization: Bearer $TOKEN" | grep '^seckill_holds_'
curl -sf "$URL/v1/campaigns/held"; echo
