#!/usr/bin/env bash
# The auditor's half of the README demo: the engine up (router, prefill and
# decode as processes) with the incident's fault, an auditor campaign of four
# tenants against it, the findings table and `verify`; then the same with the
# fault off and a clean result. Expects a build in build/ (scripts/demo.sh).
# Extra arguments go to `kvcanary-engine up` (e.g. --model/--tokenizer).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
work="$(mktemp -d /tmp/kvcanary-audit-demo.XXXXXX)"
cat >"$work/tenants.json" <<'JSON'
{"tenants": [
  {"id": "acme", "api_keys": ["sk-acme-demo"]},
  {"id": "globex", "api_keys": ["sk-globex-demo"]},
  {"id": "initech", "api_keys": ["sk-initech-demo"]},
  {"id": "umbrella", "api_keys": ["sk-umbrella-demo"]}]}
JSON
up_pid=""
cleanup() {
  [ -n "$up_pid" ] && kill "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# Starts `up` with the given flags; sets router, prefill, decode.
start_up() {
  "$bin/kvcanary-engine" up --port=0 --tenants="$work/tenants.json" "$@" \
    >"$work/up.out" 2>"$work/up.err" &
  up_pid=$!
  for _ in $(seq 1 300); do
    [ "$(grep -c http "$work/up.out" 2>/dev/null)" -ge 3 ] && break
    sleep 0.1
  done
  router=$(awk '$1 == "router" {print $2}' "$work/up.out")
  prefill=$(awk '$1 == "prefill" {print $2}' "$work/up.out")
  decode=$(awk '$1 == "decode" {print $2}' "$work/up.out")
  if [ -z "$router" ] || [ -z "$decode" ]; then
    echo "kvcanary-engine up did not start:" >&2
    cat "$work/up.err" >&2
    exit 1
  fi
}
stop_up() {
  kill "$up_pid" 2>/dev/null
  wait "$up_pid" 2>/dev/null
  up_pid=""
}
audit() {  # $1: db
  "$bin/kvcanary-auditor" probe --target="$router" \
    --tenants="$work/tenants.json" --trace="$prefill,$decode" --db="$1" \
    --max-probes=300 --duration=30 --concurrency=8 --quiet
}

echo "== auditor: the incident (admission-abort-lost), watermarks off =="
echo "   (the engine checks nothing; the auditor sees from outside and from"
echo "    the engine's trace stream)"
start_up --fault=admission-abort-lost --watermark=off --num-pages=64 "$@"
audit "$work/evidence.db"
rc=$?
echo "auditor exit code: $rc (0 clean, 1 findings, 2 error)"
stop_up
[ "$rc" -eq 1 ] || { echo "expected findings (exit 1)" >&2; exit 1; }
echo
echo "== the evidence: findings table and hash-chain verification =="
"$bin/kvcanary-auditor" findings --db="$work/evidence.db" >"$work/findings.txt"
head -n 6 "$work/findings.txt"
echo "   ..."
sed -n '/ findings/,$p' "$work/findings.txt"
"$bin/kvcanary-auditor" verify --db="$work/evidence.db" || exit 1
echo
echo "== auditor: the same campaign, fault off (watermarks enforce) =="
start_up "$@"
audit "$work/evidence.db"
rc=$?
echo "auditor exit code: $rc"
stop_up
[ "$rc" -eq 0 ] || { echo "expected a clean campaign (exit 0)" >&2; exit 1; }
"$bin/kvcanary-auditor" verify --db="$work/evidence.db" || exit 1
