#!/usr/bin/env bash
# Install pinned packages beside the project without moving the project's own pins.
#
# Usage: bash .ci/pip-install-pinned.sh LABEL NAME==VERSION [NAME==VERSION ...]
#        (PYTHON=/path/to/python picks the interpreter)
#
# Idempotent: does nothing when every pin is already installed. The opentelemetry-*, pydantic* and
# protobuf versions already installed are passed to pip as constraints, so these packages can neither
# upgrade nor downgrade them (pip fails loudly instead). Run it after the project itself is installed.
# Prints one line; on failure, the tail of pip's log.
set -euo pipefail

label="$1"
shift
PY="${PYTHON:-python3}"

missing=()
for pin in "$@"; do
    name="${pin%%==*}"
    want="${pin##*==}"
    have="$("$PY" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p' || true)"
    [ "$have" = "$want" ] || missing+=("$pin")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "$label: $# pinned package(s) already installed"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m pip freeze 2>/dev/null \
    | grep -iE '^(opentelemetry-[a-z0-9_.-]+|pydantic|pydantic[-_]core|pydantic[-_]settings|protobuf)==' \
    > "$work/constraints.txt" || true

start=$SECONDS
if ! "$PY" -m pip install --quiet --disable-pip-version-check \
        -c "$work/constraints.txt" "$@" > "$work/pip.log" 2>&1; then
    echo "$label: pip install ${missing[*]} failed:" >&2
    grep -v '^WARNING: Location' "$work/pip.log" | tail -n 30 >&2
    exit 1
fi
if ! "$PY" -m pip check > "$work/check.log" 2>&1; then
    echo "$label: warning: pip check reports conflicts:" >&2
    cat "$work/check.log" >&2
fi
echo "$label: installed ${missing[*]} in $((SECONDS - start))s" \
    "(pinned: $(wc -l < "$work/constraints.txt") packages kept as they were)"
