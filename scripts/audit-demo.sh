#!/usr/bin/env bash
# The auditor's half of the README demo: the engine up (router, prefill and
# decode as processes) with the incident's fault, an auditor campaign of four
# tenants against it (verdict, coverage per detector, incidents naming
# whose data was read by whom), the raw rows and `verify`; then the same with
# the fault off and a clean verdict earned by coverage. Expects a build in
# build/ (scripts/demo.sh). KVCANARY_DEMO_REPORTS=DIR keeps the HTML reports.
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
  if [ -n "${KVCANARY_DEMO_REPORTS:-}" ]; then
    mkdir -p "$KVCANARY_DEMO_REPORTS"
    cp "$work"/*.html "$KVCANARY_DEMO_REPORTS"/ 2>/dev/null
  fi
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
  for _ in $(seq 1 50); do
    grep -q '^trace-token-file ' "$work/up.out" && break
    sleep 0.1
  done
  trace_token_file=$(awk '$1 == "trace-token-file" {print $2}' "$work/up.out")
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
audit() {  # $1: db, then extra auditor flags
  local db="$1"
  shift
  "$bin/kvcanary-auditor" probe --target="$router" \
    --tenants="$work/tenants.json" --trace="$prefill,$decode" \
    --trace-token-file="$trace_token_file" --db="$db" \
    --max-probes=600 --duration=60 --concurrency=8 --quiet "$@"
}

echo "== auditor: the incident (admission-abort-lost), watermarks off =="
echo "   (the engine checks nothing; the auditor sees from outside and from"
echo "    the engine's trace stream)"
start_up --fault=admission-abort-lost --watermark=off --num-pages=64 \
  --access-log="$work/access.jsonl" "$@"
audit "$work/evidence.db" --html="$work/incident.html"
rc=$?
echo "auditor exit code: $rc (0 clean, 1 findings, 2 error, 3 inconclusive)"
[ "$rc" -eq 1 ] || { echo "expected findings (exit 1)" >&2; exit 1; }
echo
echo "== the acceptance test the incident's launch lacked: accept =="
"$bin/kvcanary-auditor" accept --target="$router" \
  --tenants="$work/tenants.json" --db="$work/evidence.db" --load=3 --quiet \
  --junit="$work/accept.xml" | head -n 20
rc=${PIPESTATUS[0]}
echo "accept exit code: $rc; JUnit failures name the length:"
grep -B1 '<failure' "$work/accept.xml" |
  grep -o 'classname="kvcanary.accept.[a-z_]*" name="[^"]*"' | head -n 4
limit=$(curl -s -H "Authorization: Bearer sk-acme-demo" "$router/v1/models" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["max_prompt_tokens"])')
stop_up
[ "$rc" -eq 1 ] || { echo "expected accept to fail (exit 1)" >&2; exit 1; }
echo
echo "== were we already exposed? forensics on the router's access log =="
"$bin/kvcanary-auditor" forensics --log="$work/access.jsonl" --input-limit="$limit" \
  --db="$work/evidence.db" --calibration-target="$router" --quiet |
  grep -E "^forensics|^exposed|^refused|^ttft"
echo
echo
echo "== the evidence: raw rows behind the incidents, and the hash chain =="
"$bin/kvcanary-auditor" findings --db="$work/evidence.db" --rows \
  >"$work/rows.txt"
head -n 4 "$work/rows.txt"
echo "   ..."
tail -n 1 "$work/rows.txt"
"$bin/kvcanary-auditor" verify --db="$work/evidence.db" || exit 1
echo
echo "== auditor: the same campaign, fault off (watermarks enforce) =="
start_up "$@"
audit "$work/evidence.db" --html="$work/clean.html"
rc=$?
echo "auditor exit code: $rc"
stop_up
[ "$rc" -eq 0 ] || { echo "expected a clean campaign (exit 0)" >&2; exit 1; }
"$bin/kvcanary-auditor" verify --db="$work/evidence.db" || exit 1
