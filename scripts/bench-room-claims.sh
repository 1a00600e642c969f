#!/usr/bin/env bash
# What a waiting room costs the claim path, end to end (docs/BENCHMARKS.md, "What a waiting
# room adds to a claim"): wrk storms one embedded release server with claims of campaigns with
# and without a room, the room's claims each carrying a valid X-Seckill-Ticket, beside the
# trivial HTTP handler of `seckill baseline` as the ceiling, in alternating rounds so drift hits
# every row alike. Two kinds of campaign:
#   gone: one unit, sold out by the first claim: every later claim is refused from memory, the
#         cheapest claim there is, so the ticket check weighs most here;
#   hot:  a billion units and a per-user limit of a million: every claim wins and is written.
# Requests are the same on both sides: 20,000 users joined to each room beforehand
# (scripts/bench/join_room.py), claimed in turn, every claim with its user's ticket (a campaign
# without a room never reads it). Each row reports the server's CPU per claim (from /proc) as
# well as claims/s, since one wrk thread may be the limit of the cheapest rows.
#
# usage: scripts/bench-room-claims.sh      knobs: BENCH_DURATION (5s), BENCH_ROUNDS (3),
#        BENCH_CONNECTIONS (64), BENCH_USERS (20000), BENCH_SERVER_CPU (1), BENCH_GEN_CPU (0)
# needs: wrk, curl, python3, taskset (the script installs wrk if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${BENCH_DURATION:-5s}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNECTIONS:-64}
USERS=${BENCH_USERS:-20000}
SERVER_CPU=${BENCH_SERVER_CPU:-1}
GEN_CPU=${BENCH_GEN_CPU:-0}
TOKEN=bench-$RANDOM$RANDOM
if ! command -v wrk >/dev/null; then
    echo "installing wrk"
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >/dev/null
fi
for b in curl python3 taskset; do
    command -v "$b" >/dev/null || { echo "missing $b"; exit 1; }
