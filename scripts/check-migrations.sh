#!/usr/bin/env bash
# Fails when a committed migration's bytes differ from the bytes it was first committed with.
# A ledger records each applied migration's checksum and refuses to start when the file changed
# (sqlx: "migration N was previously applied but has been modified"), so a change to the schema
# is always a new migration. Needs the repository's history (a clone, not an export).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(git rev-parse --is-shallow-repository)" = "true" ]; then
    git fetch --quiet --unshallow || { echo "check-migrations: a shallow clone cannot show first versions" >&2; exit 1; }
fi
bad=0
checked=0
while IFS= read -r file; do
    # -m: a file first committed on a branch and merged shows in the merge's diff too (plain
    # `git log` shows no diffs for merges); the oldest commit that added it is its first.
    first=$(git log -m --diff-filter=A --format=%H -- "$file" | tail -n 1)
    if [ -z "$first" ]; then
        if git ls-files --error-unmatch "$file" >/dev/null 2>&1 && git cat-file -e "HEAD:$file" 2>/dev/null; then
            echo "check-migrations: $file is committed but no commit adding it was found" >&2
            bad=1
        fi
        continue   # not committed yet: a new migration
    fi
    checked=$((checked + 1))
    if ! git show "$first:$file" | cmp -s - "$file"; then
        echo "check-migrations: $file differs from its first commit ${first:0:7}; add a new migration instead" >&2
        git show "$first:$file" | diff - "$file" >&2 || true
        bad=1
    fi
done < <(find migrations -type f -name '*.sql' | sort)
if [ "$bad" -ne 0 ]; then exit 1; fi
echo "check-migrations: $checked committed migrations unchanged"
