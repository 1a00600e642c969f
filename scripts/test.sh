#!/usr/bin/env bash
# Runs seckill's tests on a fresh machine: installs what the tests need if it is missing,
# then runs a tier. The tests start their own throwaway servers; nothing here depends on a
# service someone started by hand.
#
#   scripts/test.sh                  # every tier: unit, integration, benches as tests (CI)
#   scripts/test.sh fast             # everything but the slow tier, a few minutes
#   scripts/test.sh slow             # the fault campaign, the browser, failovers, crashes
#   scripts/test.sh fast locks::     # one area of the tier's integration tests (libtest
#                                    # filters, any number)
#   scripts/test.sh slow chaos::     # one area of the slow tier
set -euo pipefail
cd "$(dirname "$0")/.."

# The slow tier: tests that start whole deployments and hit them with real faults (the fault
# campaign, Sentinel and Cluster failovers, kill -9 and full disks under load) or a browser.
# libtest filters: a test runs in the tier when its path contains one of them.
SLOW=(
    chaos::
    metrics::browser
    crash::
    admin_crash::
    storage_faults::
    hostile::
    locks::kill9
    locks::restart
    locks::disk_full
    locks::fsync_error
    scale_out::sentinel
    scale_out::replica_
    scale_out::cluster_failover
    scale_out::cluster_frozen
    scale_out::cluster_outage
    scale_out::redis_outage
    scale_out::worker_crash
    scale_out::outages
    scale_out::webhook_takeover
    events::nats
    events::webhooks::a_receiver_down
)

tier=all
case "${1:-}" in
    fast | slow | all) tier="$1"; shift ;;
esac

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# The NATS sink's tests start their own JetStream server.
command -v nats-server >/dev/null 2>&1 || need_apt+=(nats-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    need_apt+=(postgresql)
elif ! command -v psql >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/psql >/dev/null 2>&1; then
    need_apt+=(postgresql-client)   # the lock tests' fenced writes go through psql
fi
if [ "$tier" != fast ]; then
    # The dashboard's browser test drives Debian's headless chromium through chromedriver.
    command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
    command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
    # The fault campaign steps the embedded server's wall clock through Debian's libfaketime.
    ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 \
        || ls /usr/lib/faketime/libfaketime.so.1 >/dev/null 2>&1 \
        || need_apt+=(faketime)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing test dependencies: ${need_apt[*]}"
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# The webhook tests check every signature with the Standard Webhooks reference implementation
# (PyPI's standardwebhooks), from a venv of their own under target/.
venv=target/test-venv
if ! "$venv/bin/python" -c "import standardwebhooks" >/dev/null 2>&1; then
    echo "installing standardwebhooks into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet 'standardwebhooks>=1.0,<2'
fi

case "$tier" in
    all)
        cargo test --all-targets "$@"
        ;;
    fast)
        skips=()
        for s in "${SLOW[@]}"; do skips+=(--skip "$s"); done
        if [ $# -eq 0 ]; then
            cargo test --lib --bins
        fi
        cargo test --test it -- "${skips[@]}" "$@"
        ;;
    slow)
        if [ $# -gt 0 ]; then
            cargo test --test it -- "$@"
        else
            cargo test --test it -- "${SLOW[@]}"
        fi
        ;;
esac
