#!/usr/bin/env bash
# Installs the Debian 12 packages kvcanary needs, only those missing.
#   scripts/install-deps.sh demo   what scripts/demo.sh needs: the compiler,
#                                  the libraries the binaries link, curl and
#                                  python3 (the README's Dependencies table)
#   scripts/install-deps.sh [all]  that and what the tests need (GoogleTest,
#                                  Google Benchmark, Prometheus, clang,
#                                  Chromium, python3-jsonschema, …)
set -euo pipefail
demo_packages=(
  build-essential cmake ninja-build pkg-config
  libabsl-dev libre2-dev libisal-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev
  prometheus-cpp-dev nlohmann-json3-dev libcpp-httplib-dev libboost1.74-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev curl python3
)
test_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev prometheus clang-format clang
  chromium fonts-dejavu-core python3-jsonschema python3-regex openssl
)
case "${1:-all}" in
  demo) packages=("${demo_packages[@]}") ;;
  all) packages=("${demo_packages[@]}" "${test_packages[@]}") ;;
  *)
    echo "usage: $0 [demo|all]" >&2
    exit 2
    ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
