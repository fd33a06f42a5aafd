#!/usr/bin/env bash
# The clean multi-tenant soak (issue 12): builds kvcanary-engine and
# kvcanary-soak, starts `kvcanary-engine up --watermark=detect` with 8
# tenants, drives it with kvcanary-soak, stops `up` with SIGTERM and exits
# with the soak's status (0: no violation, no leaked page, no 5xx, every
# over-limit prompt refused, flat memory; docs/soak.md). Not part of ctest
# or scripts/test.sh: the full run takes minutes.
#
#   scripts/soak.sh                      # 100,000 requests, 32 clients
#   REQUESTS=2000 scripts/soak.sh        # scaled down
#   scripts/soak.sh --seed=7             # other arguments go to kvcanary-soak
#
# Environment: REQUESTS (100000), CLIENTS (32), DISCONNECT_FRACTION (0.10),
# SEED (1), BUILD_DIR (build), NO_BUILD=1 to use the binaries as they are,
# ENGINE_FLAGS (more flags for `up`, e.g. "--num-pages=320"), SOAK_DIR (where
# the tenants file, up's output and soak.json go; default a new temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
if [[ "${NO_BUILD:-0}" != 1 ]]; then
  # scripts/build.sh's configuration, but only the two binaries run here
  # (and, in a new build directory, without the tests: no GoogleTest needed).
  first_build=()
  [ -f "$build_dir/CMakeCache.txt" ] || first_build=(-DKVCANARY_TESTS=OFF)
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${first_build[@]}" >/dev/null
  cmake --build "$build_dir" --target kvcanary-engine kvcanary-soak
fi
bin="$build_dir/bin"
dir="${SOAK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/kvcanary-soak.XXXXXX")}"
mkdir -p "$dir"

# 8 tenants; two of them capped at 4 concurrent requests, so 429 is exercised.
{
  echo '{"tenants": ['
  for t in 0 1 2 3 4 5 6 7; do
    limit=""
    [[ $t -ge 6 ]] && limit=', "max_concurrent_requests": 4'
    sep=","
    [[ $t -eq 7 ]] && sep=""
    echo "  {\"id\": \"soak-$t\", \"api_keys\": [\"sk-soak-$t\"]$limit}$sep"
  done
  echo ']}'
} >"$dir/tenants.json"

# shellcheck disable=SC2086  # ENGINE_FLAGS is a list of flags
"$bin/kvcanary-engine" up --port=0 --tenants="$dir/tenants.json" \
  --watermark=detect ${ENGINE_FLAGS:-} >"$dir/up.out" 2>"$dir/up.err" &
up_pid=$!
trap 'kill -TERM "$up_pid" 2>/dev/null || true' EXIT
# Ready once it has printed its URLs and the trace token line.
for _ in $(seq 600); do
  grep -q '^trace-token-file ' "$dir/up.out" && break
  if ! kill -0 "$up_pid" 2>/dev/null; then
    echo "soak: kvcanary-engine up exited; see $dir/up.err" >&2
    exit 2
  fi
  sleep 0.1
done
url() { awk -v role="$1" '$1 == role { print $2; exit }' "$dir/up.out"; }
router="$(url router)" prefill="$(url prefill)" decode="$(url decode)"
if [[ -z "$router" || -z "$prefill" || -z "$decode" ]]; then
  echo "soak: no URLs from kvcanary-engine up; see $dir/up.out" >&2
  exit 2
fi

status=0
"$bin/kvcanary-soak" --target="$router" --prefill="$prefill" \
  --decode="$decode" --up-pid="$up_pid" --tenants="$dir/tenants.json" \
  --requests="${REQUESTS:-100000}" --clients="${CLIENTS:-32}" \
  --disconnect-fraction="${DISCONNECT_FRACTION:-0.10}" --seed="${SEED:-1}" \
  --json="$dir/soak.json" "$@" || status=$?

kill -TERM "$up_pid"
wait "$up_pid" || true
trap - EXIT
# A restart during the soak is a failure the soak reports; show its lines.
grep -E '^(exited|restarted) ' "$dir/up.out" || true
echo "details: $dir/soak.json, $dir/up.out, $dir/up.err"
exit "$status"
