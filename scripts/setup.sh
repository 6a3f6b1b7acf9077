#!/usr/bin/env bash
# Installs everything tracecorr needs on Debian 12 (run as root), then builds it.
# Idempotent: a second run installs nothing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev libcap-dev
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libmicrohttpd-dev libprotobuf-dev protobuf-compiler libxxhash-dev
  libgrpc++-dev protobuf-compiler-grpc  # OTLP profiles over gRPC (simulator/src/profiles)
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-pytest python3-jsonschema python3-pip python3-setuptools
  gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user qemu-system-arm cpio
  musl-tools  # OTEP 4947's musl fixture models (fixtures/otel_thread_context)
  time  # tests/bench/conform_walltime.sh (peak RSS)
  chromium  # tests/py/test_html_report.py and scripts/report-screenshot.sh render the HTML report
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# musl for arm64 (the cross-built musl fixture models): a foreign-architecture package.
if [ "${TRACECORR_SKIP_ARM64:-0}" != 1 ] && ! dpkg-query -W -f='${Status}' musl-dev:arm64 2>/dev/null | grep -q "install ok installed"; then
  echo "setup: installing musl-dev:arm64"
  export DEBIAN_FRONTEND=noninteractive
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends musl-dev:arm64 >/dev/null
fi

# ccache, when the machine has it, makes rebuilds in fresh clones and worktrees cheap.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE=/usr/bin/python3 "${launcher[@]}" >/dev/null
ninja -C build

# arm64: a sysroot and a pinned kernel from Debian's arm64 packages, then
# tracecorr cross-built for the full-system test (tests/py/test_arm64_system.py).
if [ "${TRACECORR_SKIP_ARM64:-0}" != 1 ]; then
  bash scripts/arm64/prepare.sh
  bash scripts/arm64/build-tracecorr.sh
fi
