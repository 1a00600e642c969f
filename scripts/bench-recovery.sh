#!/usr/bin/env bash
# Recovery benchmark of the embedded deployment: how long a restart takes, and how much memory
# the restarted server holds, with 100 k, 1 M and 10 M orders in its ledger.
#
# For each size N the ledger is built directly in SQLite (scripts/bench/recovery_ledger.py: one
# sold-out stock campaign, N buyers u1…uN, one unit each, on the schema `seckill serve` itself
# migrated), then the release build of `seckill serve` is started on it RECOVERY_RUNS times;
# each run measures the wall time from exec to the first 200 of GET /healthz, VmRSS once it
# answers and VmHWM (peak RSS of the start), checks the campaign reads total = N, remaining 0,
# that buyer u1 hears `already_claimed` and a new buyer `sold_out`, then kill -9s the server.
# Up to RECOVERY_LIVE_MAX orders the same sale is also made live over HTTP (`seckill bench`,
# one claim per buyer) to read the RSS of the server that sold them, which is then kill -9ed and
# restarted: the crash-and-restart of a real sale.
#
# The history row (RECOVERY_HISTORY="K N", default "19 500000"; empty skips it): K closed
# campaigns of N buyers each beside one live sold-out campaign of N buyers, restarted: closed
# campaigns are not loaded (docs/BENCHMARKS.md), so it should cost what the N-buyer row costs.
# Every restart also checks a closed campaign's view and that a claim on it answers `closed`.
#
# The ledger file is in the page cache (just written); a restart after a reboot also reads it
# from disk once (about 60 bytes an order).
#
# Usage: scripts/bench-recovery.sh                (sizes 100000 1000000 10000000)
#        RECOVERY_SIZES="100000 1000000" RECOVERY_LIVE_MAX=0 scripts/bench-recovery.sh
#        BENCH_OUT=/tmp/b.md scripts/bench-recovery.sh
# It replaces the "Recovery" section of $BENCH_OUT (docs/BENCHMARKS.md), or appends one.
#
# Scale-out mode: RECOVERY_MODE=scale-out scripts/bench-recovery.sh measures instead the restart
# of `seckill serve` against Redis + PostgreSQL after Redis lost everything, with closed
# campaigns of many buyers in the ledger (time to /healthz, to the first won claim on the live
# campaign, and until the history is back in Redis); see scripts/bench/recovery_scale_out.sh
# (SO_CLOSED, SO_BUYERS, SO_LIVE, RECOVERY_RUNS, BENCH_BIN). It prints, writes no report.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${RECOVERY_MODE:-}" = scale-out ]; then exec scripts/bench/recovery_scale_out.sh; fi

SIZES=${RECOVERY_SIZES:-"100000 1000000 10000000"}
RUNS=${RECOVERY_RUNS:-3}
LIVE_MAX=${RECOVERY_LIVE_MAX:-1000000}
REBUILD_SIZES=${RECOVERY_REBUILD_SIZES-"1000000"}
HISTORY=${RECOVERY_HISTORY-"19 500000"}
CPU=${BENCH_SERVER_CPU:-1}
GEN_CPU=${BENCH_GEN_CPU:-0}
OUT=${BENCH_OUT:-docs/BENCHMARKS.md}
TOKEN=bench-$RANDOM$RANDOM

