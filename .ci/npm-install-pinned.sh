#!/usr/bin/env bash
# Install one pinned npm package into .cache/NAME (git-ignored), for tests that run a real Node tool.
#
# Usage: bash .ci/npm-install-pinned.sh LABEL NAME PACKAGE VERSION BIN VERSION_SED
#   LABEL        prefix of the one line printed
#   NAME         folder under .cache
#   PACKAGE      npm package name
#   VERSION      pinned version
#   BIN          executable under node_modules/.bin
#   VERSION_SED  sed expression that turns `BIN --version` output into the bare version
#
# Idempotent: does nothing when the pinned version is already installed. Prints one line; on failure,
# the tail of npm's log.
set -euo pipefail

label="$1" name="$2" package="$3" version="$4" bin="$5" version_sed="$6"
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="$root/.cache/$name"
exe="$prefix/node_modules/.bin/$bin"

installed() { "$exe" --version 2>/dev/null | sed -n "$version_sed" || true; }

if [ "$(installed)" = "$version" ]; then
    echo "$label: $package $version already installed in .cache/$name"
    exit 0
fi

mkdir -p "$prefix"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
start=$SECONDS
if ! npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error \
        "$package@$version" > "$log" 2>&1; then
    echo "$label: npm install $package@$version failed:" >&2
    tail -n 30 "$log" >&2
    exit 1
fi
echo "$label: $package $(installed) installed in .cache/$name in $((SECONDS - start))s"
