#!/usr/bin/env bash
# What event delivery costs the claim path, and how late events reach a receiver
# (docs/BENCHMARKS.md, "Event delivery"). seckill embedded under the `hot` storm (every claim
# wins, so every claim writes an `order.won` event), rows interleaved over BENCH_ROUNDS rounds,
# medians reported:
#
#   ceiling   `seckill baseline`, a trivial HTTP handler: the machine's HTTP ceiling this run
#   off       no sink
#   on        --webhook to `seckill events receive`, answering at once
#   slow      --webhook to a receiver answering each request after 200 ms
#   paced     --webhook on, the storm held to BENCH_PACED_RATE claims/s (default 5,000): a
#             server that is not saturated, as a sale's wins usually leave it
#
# For `on` and `paced` the receiver's lag from each event's transition (`at`) to its arrival, p50 / p99,
# once the backlog drained; for `slow` the backlog when the storm ended. The server runs on
# BENCH_SERVER_CPU, the generator and the receiver on BENCH_GEN_CPU.
#
# Usage: scripts/bench-events.sh           (3 rounds of 10 s, 128 connections)
#        BENCH_ROUNDS=5 BENCH_DURATION=20s scripts/bench-events.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${BENCH_DURATION:-10s}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNECTIONS:-128}
SERVER_CPU=${BENCH_SERVER_CPU:-1}
GEN_CPU=${BENCH_GEN_CPU:-0}
PACED_RATE=${BENCH_PACED_RATE:-5000}
TOKEN=bench-$RANDOM$RANDOM
SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw

for b in taskset curl python3; do
    command -v "$b" >/dev/null || { echo "missing $b (apt-get install util-linux curl python3)"; exit 1; }
