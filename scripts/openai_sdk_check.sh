#!/usr/bin/env bash
# The official OpenAI Node SDK against `kvcanary-engine up`
# (tests/sdk/openai_sdk_check.mjs): installs the pinned `openai` package
# from npm into BUILD_DIR/sdk, starts a cluster on loopback port 0, runs
# the checks, and writes the SDK's requests to BUILD_DIR/sdk/transcript.json.
#   scripts/openai_sdk_check.sh BUILD_DIR
# Exits 77 (CTest's skip) with the reason when Node.js or npm is missing or
# the package cannot be installed (no registry); the recorded transcript's
# replay (OpenAiSdkTranscriptTest) runs either way.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$1" && pwd)"
for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is not installed; the SDK check needs Node.js and npm" >&2
    exit 77
  fi
done
work="$build/sdk"
mkdir -p "$work"
cp "$root/tests/sdk/package.json" "$root/tests/sdk/package-lock.json" \
  "$root/tests/sdk/openai_sdk_check.mjs" "$work/"
if ! (cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
        >npm.log 2>&1); then
  echo "SKIPPED: npm could not install the pinned openai package:" >&2
  tail -n 5 "$work/npm.log" >&2
  exit 77
fi
tmp="$(mktemp -d)"
cleanup() {
  if [[ -n "${up_pid:-}" ]]; then kill "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
printf '{"tenants": [{"id": "acme", "api_keys": ["sk-sdk"]}]}\n' >"$tmp/tenants.json"
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/secret"; echo >>"$tmp/secret")
mkfifo "$tmp/out"
"$build/bin/kvcanary-engine" up --port=0 --tenants="$tmp/tenants.json" \
  --internal_secret_file="$tmp/secret" >"$tmp/out" 2>"$tmp/up.log" &
up_pid=$!
exec 3<"$tmp/out"
# The first line names the router: "router URL ...".
read -r -t 60 line <&3 || { echo "up did not start:" >&2; cat "$tmp/up.log" >&2; exit 1; }
router="$(echo "$line" | cut -d' ' -f2)"
# Keep reading up's output so it never blocks on a full pipe.
cat <&3 >/dev/null &
node "$work/openai_sdk_check.mjs" "$router" sk-sdk "$work/transcript.json"
