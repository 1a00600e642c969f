#!/usr/bin/env bash
# Schema-driven fuzzing: schemathesis against /openapi.json of a live embedded server, then
# every invariant over what it left behind.
#
#   scripts/schemathesis.sh                              # CI: 25 examples per operation
#   SCHEMATHESIS_EXAMPLES=200 scripts/schemathesis.sh    # the longer run (README, Tests)
#   SCHEMATHESIS_SEED="$RANDOM" scripts/schemathesis.sh  # explore other inputs (CI keeps seed 3)
#
# Installs schemathesis (PyPI) into a venv under target/ on first use, builds and starts
# `seckill serve` on a free port with a fresh data directory, seeds a stock and a code
# campaign with some claims, and runs every schemathesis phase (examples, coverage, fuzzing,
# stateful: create -> claim -> order -> cancel chains through the links the document gives)
# with these checks: no 5xx, status codes, content types, headers and bodies as documented.
# Then it checks the invariants of every campaign (scripts/schemathesis/invariants.py), that
# the server still answers /healthz and that its log holds no panic. Exits non-zero on any
# failure; the report (JUnit) is left in target/schemathesis/.
set -euo pipefail
cd "$(dirname "$0")/.."

examples="${SCHEMATHESIS_EXAMPLES:-25}"
seed="${SCHEMATHESIS_SEED:-3}"
venv=target/schemathesis-venv
out=target/schemathesis
if [ ! -x "$venv/bin/schemathesis" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet 'schemathesis>=4.3,<5'
fi
"$venv/bin/schemathesis" --version

cargo build --quiet --bin seckill
rm -rf "$out" && mkdir -p "$out"
data="$(mktemp -d)"
token="schemathesis-$RANDOM$RANDOM"
./target/debug/seckill serve --listen 127.0.0.1:0 --data "$data" --admin-token "$token" \
    >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$data"' EXIT
base=""
for _ in $(seq 100); do
    base="$(grep -o 'listening on http://[0-9.:]*' "$out/server.log" | head -1 | sed 's/listening on //' || true)"
    [ -n "$base" ] && break
    sleep 0.1
done
[ -n "$base" ] || { cat "$out/server.log"; echo "server did not start"; exit 1; }
echo "server at $base, data in $data, seed $seed, $examples examples per operation"

auth=(-H "authorization: Bearer $token" -H 'content-type: application/json')
curl -sf "${auth[@]}" "$base/v1/campaigns" -d '{"id":"st-stock","stock":5,"per_user_limit":2}' >/dev/null
curl -sf "${auth[@]}" "$base/v1/campaigns" -d '{"id":"st-codes","codes":["A","B","C"]}' >/dev/null
for u in 1 2 3 4 5 6; do
    for c in st-stock st-codes; do
        curl -sf -H 'content-type: application/json' "$base/v1/campaigns/$c/claims" \
            -d "{\"user_id\":\"u$u\",\"qty\":1}" >/dev/null
    done
done

status=0
PYTHONPATH=scripts/schemathesis SCHEMATHESIS_HOOKS=hooks \
    "$venv/bin/schemathesis" run "$base/openapi.json" \
    -H "authorization: Bearer $token" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    --max-examples "$examples" --seed "$seed" --workers 1 \
    --request-timeout 10 --max-redirects 0 \
    --report junit --report-dir "$out" || status=$?

"$venv/bin/python" scripts/schemathesis/invariants.py "$base" "$token" "$data" || status=1
if ! curl -sf "$base/healthz" >/dev/null; then
    echo "the server no longer answers /healthz"
    status=1
fi
if grep -qi 'panic' "$out/server.log"; then
    grep -i -m5 'panic' "$out/server.log"
    status=1
fi
[ "$status" -eq 0 ] && echo "schemathesis: passed" || echo "schemathesis: FAILED (seed $seed)"
exit "$status"
