#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (CTest), the slow
# multi-process ones included. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh "$@"
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600
