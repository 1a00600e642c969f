#!/usr/bin/env bash
# redis-server's instructions per claim of `claims.lua`, counted by valgrind's callgrind: the
# scale-out gate's cost that no other process on the machine can disturb (redis-server CPU per
# won claim of scripts/bench-redis-cpu.sh moves with the machine's load; this count does not).
#
# For each batch size a throwaway redis-server runs under callgrind with one campaign of 10^9
# units; redis-benchmark (10 clients) calls the script with that many claims of distinct users
# per call (as the engine's batcher sends them), after a warm-up the counters are zeroed, and
# redis-server's instructions ÷ the claims decided = instructions per claim. Everything the call
# costs inside redis-server is counted: reading and parsing the request, the Lua work, the
# commands the script runs, the reply; the kernel's share (socket reads and writes) is not.
#
# The last row is the same count for seed 002's script (bench/peers/node-lua/seed002.lua: four
# commands, one claim per call, redis-benchmark -c 10), the baseline of issue 10's Redis row.
#
# usage: scripts/bench-claims-lua.sh [SCRIPT=src/engine/scale_out/lua/claims.lua]
#        BATCHES="1 23 128" CLAIMS=40000 scripts/bench-claims-lua.sh
# Compare two versions of the script in the same run:
#        git show HEAD~1:src/engine/scale_out/lua/claims.lua >/tmp/old.lua
#        scripts/bench-claims-lua.sh /tmp/old.lua; scripts/bench-claims-lua.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPT=${1:-src/engine/scale_out/lua/claims.lua}
BATCHES=${BATCHES:-"23 128"}
CLAIMS=${CLAIMS:-40000}
for b in valgrind callgrind_control redis-server redis-cli redis-benchmark python3; do
    command -v "$b" >/dev/null || { echo "missing $b (apt-get install valgrind redis-server redis-tools python3)"; exit 1; }
done
WORK=$(mktemp -d /tmp/seckill-claims-lua.XXXXXX)
PID=
cleanup() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# start ROW: a throwaway redis-server under callgrind, on PORT, its pid in PID.
start() {
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    valgrind --tool=callgrind --callgrind-out-file="$WORK/$1.%p.out" \
        redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/$1.log" 2>&1 &
    PID=$!
    until redis-cli -p "$PORT" ping >/dev/null 2>&1; do sleep 0.1; done
}
# measure ROW CALLS CLAIMS_PER_CALL CMD...: warm-up, zero, CALLS calls, dump; prints the count.
measure() {
    local row=$1 n=$2 per=$3 ir; shift 3
    redis-benchmark -p "$PORT" -c 10 -n 200 -r 1000000000 --csv "$@" >/dev/null
    callgrind_control -z "$PID" >/dev/null
    redis-benchmark -p "$PORT" -c 10 -n "$n" -r 1000000000 --csv "$@" >/dev/null
    callgrind_control -d "$PID" >/dev/null
    ir=$(awk '/^summary:/ {print $2}' "$WORK"/"$row".*.out.1)
    printf '%-32s %8d instructions per claim (%d calls)\n' "$row" $((ir / (n * per))) "$n"
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
}

echo "redis-server under callgrind; claims.lua: $SCRIPT"
for B in $BATCHES; do
    start "claims-$B"
    redis-cli -p "$PORT" HSET '{c:hot}:meta' id hot kind units total 1000000000 remaining 1000000000 \
        limit 1 status active starts '' ends '' hver 0 >/dev/null
    SHA=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat "$SCRIPT")")
    ARGS=()
    for _ in $(seq "$B"); do ARGS+=("b__rand_int__" 1 0); done
    measure "claims-$B" $((CLAIMS / B)) "$B" EVALSHA "$SHA" 9 \
        '{c:hot}:meta' '{c:hot}:users' '{c:hot}:codes' '{c:hot}:seq' '{c:hot}:orders' \
        '{c:hot}:held' '{c:hot}:deadlines' '{c:hot}:idemrej:' '{c:hot}:packed' \
        86400 600 64 100000 0 "${ARGS[@]}"
done
start seed002
redis-cli -p "$PORT" SET air_id:bench 1000000000000 >/dev/null
SHA=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat bench/peers/node-lua/seed002.lua)")
measure seed002 "$CLAIMS" 1 EVALSHA "$SHA" 1 user_id:__rand_int__ air_id:bench 1