# BENCH_BIN: another build to measure (e.g. an older release, for a before/after).
if [ -z "${BENCH_BIN:-}" ]; then cargo build --release --quiet; fi
BIN=${BENCH_BIN:-$PWD/target/release/seckill}
WORK=$(mktemp -d)
PID=
cleanup() {
    if [ -n "$PID" ]; then kill -9 "$PID" 2>/dev/null || true; fi
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
RESULTS=$WORK/results.tsv
UPTIME_BEFORE=$(uptime)
echo "work dir $WORK; server on CPU $CPU"

now_ns() { date +%s%N; }
kib() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$PID/status"; }

# start DIR LOG: starts the server on DIR and waits until /healthz answers 200; sets PID, URL
# and SECS (exec to first 200).
start() {
    local dir=$1 log=$2 t0 url= tries=0
    rm -f "$log" # never read the previous server's address
    t0=$(now_ns)
    taskset -c "$CPU" "$BIN" serve --data "$dir" --listen 127.0.0.1:0 --admin-token "$TOKEN" \
        >/dev/null 2>"$log" &
    PID=$!
    while :; do
        if [ -z "$url" ]; then
            url=$(grep -so 'listening on http://[0-9.:]*' "$log" | head -1 | sed 's/listening on //') || true
        fi
        if [ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/healthz")" = 200 ]; then
            break
        fi
        if ! kill -0 "$PID" 2>/dev/null; then echo "server died:"; cat "$log"; exit 1; fi
        tries=$((tries + 1))
        if [ "$tries" -gt 30000 ]; then echo "no answer from $dir after 5 min"; exit 1; fi
        sleep 0.01
    done
    SECS=$(python3 -c "print(f'{($(now_ns) - $t0) / 1e9:.2f}')")
    URL=$url
}
kill9() { kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=; }

claim() {
    curl -s -XPOST "$URL/v1/campaigns/$1/claims" -H 'content-type: application/json' \
        -d "{\"user_id\": \"$2\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["outcome"])'
}

# check ID N: the restarted server holds what the ledger says.
check() {
    local view
    view=$(curl -s "$URL/v1/campaigns/$1" | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["total"], v["remaining"])')
    [ "$view" = "$2 0" ] || { echo "campaign $1 reads '$view', want '$2 0'"; exit 1; }
    [ "$(claim "$1" u1)" = already_claimed ] || { echo "u1 should hear already_claimed"; exit 1; }
    [ "$(claim "$1" newcomer)" = sold_out ] || { echo "a newcomer should hear sold_out"; exit 1; }
}

# check_closed ID N: a closed campaign of N buyers reads right and answers `closed`.
check_closed() {
    local view
    view=$(curl -s "$URL/v1/campaigns/$1" | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["total"], v["remaining"], v["status"])')
    [ "$view" = "$2 0 closed" ] || { echo "campaign $1 reads '$view', want '$2 0 closed'"; exit 1; }
    [ "$(claim "$1" u1)" = closed ] || { echo "a claim on closed $1 should hear closed"; exit 1; }
}

# restarts HOW N DIR ID [CLOSED_ID]: RUNS restarts of a server on DIR, one result line each.
restarts() {
    for run in $(seq "$RUNS"); do
        start "$3" "$WORK/restart.log"
        local rss hwm
        rss=$(kib VmRSS); hwm=$(kib VmHWM)
        check "$4" "$2"
        if [ -n "${5:-}" ]; then check_closed "$5" "$2"; fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$SECS" "$rss" "$hwm" "$LIVE_RSS" >>"$RESULTS"
        echo "  $1 N=$2 run $run: /healthz after ${SECS}s, RSS $((rss / 1024)) MiB, peak $((hwm / 1024)) MiB"
        kill9
    done
}

# An empty server: the memory every row below starts from.
mkdir -p "$WORK/empty"
start "$WORK/empty" "$WORK/empty.log"
EMPTY_RSS=$(kib VmRSS)
kill9
echo "empty server: $((EMPTY_RSS / 1024)) MiB"

for n in $SIZES; do
    dir=$WORK/ledger-$n
    mkdir -p "$dir"
    start "$dir" "$WORK/migrate.log"
    kill -INT "$PID"; wait "$PID" 2>/dev/null || true; PID=
    t0=$(now_ns)
    python3 scripts/bench/recovery_ledger.py "$dir/seckill.db" "$n" sale
    echo "ledger of $n orders written in $(python3 -c "print(f'{($(now_ns) - $t0) / 1e9:.1f}')")s ($(du -m "$dir/seckill.db" | cut -f1) MB)"
    LIVE_RSS=""
    restarts ledger "$n" "$dir" sale
    rm -rf "$dir"

    if [ "$n" -le "$LIVE_MAX" ]; then
        dir=$WORK/live-$n
        mkdir -p "$dir"
        start "$dir" "$WORK/live.log"
        echo "selling $n units live to $n buyers ..."
        taskset -c "$GEN_CPU" "$BIN" bench --url "$URL" --admin-token "$TOKEN" --stock "$n" --limit 1 \
            --users "$n" --pick once -n "$n" -c 64 --threads 1 --no-verify --json >"$WORK/live.json"
        id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["campaign"])' "$WORK/live.json")
        LIVE_RSS=$(kib VmRSS)
        echo "  sold live: RSS $((LIVE_RSS / 1024)) MiB; kill -9"
        kill9
        restarts live "$n" "$dir" "$id"
        rm -rf "$dir"
    fi
done

if [ -n "$HISTORY" ]; then
    read -r closed each <<<"$HISTORY"
    dir=$WORK/history
    mkdir -p "$dir"
    start "$dir" "$WORK/migrate.log"
    kill -INT "$PID"; wait "$PID" 2>/dev/null || true; PID=
    t0=$(now_ns)
    for i in $(seq "$closed"); do
        python3 scripts/bench/recovery_ledger.py "$dir/seckill.db" "$each" "old$i" closed
    done
    python3 scripts/bench/recovery_ledger.py "$dir/seckill.db" "$each" sale active
    echo "ledger of $closed closed campaigns and one live, $each orders each, written in $(python3 -c "print(f'{($(now_ns) - $t0) / 1e9:.1f}')")s ($(du -m "$dir/seckill.db" | cut -f1) MB)"
    LIVE_RSS=""
    restarts "history/$closed" "$each" "$dir" sale old1
    rm -rf "$dir"
