#!/usr/bin/env bash
# Install the agent frameworks and OpenTelemetry instrumentations the integration tests
# (tests/integrations) run offline: LangGraph with OpenInference's LangChain instrumentation, and the
# OpenAI Agents SDK with OpenInference's openai-agents instrumentation.
#
# Idempotent: does nothing when every pinned version is already installed.
# The project's own pins win: the opentelemetry-*, pydantic* and protobuf versions already installed
# are passed to pip as constraints, so these packages can neither upgrade nor downgrade them (pip
# fails loudly instead). Run it after the project itself is installed.
# Prints one line; on failure, the tail of pip's log.
#
# Usage: bash .ci/integrations-install.sh    (PYTHON=/path/to/python to pick the interpreter)
set -euo pipefail

PY="${PYTHON:-python}"
# langchain-core stays below 1.8: 1.8.x requires a certifi release newer than the index offers.
PINS=(
    "langgraph==1.2.22"
    "langgraph-prebuilt==1.1.2"
    "langchain-core==1.7.2"
    "openinference-instrumentation-langchain==0.1.80"
    "openai-agents==0.24.0"
    "openinference-instrumentation-openai-agents==2.6.0"
)

missing=()
for pin in "${PINS[@]}"; do
    name="${pin%%==*}"
    want="${pin##*==}"
    have="$("$PY" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p' || true)"
    [ "$have" = "$want" ] || missing+=("$pin")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "integrations-install: ${#PINS[@]} pinned packages already installed"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m pip freeze 2>/dev/null \
    | grep -iE '^(opentelemetry-[a-z0-9_.-]+|pydantic|pydantic[-_]core|pydantic[-_]settings|protobuf)==' \
    > "$work/constraints.txt" || true

start=$SECONDS
if ! "$PY" -m pip install --quiet --disable-pip-version-check \
        -c "$work/constraints.txt" "${PINS[@]}" > "$work/pip.log" 2>&1; then
    echo "integrations-install: pip install ${missing[*]} failed:" >&2
    grep -v '^WARNING: Location' "$work/pip.log" | tail -n 30 >&2
    exit 1
fi
if ! "$PY" -m pip check > "$work/check.log" 2>&1; then
    echo "integrations-install: warning: pip check reports conflicts:" >&2
    cat "$work/check.log" >&2
fi
echo "integrations-install: installed ${missing[*]} in $((SECONDS - start))s" \
    "(pinned: $(wc -l < "$work/constraints.txt") packages kept as they were)"
