#!/usr/bin/env bash
# Configures and builds kvcanary into build/ (binaries in build/bin/).
# Extra arguments go to cmake's configure step, e.g. -DKVCANARY_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build --parallel "$(nproc)"
