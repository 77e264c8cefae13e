#!/usr/bin/env bash
# Install a pinned eslint into .cache/eslint (git-ignored) for the linter parser's tests
# (tests/parsers/test_linters.py), which run the real eslint on small files to get real diagnostics.
# The 8.x line is pinned: its stylish output and --no-eslintrc/--env flags are what the tests use.
#
# Idempotent: does nothing when the pinned version is already installed. Prints one line; on failure,
# the tail of npm's log.
set -euo pipefail

VERSION="8.57.1"
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="$root/.cache/eslint"
eslint="$prefix/node_modules/.bin/eslint"

have="$("$eslint" --version 2>/dev/null | sed 's/^v//' || true)"
if [ "$have" = "$VERSION" ]; then
    echo "eslint-install: eslint $VERSION already installed in .cache/eslint"
    exit 0
fi

mkdir -p "$prefix"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
start=$SECONDS
if ! npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error \
        "eslint@$VERSION" > "$log" 2>&1; then
    echo "eslint-install: npm install eslint@$VERSION failed:" >&2
    tail -n 30 "$log" >&2
    exit 1
fi
echo "eslint-install: eslint $("$eslint" --version | sed 's/^v//') installed in .cache/eslint in $((SECONDS - start))s"
