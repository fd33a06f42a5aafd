#!/usr/bin/env bash
# The README demo: installs what is missing, builds, and runs the engine demo
# on the embedded default model (and on stories260K where ../shared/models is
# present, with a byte-for-byte check against the reference output).
# It installs and builds only what the demo runs: the packages of
# `install-deps.sh demo`, and kvcanary-engine and kvcanary-auditor. A first
# build is configured without the tests (-DKVCANARY_TESTS=OFF: no GoogleTest
# needed); an existing one keeps its settings. scripts/test.sh then builds
# the rest into the same build/ without recompiling any of it.
# Arguments go to cmake's configure step (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh demo
first_build=()
[ -f build/CMakeCache.txt ] || first_build=(-DKVCANARY_TESTS=OFF)
scripts/build.sh --target kvcanary-engine --target kvcanary-auditor \
  "${first_build[@]}" "$@" >/dev/null
bin=build/bin
echo "== generate, embedded default model (synthetic weights: the text is noise) =="
"$bin/kvcanary-engine" generate --prompt "Once upon a time" --max-tokens 24 --echo
echo
"$bin/kvcanary-engine" demo
echo
scripts/audit-demo.sh
shared="${KVCANARY_SHARED_DIR:-../shared}"
if [ -f "$shared/models/stories260K.bin" ]; then
  echo
  echo "== stories260K (real weights) =="
  "$bin/kvcanary-engine" generate --model "$shared/models/stories260K.bin" \
    --tokenizer "$shared/models/tok512.bin" --prompt "Once upon a time" \
    --max-tokens 252 --echo | tee /tmp/kvcanary-demo-golden.txt
  if cmp -s /tmp/kvcanary-demo-golden.txt \
    "$shared/golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt"; then
    echo "(identical, byte for byte, to the reference implementation's output)"
  else
    echo "MISMATCH with $shared/golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt" >&2
    exit 1
  fi
  "$bin/kvcanary-engine" demo --model "$shared/models/stories260K.bin" \
    --tokenizer "$shared/models/tok512.bin" | tail -n +2
  echo
  echo "== the auditor's story again, on stories260K =="
  scripts/audit-demo.sh --model="$shared/models/stories260K.bin" \
    --tokenizer="$shared/models/tok512.bin"
fi
