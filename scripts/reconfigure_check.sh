#!/usr/bin/env bash
# Configuring again must change no command of the build, and neither must
# switching the tests on after scripts/demo.sh's -DKVCANARY_TESTS=OFF build:
# otherwise scripts/test.sh after scripts/demo.sh recompiles everything the
# demo built. Configures a scratch build of this source tree three times
# (tests off, on, then again without arguments, as a re-run does) and
# compares the build's commands (`ninja -t commands`): every command of the
# first must be in the second unchanged, and the third must equal the second.
# Arguments go to the first configure (CTest passes this build's compilers
# and options). Exits 1 naming the commands that changed.
# Usage: scripts/reconfigure_check.sh [CMAKE_ARGS...]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(mktemp -d "${TMPDIR:-/tmp}/kvcanary-reconfigure.XXXXXX")"
trap 'rm -rf "$dir"' EXIT

# Configures the scratch build with the given arguments; writes its sorted
# commands to $dir/$1.
configure() {
  local name="$1"
  shift
  if ! cmake -S "$src" -B "$dir/build" -G Ninja "$@" >"$dir/$name.log" 2>&1; then
    cat "$dir/$name.log" >&2
    exit 1
  fi
  ninja -C "$dir/build" -t commands | sort >"$dir/$name"
}

configure off "$@" -DKVCANARY_TESTS=OFF
configure on -DKVCANARY_TESTS=ON
configure again
status=0
# Commands of the demo's build that the tests' configure changed or dropped.
comm -23 "$dir/off" "$dir/on" >"$dir/changed"
if [ -s "$dir/changed" ]; then
  echo "switching KVCANARY_TESTS on changed $(wc -l <"$dir/changed") of" \
    "$(wc -l <"$dir/off") commands of the tests-off build, e.g.:" >&2
  head -n 3 "$dir/changed" | cut -c 1-600 >&2
  status=1
fi
if ! cmp -s "$dir/on" "$dir/again"; then
  echo "configuring again changed the build's commands:" >&2
  diff "$dir/on" "$dir/again" | head -n 6 | cut -c 1-600 >&2
  status=1
fi
if [ "$status" -eq 0 ]; then
  echo "$(wc -l <"$dir/off") commands of the tests-off build unchanged with" \
    "tests on; $(wc -l <"$dir/on") commands unchanged by configuring again"
fi
exit "$status"