done
cargo build --release --quiet
BIN=$PWD/target/release/seckill
WORK=$(mktemp -d /tmp/seckill-room-claims.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# start NAME CMD...: runs CMD pinned to the server core, waits for its "listening on" line.
start() {
    local name=$1; shift
    taskset -c "$SERVER_CPU" "$@" >"$WORK/$name.out" 2>"$WORK/$name.log" &
    PIDS+=($!)
    for _ in $(seq 200); do
        URL=$(grep -o 'listening on http://[0-9.:]*' "$WORK/$name.log" | head -1 | sed 's/listening on //') || true
        [ -n "$URL" ] && return 0
        sleep 0.05
    done
    echo "$name did not start:"; cat "$WORK/$name.log"; exit 1
}
create() { # create JSON
    curl -sf -XPOST "$URL/v1/campaigns" -H "authorization: Bearer $TOKEN" \
        -H 'content-type: application/json' -d "$1" >/dev/null
}

start baseline "$BIN" baseline --listen 127.0.0.1:0
BASE_URL=$URL
start serve "$BIN" serve --listen 127.0.0.1:0 --data "$WORK/data" --admin-token "$TOKEN"
ROOM='"waiting_room":{"admit_per_second":100000,"ticket_seconds":86400,"shuffle":false}'
create '{"id":"gone","stock":1,"per_user_limit":1}'
create "{\"id\":\"gone-room\",\"stock\":1,\"per_user_limit\":1,$ROOM}"
create '{"id":"hot","stock":1000000000,"per_user_limit":1000000}'
create "{\"id\":\"hot-room\",\"stock\":1000000000,\"per_user_limit\":1000000,$ROOM}"
echo "joining $USERS users to each room"
python3 scripts/bench/join_room.py "$URL" gone-room "$USERS" u >"$WORK/gone-room.tickets"
python3 scripts/bench/join_room.py "$URL" hot-room "$USERS" u >"$WORK/hot-room.tickets"
SERVER=$(pgrep -f "serve --listen 127.0.0.1:0 --data $WORK/data" | head -1)

# CPU seconds (user + system) the seckill server has used so far.
server_cpu() {
    python3 -c "print($(awk '{print $14 + $15}' "/proc/$SERVER/stat") / $(getconf CLK_TCK))"
}
# row NAME URL LUA ARGS...: one wrk run; its claims/s go to $WORK/NAME.rps, the server's CPU
# µs per claim to $WORK/NAME.cpu. Any answer but 200 fails the run.
row() {
    local name=$1 url=$2 lua=$3; shift 3
    local before after rps p99 non2xx n us
    before=$(server_cpu)
    taskset -c "$GEN_CPU" wrk -t1 -c"$CONNS" -d"$DURATION" --latency -s "$lua" "$url" -- "$@" \
        >"$WORK/$name.wrk"
    after=$(server_cpu)
    rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/$name.wrk")
    p99=$(awk '$1 == "99%" {print $2}' "$WORK/$name.wrk")
    non2xx=$(awk '/Non-2xx/ {print $NF}' "$WORK/$name.wrk")
    n=$(awk '/requests in/ {print $1}' "$WORK/$name.wrk")
    us=-
    if [ "$name" != baseline ]; then
        us=$(python3 -c "print(f'{($after - $before) * 1e6 / $n:.2f}')")
        echo "$us" >>"$WORK/$name.cpu"
    fi
    echo "$rps" >>"$WORK/$name.rps"
    printf '   %-10s %10s claims/s  p99 %-8s  server CPU %6s us/claim\n' "$name" "$rps" "$p99" "$us"
    [ -z "$non2xx" ] || { echo "$name: $non2xx answers other than 200"; exit 1; }
}
# Both sides send the same requests: the rows without a room carry the same tickets, which a
# campaign without a room never reads.
gone() { row gone "$URL/v1/campaigns/gone/claims" scripts/bench/wrk-tickets.lua "$WORK/gone-room.tickets"; }
gone_room() { row gone-room "$URL/v1/campaigns/gone-room/claims" scripts/bench/wrk-tickets.lua "$WORK/gone-room.tickets"; }
hot() { row hot "$URL/v1/campaigns/hot/claims" scripts/bench/wrk-tickets.lua "$WORK/hot-room.tickets"; }
hot_room() { row hot-room "$URL/v1/campaigns/hot-room/claims" scripts/bench/wrk-tickets.lua "$WORK/hot-room.tickets"; }
for r in $(seq "$ROUNDS"); do
    echo "== round $r: wrk -t1 -c$CONNS -d$DURATION"
    row baseline "$BASE_URL/v1/campaigns/ceiling/claims" scripts/bench/wrk-claims.lua "$r"
    # Each pair in the other order every other round, so drift and the ledger's growth fall
    # on both sides alike.
    if [ $((r % 2)) = 1 ]; then gone; gone_room; hot; hot_room
    else gone_room; gone; hot_room; hot; fi
done
python3 - "$WORK" <<'PY'
import statistics, sys
w = sys.argv[1]
rows = ["baseline", "gone", "gone-room", "hot", "hot-room"]
rps = {n: [float(x) for x in open(f"{w}/{n}.rps")] for n in rows}
cpu = {n: [float(x) for x in open(f"{w}/{n}.cpu")] for n in rows[1:]}
med = {n: statistics.median(v) for n, v in rps.items()}
print("medians (claims/s):", ", ".join(f"{k} {v:,.0f} ({min(rps[k]):,.0f}-{max(rps[k]):,.0f})"
                                       for k, v in med.items()))
print("server CPU per claim (us, medians):",
      ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in cpu.items()))
for k in ["gone", "hot"]:
    c, cr = statistics.median(cpu[k]), statistics.median(cpu[k + "-room"])
    print(f"  {k}: with a room {med[k + '-room'] / med[k]:.3f}x the claims/s without, "
          f"{cr - c:+.2f} us of server CPU per claim; without {med[k] / med['baseline']:.3f}x "
          f"the trivial handler, with {med[k + '-room'] / med['baseline']:.3f}x")
PY
# Every claim of a room's campaign carried a valid ticket: none may have been refused 403 (wrk
# counts them among the non-2xx answers above, the server in its refusal counter).
refused=$(curl -s "$URL/metrics" | awk '$1 ~ /^seckill_room_tickets_refused_total/ {s+=$2} END {print s+0}')
echo "claims refused for their ticket: $refused"
[ "$refused" = 0 ] || { echo "a valid ticket was refused"; exit 1; }