fi

# --- scale-out: a campaign of N buyers rebuilt from PostgreSQL into a Redis that lost it ------
# The campaign is created through the API, its N orders are written straight into PostgreSQL,
# its keys are deleted from Redis, and one claim makes the instance rebuild it. Measured: the
# time of that claim, the instance's RSS before and its peak during the rebuild (VmHWM reset
# through /proc/PID/clear_refs), Redis's used memory after.
REBUILD=$WORK/rebuild.tsv
: >"$REBUILD"
PG=${BENCH_POSTGRES_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
if [ -n "$REBUILD_SIZES" ] && command -v redis-server >/dev/null && psql "$PG" -qc 'SELECT 1' >/dev/null 2>&1; then
    RPORT=$((20000 + RANDOM % 20000))
    redis-server --port "$RPORT" --save "" --appendonly no >"$WORK/redis.log" 2>&1 &
    RPID=$!
    for _ in $(seq 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
    DB=seckill_recovery_$RANDOM$RANDOM
    psql "$PG" -qc "CREATE DATABASE $DB" >/dev/null
    PGURL="${PG%/*}/$DB"
    t0=$(now_ns)
    taskset -c "$CPU" "$BIN" serve --listen 127.0.0.1:0 --admin-token "$TOKEN" \
        --redis "redis://127.0.0.1:$RPORT" --postgres "$PGURL" >/dev/null 2>"$WORK/scale.log" &
    PID=$!
    for _ in $(seq 600); do
        URL=$(grep -o 'listening on http://[0-9.:]*' "$WORK/scale.log" | head -1 | sed 's/listening on //') || true
        [ -n "$URL" ] && break
        sleep 0.05
    done
    [ -n "$URL" ] || { echo "scale-out server did not start:"; cat "$WORK/scale.log"; exit 1; }
    for n in $REBUILD_SIZES; do
        id=rebuild-$n
        curl -sf -XPOST "$URL/v1/campaigns" -H "authorization: Bearer $TOKEN" \
            -H 'content-type: application/json' \
            -d "{\"id\":\"$id\",\"stock\":$n,\"per_user_limit\":1}" >/dev/null
        psql "$PGURL" -qc "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, state, created_at)
            SELECT '$id-' || i, '$id', i, 'u' || i, 1, 'active', 1700000000000000 + i
            FROM generate_series(1, $n) AS i; ANALYZE orders" >/dev/null
        redis-cli -p "$RPORT" DEL "{c:$id}:meta" "{c:$id}:users" "{c:$id}:codes" "{c:$id}:seq" \
            "{c:$id}:orders" "{c:$id}:released" >/dev/null
        before=$(kib VmRSS)
        echo 5 >"/proc/$PID/clear_refs" 2>/dev/null || true
        t0=$(now_ns)
        outcome=$(claim "$id" newcomer)
        SECS=$(python3 -c "print(f'{($(now_ns) - $t0) / 1e9:.2f}')")
        hwm=$(kib VmHWM); after=$(kib VmRSS)
        [ "$outcome" = sold_out ] || { echo "a newcomer heard $outcome after the rebuild"; exit 1; }
        [ "$(claim "$id" u1)" = already_claimed ] || { echo "u1 should hear already_claimed"; exit 1; }
        rmem=$(redis-cli -p "$RPORT" INFO memory | awk -F: '/^used_memory:/ {print int($2 / 1024)}')
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$SECS" "$before" "$hwm" "$after" "$rmem" >>"$REBUILD"
        echo "  scale-out rebuild of $n buyers: ${SECS}s; RSS $((before / 1024)) -> peak $((hwm / 1024)) -> $((after / 1024)) MiB; Redis $((rmem / 1024)) MiB"
    done
    kill9
    kill "$RPID"; wait "$RPID" 2>/dev/null || true
    psql "$PG" -qc "DROP DATABASE $DB" >/dev/null 2>&1 || true
else
    echo "scale-out rebuild skipped (REBUILD_SIZES empty, or no redis-server / PostgreSQL at $PG)"
fi

python3 - "$RESULTS" "$OUT" "$EMPTY_RSS" "$RUNS" "$UPTIME_BEFORE" "$(uptime)" "$REBUILD" <<'PY'
import statistics, subprocess, sys
results, out, empty, runs, before, after, rebuild = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
rows = {}
for line in open(results):
    how, n, secs, rss, hwm, live = line.rstrip("\n").split("\t")
    r = rows.setdefault((how, int(n)), {"secs": [], "rss": [], "hwm": [], "live": live})
    r["secs"].append(float(secs)); r["rss"].append(int(rss)); r["hwm"].append(int(hwm))
mib = lambda k: f"{k / 1024:,.0f}"
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
lines = [
    "<!-- recovery:begin (written by scripts/bench-recovery.sh) -->",
    "## Recovery: restart with a full ledger (embedded)",
    "",
    f"Written by `scripts/bench-recovery.sh` (commit `{commit}`, {runs} restarts per row, medians; "
    "release build, server pinned to one core). A ledger of N orders is one sold-out stock "
    "campaign, N buyers, one unit each. *built*: the rows written straight into SQLite with the "
    "schema `seckill serve` migrated; *sold live*: the same sale made over HTTP with "
    "`seckill bench`, then the server killed with `kill -9`. Restart = exec of `seckill serve` to "
    "the first 200 of `GET /healthz`; every restart then checks total, remaining, a holder's "
    "`already_claimed` and a newcomer's `sold_out`. *K closed campaigns beside this live one*: "
    "one ledger of K closed campaigns of N buyers and the live sold-out one; a restart also "
    "checks a closed campaign's view and that a claim on it hears `closed` (closed campaigns "
    "are not loaded, see the README's \"How it works\").",
    "",
    f"- load before: `{before}`",
    f"- load after: `{after}`",
    f"- an empty server: {mib(empty)} MiB RSS",
    "",
    "| ledger | orders | restart to /healthz, s (median; min–max) | RSS after restart, MiB | peak RSS during restart, MiB | RSS of the server that sold them, MiB |",
    "| --- | ---: | ---: | ---: | ---: | ---: |",
]
def label(how, n):
    if how.startswith("history/"):
        k = int(how.split("/")[1])
        return f"built: {k} closed campaigns beside this live one, {n:,} each", n * (k + 1)
    return ("built" if how == "ledger" else "sold live, kill -9"), n
for (how, n), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    s = r["secs"]
    live = mib(int(r["live"])) if r["live"] else "—"
    what, orders = label(how, n)
    lines.append(
        f"| {what} | {orders:,} | {statistics.median(s):.2f}; {min(s):.2f}–{max(s):.2f} "
        f"| {mib(statistics.median(r['rss']))} | {mib(statistics.median(r['hwm']))} | {live} |"
    )
built = sorted((n, statistics.median(r["rss"])) for (how, n), r in rows.items() if how == "ledger")
lines.append("")
if built:
    per = [f"{(rss - empty) * 1024 / n:,.0f} bytes at {n:,}" for n, rss in built]
    lines.append("Memory per buyer after a restart, (RSS − empty server RSS) ÷ buyers: " + "; ".join(per) + ".")
    if len(built) > 1:
        (n0, r0), (n1, r1) = built[-2], built[-1]
        lines.append(f"Between {n0:,} and {n1:,} buyers the slope is {(r1 - r0) * 1024 / (n1 - n0):,.0f} bytes per buyer.")
    lines += ["", "Where the bytes of a buyer go (ids like `u123456`): the campaign's holdings, an 8-byte slot (offset of the id, units held) plus a control byte in a power-of-two table at most 7/8 full (1 M buyers: 2^21 buckets, 19 MB), the id with a length byte in one arena (8 MB), and the stock board's holder set, one 8-byte hash plus a control byte per bucket (2^21 buckets, 19 MB): 46 MB for 1 M buyers. The figure per buyer falls between table doublings (10 M buyers fill 2^24 buckets to 60 %). The server that sold the orders live holds the same structures, so a restart holds no more than it did before the kill."]
rb = [l.rstrip("\n").split("\t") for l in open(rebuild) if l.strip()]
if rb:
    lines += [
        "",
        "Scale-out: a campaign of N buyers rebuilt from PostgreSQL into a Redis that lost it "
        "(its keys deleted; the next claim rebuilds it). Time of that claim; the instance's RSS "
        "before, its peak during the rebuild and after; Redis's `used_memory` after.",
        "",
        "| buyers | rebuild (claim answered), s | instance RSS before, MiB | peak during, MiB | after, MiB | Redis used_memory, MiB |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, secs, b, h, a, r in rb:
        lines.append(f"| {int(n):,} | {float(secs):.2f} | {mib(int(b))} | {mib(int(h))} | {mib(int(a))} | {mib(int(r))} |")
lines.append("<!-- recovery:end -->")
section = "\n".join(lines) + "\n"
try:
    text = open(out).read()
except FileNotFoundError:
    text = ""
a, b = text.find("<!-- recovery:begin"), text.find("<!-- recovery:end -->")
if a >= 0 and b >= 0:
    text = text[:a] + section + text[b + len("<!-- recovery:end -->\n"):]
else:
    text = text.rstrip("\n") + ("\n\n" if text else "") + section
open(out, "w").write(text)
print(section)
PY
echo "wrote $OUT"
