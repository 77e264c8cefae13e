#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine (Python 3.11, pip, git and apt), then run it.
# The real-error tests run real toolchains: gcc/g++, javac/java, node, go, rustc, tsc (npm), bash, curl,
# and the build, package and VCS tools agents run: make, cmake, mvn, git, pip, apt-get, npm, flake8, ruff, Django.
# The end-to-end tests start a real OTLP receiver (Arize Phoenix) on 127.0.0.1; the integration tests run
# LangGraph and the OpenAI Agents SDK offline with scripted models and OpenInference instrumentation.
# valgrind: the instruction-count benchmark's reading of callgrind's files is tested on a real run.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- interpreter ---
# Everything pip installs goes into the active virtual environment when there is one (recommended: the
# test extras, the integrations and Arize Phoenix are more than a gigabyte), else into $PYTHON or python3.
if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
  PY="$VIRTUAL_ENV/bin/python"
else
  PY="$(command -v "${PYTHON:-python3}")"
fi
# apt-get needs root: use sudo only when not root already.
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# --- end interpreter ---

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v rustc >/dev/null 2>&1 || need+=(rustc)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v make >/dev/null 2>&1 || need+=(make)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v git >/dev/null 2>&1 || need+=(git)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing toolchains: ${need[*]}"
  if [ -n "$SUDO" ] && ! command -v sudo >/dev/null 2>&1; then
    echo "apt-get needs root to install ${need[*]}: run as root, install sudo, or install them first" >&2
    exit 1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

"$PY" -m pip install -q --disable-pip-version-check -e ".[test]"
PYTHON="$PY" bash .ci/phoenix-install.sh
PYTHON="$PY" bash .ci/integrations-install.sh
bash .ci/tsc-install.sh
bash .ci/eslint-install.sh

set +e
"$PY" -m pytest -q -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: treating that as a failure" >&2
  exit 1
fi
exit "$status"
