#!/usr/bin/env bash
# The cost of holds on the claim path and the expiry lateness under load (docs/HOLDS.md).
# One embedded server, three campaigns side by side: `plain` (no holds), `long`
# (hold_seconds=86400: every win stays pending, so the storm pays the claim path's share of
# holds only) and `held` (hold_seconds=1: every win also expires a second later while the storm
# goes on, the worst case). The `hot` storm runs against plain, long, held, twice, each for
# DURATION; then /metrics gives the expiries and their lateness (pay_by → units back).
#
# usage: scripts/bench-holds.sh [duration=10s] [binary=target/release/seckill]
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10s}
BIN=${2:-target/release/seckill}
[ -x "$BIN" ] || cargo build --release

WORK=$(mktemp -d /tmp/seckill-holds.XXXXXX)
SERVER=""
cleanup() {
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

TOKEN=bench-token
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
RUST_LOG=warn "$BIN" serve --listen "127.0.0.1:$PORT" --data "$WORK/data" --admin-token "$TOKEN" \
    >/dev/null 2>"$WORK/serve.log" &
SERVER=$!
for _ in $(seq 200); do curl -sf "$URL/healthz" >/dev/null && break; sleep 0.05; done

admin() { curl -sf -XPOST "$URL$1" -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' -d "$2"; echo; }
admin /v1/campaigns '{"id": "plain", "stock": 1000000000, "per_user_limit": 1}' >/dev/null
admin /v1/campaigns '{"id": "long", "stock": 1000000000, "per_user_limit": 1, "hold_seconds": 86400}' >/dev/null
admin /v1/campaigns '{"id": "held", "stock": 1000000000, "per_user_limit": 1, "hold_seconds": 1}' >/dev/null

echo "# holds on the claim path: hot storm of $DUR per run ($(date -u +%FT%TZ), $(nproc) cores, $BIN)"
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
