#!/usr/bin/env bash
# Configures and builds kvcanary into build/ (binaries in build/bin/).
# `--target T` (repeatable) builds only T and what it needs; every other
# argument goes to cmake's configure step, e.g. -DKVCANARY_CUDA=OFF or
# -DKVCANARY_TESTS=OFF. The configure options are the same for every caller
# (scripts/demo.sh, scripts/test.sh), so the builds share their objects.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target)
      targets+=(--target "$2")
      shift 2
      ;;
    --target=*)
      targets+=(--target "${1#--target=}")
      shift
      ;;
    *)
      cmake_args+=("$1")
      shift
      ;;
  esac
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >/dev/null
cmake --build build --parallel "$(nproc)" "${targets[@]}"
