#!/usr/bin/env bash
# Install a pinned TypeScript compiler into .cache/tsc (git-ignored) for the tsc parser's tests
# (tests/parsers/test_tsc.py), which run the real `tsc` on small files to get real diagnostics.
# The 5.x line is pinned: its output format is the one the parser is tested against.
#
# Idempotent: does nothing when the pinned version is already installed. Prints one line; on failure,
# the tail of npm's log.
set -euo pipefail

VERSION="5.9.3"
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="$root/.cache/tsc"
tsc="$prefix/node_modules/.bin/tsc"

have="$("$tsc" --version 2>/dev/null | sed -n 's/^Version //p' || true)"
if [ "$have" = "$VERSION" ]; then
    echo "tsc-install: typescript $VERSION already installed in .cache/tsc"
    exit 0
fi

mkdir -p "$prefix"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
start=$SECONDS
if ! npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error \
        "typescript@$VERSION" > "$log" 2>&1; then
    echo "tsc-install: npm install typescript@$VERSION failed:" >&2
    tail -n 30 "$log" >&2
    exit 1
fi
echo "tsc-install: typescript $("$tsc" --version | sed -n 's/^Version //p') installed in .cache/tsc in $((SECONDS - start))s"
