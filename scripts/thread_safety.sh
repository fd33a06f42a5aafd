#!/usr/bin/env bash
# clang's thread-safety analysis (-Werror=thread-safety) over every source in
# the given folders, and no std::mutex / std::condition_variable there:
# clang's analysis sees only absl::Mutex with ABSL_GUARDED_BY fields.
#   scripts/thread_safety.sh engine [more folders]
# Run from anywhere; exit 1 on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG=${CLANG:-$(command -v clang++-14 || command -v clang++ || true)}
if [ -z "$CLANG" ]; then
  echo "thread_safety.sh: clang++ not found (Debian package clang)" >&2
  exit 1
fi
status=0
if grep -rnE 'std::(mutex|condition_variable|lock_guard|unique_lock)\b' \
    --include='*.cc' --include='*.h' "$@"; then
  echo "thread_safety.sh: use absl::Mutex (clang's analysis ignores std::mutex)" >&2
  status=1
fi
# The defines the build compiles cpp-httplib's header with (its TLS client).
# shellcheck disable=SC2046  # one word per flag
# CUDA sources need the toolkit's headers and hold no locks.
find "$@" -name '*.cc' -not -path '*/cuda/*' -print0 |
  xargs -0 -n1 -P"$(nproc)" "$CLANG" -std=c++17 -fsyntax-only \
    -Wthread-safety -Werror=thread-safety -Wno-unknown-warning-option -I. \
    $(pkg-config --cflags cpp-httplib) ||
  status=1
exit $status
