#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (CTest), the slow
# multi-process ones included. Exits non-zero if anything fails. After
# scripts/demo.sh it installs the test-only packages and builds the tests
# into the same build/, recompiling nothing the demo built (CTest's
# Build.ReconfigureChangesNoCommand holds the build to that). Under CI (.ci/run
# sets CI=true) a test that needs ../shared fails where it would skip.
# Arguments go to cmake's configure step (scripts/build.sh).
# Tests labelled `timing` (two-sample tests on time to first token) run
# after the others, one at a time, so the rest of the suite does not load
# the machine while they measure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh all
scripts/build.sh -DKVCANARY_TESTS=ON "$@"
# Tests leave nothing behind: CTest gives every test TMPDIR=build/test-tmp
# and checks it is empty after the last (tests/CMakeLists.txt); this stamp
# catches a writer that ignored TMPDIR.
stamp="build/ctest-started.stamp"
touch "$stamp"
status=0
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600 \
  --label-exclude timing | tee build/ctest.log || status=$?
timing_status=0
ctest --test-dir build --output-on-failure --timeout 600 --label-regex timing \
  | tee build/ctest-timing.log || timing_status=$?
leftovers="$(find /tmp /var/tmp -mindepth 1 -maxdepth 1 -newer "$stamp" \
  -name '*kvcanary*' 2>/dev/null || true)"
if [[ -n "$leftovers" ]]; then
  echo "the tests left these in /tmp or /var/tmp:" >&2
  echo "$leftovers" >&2
  status=1
else
  echo "the tests left nothing of theirs in /tmp or /var/tmp"
fi
# CTest lists skipped tests after its summary; repeat the summaries last.
grep -E "tests passed|tests failed" build/ctest.log | tail -n 1 || true
grep -E "tests passed|tests failed" build/ctest-timing.log | tail -n 1 || true
if [[ "$status" -ne 0 || "$timing_status" -ne 0 ]]; then
  exit 1
fi