done
cargo build --release --quiet
BIN=$PWD/target/release/seckill
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# start NAME CPU CMD...: runs CMD on CPU, waits for its "listening on" / "receiving webhooks
# on" line, sets URL and PID.
start() {
    local name=$1 cpu=$2; shift 2
    taskset -c "$cpu" "$@" >"$WORK/$name.out" 2>"$WORK/$name.log" &
    PID=$!
    PIDS+=("$PID")
    for _ in $(seq 200); do
        URL=$(grep -oE '(listening on|receiving webhooks on) http://[0-9.:]*' "$WORK/$name.log" \
            | head -1 | grep -o 'http://.*') || true
        [ -n "$URL" ] && return 0
        sleep 0.05
    done
    echo "$name did not start:"; cat "$WORK/$name.log"; exit 1
}
stop() { kill -INT "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

storm() {
    local row=$1 url=$2 rate=()
    [ "$row" = paced ] && rate=(--rate "$PACED_RATE")
    taskset -c "$GEN_CPU" "$BIN" bench --url "$url" --admin-token "$TOKEN" --scenario hot \
        --server-pid "$SPID" "${rate[@]}" \
        --duration "$DURATION" --connections "$CONNS" --threads 1 --json --progress never \
        --no-verify >"$WORK/$row.r$ROUND.json" 2>"$WORK/$row.r$ROUND.err"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(f\"   $row: {r['claims_per_second']:.0f} claims/s, p99 {r['latency_ms']['p99']:.2f} ms, server CPU {r.get('server_cpu_us_per_claim')} us/claim\")" \
        "$WORK/$row.r$ROUND.json"
}

backlog() {
    curl -sf -H "authorization: Bearer $TOKEN" "$1/v1/webhooks" \
        | python3 -c "import json,sys; print(sum(e['backlog'] for e in json.load(sys.stdin)['endpoints']))"
}

for ROUND in $(seq "$ROUNDS"); do
    echo "== round $ROUND"
    start ceiling "$SERVER_CPU" "$BIN" baseline --listen 127.0.0.1:0
    taskset -c "$GEN_CPU" "$BIN" bench --url "$URL" --campaign ceiling --scenario hot \
        --duration "$DURATION" --connections "$CONNS" --threads 1 --json --progress never \
        --no-verify --admin-token x >"$WORK/ceiling.r$ROUND.json"
    stop "$PID"
    for row in off on slow paced; do
        sinks=()
        if [ "$row" != off ]; then
            delay=0; [ "$row" = slow ] && delay=200
            start "recv-$row" "$GEN_CPU" "$BIN" events receive --listen 127.0.0.1:0 \
                --secret "$SECRET" --delay-ms "$delay" --report-every 1h
            RPID=$PID
            sinks=(--webhook "$URL/hooks" --webhook-secret "$SECRET")
        fi
        start "$row" "$SERVER_CPU" "$BIN" serve --listen 127.0.0.1:0 --data "$WORK/data-$row-$ROUND" \
            --admin-token "$TOKEN" "${sinks[@]}"
        SPID=$PID SURL=$URL
        storm "$row" "$SURL"
        if [ "$row" = on ] || [ "$row" = paced ]; then
            for _ in $(seq 600); do [ "$(backlog "$SURL")" = 0 ] && break; sleep 0.1; done
        fi
        [ "$row" = slow ] && backlog "$SURL" >"$WORK/slow.r$ROUND.backlog"
        stop "$SPID"
        if [ "$row" != off ]; then
            stop "$RPID"
            grep -o 'summary=.*' "$WORK/recv-$row.log" | tail -1 | sed 's/^summary=//' \
                >"$WORK/$row.r$ROUND.recv"
        fi
    done
done

PACED_RATE=$PACED_RATE python3 - "$WORK" "$ROUNDS" <<'EOF'
import json, os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def med(xs):
    return statistics.median(xs) if xs else float("nan")
def cps(row):
    return [json.load(open(f"{work}/{row}.r{r}.json"))["claims_per_second"] for r in range(1, rounds + 1)]
ceiling, off, on, slow, paced = (med(cps(r)) for r in ("ceiling", "off", "on", "slow", "paced"))
recv = [json.loads(open(f"{work}/on.r{r}.recv").read()) for r in range(1, rounds + 1)]
recv_paced = [json.loads(open(f"{work}/paced.r{r}.recv").read()) for r in range(1, rounds + 1)]
backlog = [int(open(f"{work}/slow.r{r}.backlog").read()) for r in range(1, rounds + 1)]
def cpu(row):
    xs = [json.load(open(f"{work}/{row}.r{r}.json")).get("server_cpu_us_per_claim") for r in range(1, rounds + 1)]
    xs = [x for x in xs if x is not None]
    return f"{med(xs):.1f}" if xs else "–"
print(f"| row | claims/s (median of {rounds}) | vs ceiling | vs off | server CPU µs/claim |")
print("|---|---:|---:|---:|---:|")
for row, name, v in (("ceiling", "HTTP ceiling (`seckill baseline`)", ceiling), ("off", "delivery off", off),
                     ("on", "webhook on", on), ("slow", "webhook to a 200 ms receiver", slow),
                     ("paced", f"webhook on, storm held to {os.environ.get('PACED_RATE')} claims/s", paced)):
    print(f"| {name} | {v:,.0f} | {v / ceiling:.2f} | {v / off:.2f} | {cpu(row) if row != 'ceiling' else '–'} |")
print()
def lags(xs):
    return "; ".join(
        f"p50 {x['lag_ms']['p50']:.1f} ms, p99 {x['lag_ms']['p99']:.1f} ms, max {x['lag_ms']['max']:.0f} ms, "
        f"{x['received']:,} received ({x['repeats']} repeats, {x['refused_signatures']} refused)"
        for x in xs)
print("Lag from transition to receiver, webhook on, per round: " + lags(recv))
print("Lag from transition to receiver, paced, per round: " + lags(recv_paced))
print(f"Backlog of the 200 ms receiver when the storm ended, per round: {backlog}")
EOF
