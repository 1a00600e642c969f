#!/usr/bin/env bash
# The supply-chain check of CI: `cargo deny check` (advisories, licenses, bans, duplicate
# versions, sources; deny.toml) and `cargo audit` against the RustSec advisory database.
#
# Both tools are installed (pinned versions, --locked) into target/tools when missing. The
# advisory database is fetched from github.com/RustSec/advisory-db; SECKILL_ADVISORY_DB may
# name a local clone of it instead (machines without access to GitHub). Without either, the
# advisory checks cannot run: the script says so loudly and fails unless
# SECKILL_ALLOW_NO_ADVISORY_DB=1 — licenses, bans and sources are always checked.
set -euo pipefail
cd "$(dirname "$0")/.."

DENY_VERSION=0.20.2
AUDIT_VERSION=0.22.2
# The pinned binaries are called by path: `cargo deny` could run another install.
tools="$PWD/target/tools"
deny="$tools/bin/cargo-deny"
audit="$tools/bin/cargo-audit"
if ! "$deny" --version 2>/dev/null | grep -qFw "$DENY_VERSION"; then
    echo "installing cargo-deny $DENY_VERSION into target/tools"
    cargo install --quiet --locked "cargo-deny@$DENY_VERSION" --root "$tools"
fi
if ! "$audit" --version 2>/dev/null | grep -qFw "$AUDIT_VERSION"; then
    echo "installing cargo-audit $AUDIT_VERSION into target/tools"
    cargo install --quiet --locked "cargo-audit@$AUDIT_VERSION" --root "$tools"
fi

"$deny" deny --log-level error check licenses bans sources

db="${SECKILL_ADVISORY_DB:-}"
if [ -z "$db" ]; then
    db="$PWD/target/advisory-db"
    if [ -d "$db/.git" ]; then
        timeout 120 git -C "$db" pull --quiet --ff-only 2>/dev/null || true
    else
        rm -rf "$db"
        timeout 120 git clone --quiet --depth 1 https://github.com/RustSec/advisory-db "$db" 2>/dev/null || rm -rf "$db"
    fi
fi
if [ ! -d "$db/crates" ]; then
    echo "!! ADVISORIES NOT CHECKED: the RustSec advisory database cannot be fetched" >&2
    echo "!! (no access to github.com; set SECKILL_ADVISORY_DB to a clone of it)" >&2
    if [ "${SECKILL_ALLOW_NO_ADVISORY_DB:-0}" = 1 ]; then
        exit 0
    fi
    exit 1
fi
echo "advisory database: $(git -C "$db" log -1 --format='%h of %cs' 2>/dev/null || echo "$db")"
"$audit" audit --no-fetch --db "$db" --deny warnings --file Cargo.lock
# cargo-deny reads the same database, offline: it keeps a database under
# db-path/advisory-db-<hash of its URL> (this name is cargo-deny 0.20's for the default URL;
# another version that names it differently fails here, loudly).
dbs="$PWD/target/advisory-dbs"
mkdir -p "$dbs"
rm -rf "$dbs/advisory-db-3157b0e258782691"
cp -r "$db" "$dbs/advisory-db-3157b0e258782691"
cfg="$(mktemp)"
trap 'rm -f "$cfg"' EXIT
awk -v p="$dbs" '{ print } /^\[advisories\]$/ { print "db-path = \"" p "\"" }' deny.toml > "$cfg"
"$deny" deny --offline --log-level error --config "$cfg" check advisories
