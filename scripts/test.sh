#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (CTest), the slow
# multi-process ones included. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh "$@"
status=0
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600 \
  | tee build/ctest.log || status=$?
# CTest lists skipped tests after its summary; repeat the summary last.
grep -E "tests passed|tests failed" build/ctest.log | tail -n 1 || true
exit "$status"
