#!/usr/bin/env bash
# The tests' TMPDIR (tests/CMakeLists.txt): `create DIR` makes DIR empty
# before the first test (CTest fixture setup); `check DIR` after the last
# one (its cleanup) fails, listing them, if anything was left in it: every
# test process writes under a directory of its own that it removes
# (tests/tmpdir_environment.cc), and every script under a mktemp -d it
# removes, so an entry here is a test that crashed or a writer that leaked.
# DIR itself is removed when it is empty.
set -euo pipefail
mode="$1"
dir="$2"
case "$mode" in
  create)
    rm -rf "$dir"
    mkdir -p "$dir"
    ;;
  check)
    if [ ! -d "$dir" ]; then
      echo "no test TMPDIR at $dir" >&2
      exit 1
    fi
    left="$(find "$dir" -mindepth 1 -maxdepth 2 | sort)"
    if [ -n "$left" ]; then
      echo "the tests left $(find "$dir" -mindepth 1 | wc -l) entries in $dir:" >&2
      echo "$left" | head -n 50 >&2
      # A test process's own directory names its test.
      for f in "$dir"/kvt-*/.test; do
        [ -f "$f" ] && echo "left by $(cat "$f"): $(dirname "$f")" >&2
      done
      exit 1
    fi
    rmdir "$dir"
    echo "the tests left nothing in $dir"
    ;;
  *)
    echo "usage: $0 create|check DIR" >&2
    exit 2
    ;;
esac
