#!/usr/bin/env bash
# clang's thread-safety analysis (-Werror=thread-safety) over every source in
# the given folders, and no std::mutex / std::condition_variable there:
# clang's analysis sees only absl::Mutex with ABSL_GUARDED_BY fields.
#   scripts/thread_safety.sh FOLDER... [-- EXTRA_CLANG_FLAGS...]
# e.g. scripts/thread_safety.sh engine common auditor -- -Ibuild/auditor/generated
# (the auditor includes a header the build generates). Run from anywhere;
# relative paths are the repository's. Exit 1 on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG=${CLANG:-$(command -v clang++-14 || command -v clang++ || true)}
if [ -z "$CLANG" ]; then
  echo "thread_safety.sh: clang++ not found (Debian package clang)" >&2
  exit 1
fi
folders=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  folders+=("$1")
  shift
done
[ $# -gt 0 ] && shift  # the "--"
extra=("$@")
if [ ${#folders[@]} -eq 0 ]; then
  echo "usage: thread_safety.sh FOLDER... [-- CLANG_FLAGS...]" >&2
  exit 1
fi
status=0
if grep -rnE 'std::(mutex|recursive_mutex|shared_mutex|timed_mutex|condition_variable|condition_variable_any|lock_guard|unique_lock|scoped_lock|shared_lock)\b' \
    --include='*.cc' --include='*.h' "${folders[@]}"; then
  echo "thread_safety.sh: use absl::Mutex (clang's analysis ignores std::mutex)" >&2
  status=1
fi
# The defines the build compiles cpp-httplib's header with (its TLS client),
# and the build-time paths some programs are compiled with (any path parses).
# CUDA sources need the toolkit's headers and hold no locks.
# shellcheck disable=SC2046  # one word per flag
find "${folders[@]}" -name '*.cc' -not -path '*/cuda/*' -print0 |
  xargs -0 -n1 -P"$(nproc)" "$CLANG" -std=c++17 -fsyntax-only \
    -Wthread-safety -Werror=thread-safety -Wno-unknown-warning-option -I. \
    $(pkg-config --cflags cpp-httplib) -DKVCANARY_BIN_DIR='"bin"' \
    "${extra[@]}" ||
  status=1
exit $status
