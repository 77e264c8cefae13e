#!/usr/bin/env bash
# Install Arize Phoenix, the real OTLP receiver the e2e tests (tests/e2e) start on 127.0.0.1.
# About 750 MB and a few minutes from nothing. See pip-install-pinned.sh for how pins are kept.
set -euo pipefail
exec bash "$(dirname "$0")/pip-install-pinned.sh" phoenix-install "arize-phoenix==20.26.1"
