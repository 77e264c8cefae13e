#!/usr/bin/env bash
# Install a pinned TypeScript compiler into .cache/tsc (git-ignored) for the tsc parser's tests
# (tests/parsers/test_tsc.py), which run the real `tsc` on small files to get real diagnostics.
# The 5.x line is pinned: its output format is the one the parser is tested against.
#
# See npm-install-pinned.sh for how it is installed (idempotent, one line printed).
set -euo pipefail
exec bash "$(dirname "$0")/npm-install-pinned.sh" tsc-install tsc typescript 5.9.3 tsc "s/^Version //p"
