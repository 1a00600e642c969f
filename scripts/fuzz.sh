#!/usr/bin/env bash
# Builds and runs every cargo-fuzz target of seckill's parsers for a bounded time each.
#
#   scripts/fuzz.sh                      # every target, FUZZ_SECONDS (default 15) each
#   FUZZ_SECONDS=600 scripts/fuzz.sh rate http_request   # longer, chosen targets
#
# Each target starts from its committed seed corpus (fuzz/corpus/<target>/) plus what earlier
# runs on this machine found (fuzz/target/corpus/<target>/, not committed). Prints executions,
# corpus size and the outcome per target; exits non-zero if any target found a crash or a
# violated property (the input is left in fuzz/artifacts/<target>/, see docs/FUZZING.md).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-15}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(rate identity client_ip order_id cursor idempotency_key stream_entry ledger_answer http_request)
fi

if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null; then
    cargo install cargo-fuzz --locked
fi

echo "building ${#targets[@]} fuzz targets (nightly, sanitizer coverage)..."
cargo +nightly fuzz build

# The HTTP target keeps an embedded engine in a temp directory for the whole run.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

failed=()
printf '\n%-16s %12s %10s %8s  %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
    work="fuzz/target/corpus/$t"
    mkdir -p "$work" "fuzz/artifacts/$t"
    log="$scratch/$t.log"
    status=0
    TMPDIR="$scratch" cargo +nightly fuzz run "$t" "$work" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=4096 \
        >"$log" 2>&1 || status=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    corpus=$(find "$work" -type f | wc -l)
    if [ "$status" -eq 0 ]; then
        result=ok
    else
        result="FAILED (exit $status)"
        failed+=("$t")
        echo "---- $t ----"
        grep -E 'panicked|SUMMARY|artifact|ERROR' "$log" | head -n 20 || tail -n 40 "$log"
    fi
    printf '%-16s %12s %10s %8s  %s\n' "$t" "${execs:-0}" "${rate:-0}" "$corpus" "$result"
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "crashes or violated properties in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
