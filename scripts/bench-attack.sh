#!/usr/bin/env bash
# Slow bodies against the release binary (issue "One client can stop the sale"): genuine
# buyers beside an attack that keeps complete claim heads with no body open, from one address
# and from sixteen (scripts/bench/attack_slow_bodies.py). Default settings of `seckill serve`
# plus --share-loopback, because every address of this machine-local attack is a loopback one.
#
# Usage: scripts/bench-attack.sh [BIN]            (default target/release/seckill)
#        BENCH_ATTACK_FLAGS="" scripts/bench-attack.sh OLD_BIN   (a build without the shares)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-$PWD/target/release/seckill}
FLAGS=${BENCH_ATTACK_FLAGS---share-loopback}
[ -x "$BIN" ] || cargo build --release --quiet
WORK=$(mktemp -d)
TOKEN=attack-$RANDOM
PID=
cleanup() {
    if [ -n "$PID" ]; then kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"
for addresses in 1 16; do
    rm -rf "$WORK/data"
    # shellcheck disable=SC2086
    SECKILL_ADMIN_TOKEN=$TOKEN "$BIN" serve --listen 127.0.0.1:0 --data "$WORK/data" $FLAGS \
        >"$WORK/out" 2>"$WORK/log" &
    PID=$!
    URL=
    for _ in $(seq 300); do
        URL=$(grep -o 'listening on http://[0-9.:]*' "$WORK/log" | head -1 | sed 's/listening on //') || true
        [ -n "$URL" ] && break
        sleep 0.1
    done
    [ -n "$URL" ] || { cat "$WORK/log"; exit 1; }
    curl -sf -XPOST "$URL/v1/campaigns" -H "authorization: Bearer $TOKEN" \
        -H 'content-type: application/json' -d '{"id":"sale","stock":1000000}' >/dev/null
    # About 2,000 heads a second in all: past the default 4,096 places within 3 s.
    python3 scripts/bench/attack_slow_bodies.py "$URL" sale "$addresses" $((1000 / addresses))
    echo "   log lines written: $(wc -l <"$WORK/log")"
    kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=
done
