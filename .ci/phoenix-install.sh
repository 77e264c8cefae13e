#!/usr/bin/env bash
# Install Arize Phoenix, the real OTLP receiver the e2e tests (tests/e2e) start on 127.0.0.1.
#
# Idempotent: does nothing when the pinned version is already installed.
# The project's own pins win: the opentelemetry-*, pydantic* and protobuf versions already
# installed are passed to pip as constraints, so installing Phoenix can neither upgrade nor
# downgrade them (pip fails loudly instead). Run it after the project itself is installed.
# Prints one line; on failure, the tail of pip's log.
#
# Usage: bash .ci/phoenix-install.sh    (PYTHON=/path/to/python to pick the interpreter)
set -euo pipefail

PHOENIX_VERSION="20.26.1"
PY="${PYTHON:-python}"

installed="$("$PY" -m pip show arize-phoenix 2>/dev/null | sed -n 's/^Version: //p' || true)"
if [ "$installed" = "$PHOENIX_VERSION" ]; then
    echo "phoenix-install: arize-phoenix $PHOENIX_VERSION already installed"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m pip freeze 2>/dev/null \
    | grep -iE '^(opentelemetry-[a-z0-9_.-]+|pydantic|pydantic[-_]core|pydantic[-_]settings|protobuf)==' \
    > "$work/constraints.txt" || true

start=$SECONDS
if ! "$PY" -m pip install --quiet --disable-pip-version-check \
        -c "$work/constraints.txt" "arize-phoenix==$PHOENIX_VERSION" > "$work/pip.log" 2>&1; then
    echo "phoenix-install: pip install arize-phoenix==$PHOENIX_VERSION failed:" >&2
    grep -v '^WARNING: Location' "$work/pip.log" | tail -n 30 >&2
    exit 1
fi
if ! "$PY" -m pip check > "$work/check.log" 2>&1; then
    echo "phoenix-install: warning: pip check reports conflicts:" >&2
    cat "$work/check.log" >&2
fi
echo "phoenix-install: arize-phoenix $PHOENIX_VERSION installed in $((SECONDS - start))s" \
    "(pinned: $(wc -l < "$work/constraints.txt") packages kept as they were)"
