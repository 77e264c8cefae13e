#!/usr/bin/env bash
# Install a pinned eslint into .cache/eslint (git-ignored) for the linter parser's tests
# (tests/parsers/test_linters.py), which run the real eslint on small files to get real diagnostics.
# The 8.x line is pinned: its stylish output and --no-eslintrc/--env flags are what the tests use.
#
# See npm-install-pinned.sh for how it is installed (idempotent, one line printed).
set -euo pipefail
exec bash "$(dirname "$0")/npm-install-pinned.sh" eslint-install eslint eslint 8.57.1 eslint "s/^v//p"
