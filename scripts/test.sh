#!/usr/bin/env bash
# Runs seckill's whole test suite on a fresh machine: installs what the tests need if it is
# missing, then runs every test. The tests start their own throwaway servers; nothing here
# depends on a service someone started by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    need_apt+=(postgresql)
elif ! command -v psql >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/psql >/dev/null 2>&1; then
    need_apt+=(postgresql-client)   # the lock tests' fenced writes go through psql
fi
# The dashboard's browser test drives Debian's headless chromium through chromedriver.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# The fault campaign steps the embedded server's wall clock through Debian's libfaketime.
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 \
    || ls /usr/lib/faketime/libfaketime.so.1 >/dev/null 2>&1 \
    || need_apt+=(faketime)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing test dependencies: ${need_apt[*]}"
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

cargo test --all-targets "$@"
