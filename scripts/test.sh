#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine (Python 3.11, pip, git and apt), then run it.
# The real-error tests run real toolchains: gcc/g++, javac/java, node, go, rustc, tsc (npm), bash, curl.
# The end-to-end tests start a real OTLP receiver (Arize Phoenix) on 127.0.0.1; the integration tests run
# LangGraph and the OpenAI Agents SDK offline with scripted models and OpenInference instrumentation.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v rustc >/dev/null 2>&1 || need+=(rustc)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing toolchains: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

python3 -m pip install -q --disable-pip-version-check -e ".[test]"
PYTHON=python3 bash .ci/phoenix-install.sh
PYTHON=python3 bash .ci/integrations-install.sh
bash .ci/tsc-install.sh

set +e
python3 -m pytest -q -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: treating that as a failure" >&2
  exit 1
fi
exit "$status"
