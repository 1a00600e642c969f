#!/usr/bin/env bash
# Measures acquire + release latency and throughput of every lock store in one run, so the
# figures are comparable with each other (docs/LOCKS.md): the embedded store directly on a
# data directory (SQLite, synchronous=FULL), an embedded server over HTTP, one redis-server
# (AOF, appendfsync everysec and always), and Redlock over three redis-servers.
#
# usage: scripts/bench-locks.sh [cycles=2000] [concurrency=8] [binary=target/release/seckill]
# needs: redis-server (apt-get install redis-server)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
C=${2:-8}
BIN=${3:-target/release/seckill}
[ -x "$BIN" ] || cargo build --release
command -v redis-server >/dev/null || { echo "missing redis-server (apt-get install redis-server)"; exit 1; }

WORK=$(mktemp -d /tmp/seckill-locks.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
redis() { # port fsync
    mkdir -p "$WORK/r$1"
    redis-server --port "$1" --bind 127.0.0.1 --dir "$WORK/r$1" --save "" \
        --appendonly yes --appendfsync "$2" >/dev/null &
    PIDS+=($!)
    for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.05; done
}

echo "# lock stores, $N acquire+release cycles, $C workers each on its own name ($(date -u +%FT%TZ), $(nproc) cores)"
mkdir -p "$WORK/direct"
"$BIN" lock bench --data "$WORK/direct" -n "$N" -c "$C"

TOKEN=bench-token
PORT=$(free_port)
"$BIN" serve --listen "127.0.0.1:$PORT" --data "$WORK/serve" --admin-token "$TOKEN" 2>/dev/null &
PIDS+=($!)
for _ in $(seq 100); do curl -fs "127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
"$BIN" lock bench --url "http://127.0.0.1:$PORT" --admin-token "$TOKEN" -n "$N" -c "$C" | sed 's/^http     /http(emb)/'

P1=$(free_port); redis "$P1" everysec
"$BIN" lock bench --redis "redis://127.0.0.1:$P1" -n "$N" -c "$C" | sed 's/^redis    /redis(es)/'
P2=$(free_port); redis "$P2" always
"$BIN" lock bench --redis "redis://127.0.0.1:$P2" -n "$N" -c "$C" | sed 's/^redis    /redis(al)/'

M=()
for _ in 1 2 3; do P=$(free_port); redis "$P" everysec; M+=("redis://127.0.0.1:$P"); done
"$BIN" lock bench --lock-redis "$(IFS=,; echo "${M[*]}")" -n "$N" -c "$C"
