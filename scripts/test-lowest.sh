#!/usr/bin/env bash
# The test suite once more, against the oldest versions pyproject.toml allows.
#
# Each dependency is pinned to its declared lower bound (`>=X` becomes `==X`), in virtual environments of
# their own under .cache/. A bound set below the release that brought an API the code uses fails here, where a
# run on the newest versions cannot see it. The test tools themselves are not pinned down: their bounds are not
# the library's. Two passes, because the frameworks need a newer pydantic than the library does:
#   1. the library's dependencies and the extras the core imports (redis, prometheus, ops): the whole suite but
#      the end-to-end tests (Arize Phoenix, left to scripts/test.sh) and the framework tests;
#   2. the framework extras (langgraph, openai-agents): the framework tests (and the tonnage plot's, which runs a
#      LangGraph agent), everything else as pip resolves it.
#
# Run it after scripts/test.sh, which installs the toolchains the real-error tests run. Arguments go to pytest
# in both passes.
set -euo pipefail
cd "$(dirname "$0")/.."

# PY: the interpreter scripts/test.sh uses (the active venv's, else $PYTHON or python3), from its own lines.
# shellcheck source=/dev/null
source <(sed -n '/^# --- interpreter ---/,/^# --- end interpreter ---/p' scripts/test.sh)

# lower_bounds GROUP... : NAME==LOWER for each requirement of the groups ("dependencies" or an extra's name).
lower_bounds() {
  "$PY" - "$@" <<'EOF'
import re
import sys
import tomllib

with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
pins: dict[str, str] = {}
for group in sys.argv[1:]:
    requirements = project["dependencies"] if group == "dependencies" else project["optional-dependencies"][group]
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*(.*)", requirement.strip())
        if match is None:
            sys.exit(f"test-lowest: cannot read the requirement {requirement!r} in pyproject.toml")
        name, specifiers = match.groups()
        lower = [spec.strip()[2:].strip() for spec in specifiers.split(",") if spec.strip().startswith(">=")]
        if len(lower) != 1:
            sys.exit(f"test-lowest: {name} ({group}) needs one lower bound (>=) in pyproject.toml, to be tested")
        pins[name.lower()] = lower[0]
for name, version in sorted(pins.items()):
    print(f"{name}=={version}")
EOF
}

# run_pass NAME EXTRAS PINS-FILE PYTEST-ARGS... : install the package with EXTRAS under PINS-FILE's
# constraints in .cache/lowest-NAME, then run pytest there.
run_pass() {
  local name="$1" extras="$2" pins="$3"
  shift 3
  local venv=".cache/lowest-$name"
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$pins" -e ".[$extras]" \
          > "$venv/pip.log" 2>&1; then
    echo "test-lowest ($name): pip cannot install the package with these lower bounds:" >&2
    grep -v '^WARNING: Location' "$venv/pip.log" | tail -n 30 >&2
    return 1
  fi
  echo "test-lowest ($name): $(grep '==' "$pins" | tr '\n' ' ')"
  set +e
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
  local status=$?
  set -e
  if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: treating that as a failure" >&2
    return 1
  fi
  return "$status"
}

mkdir -p .cache
lower_bounds dependencies redis prometheus ops > .cache/lowest-core-pins.txt
# matplotlib's oldest allowed release was built against NumPy 1, as installs that hold it back have it.
echo "numpy<2" >> .cache/lowest-core-pins.txt
lower_bounds langgraph openai-agents > .cache/lowest-frameworks-pins.txt

status=0
run_pass core test .cache/lowest-core-pins.txt -m "not e2e" --ignore=tests/integrations \
  --ignore=tests/ops/test_tonnage.py "$@" || status=1
run_pass frameworks test,langgraph,openai-agents .cache/lowest-frameworks-pins.txt \
  tests/integrations tests/ops/test_tonnage.py "$@" || status=1
exit "$status"
