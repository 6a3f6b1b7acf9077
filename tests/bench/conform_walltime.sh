#!/usr/bin/env bash
# Wall time (and peak RSS) of full `tracecorr conform` runs against the
# reference fixture: numbers for BENCHMARKS.md, never a pass/fail.
#
#   tests/bench/conform_walltime.sh [RUNS] [-- extra conform args]
#
# Env: TRACECORR_BUILD (default: build), ARCH=x86_64|arm64 (arm64 runs the
# fixture under qemu-aarch64 with the gdbstub, as the arm64 conform test does).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${TRACECORR_BUILD:-build}
runs=${1:-5}
shift $(( $# > 0 ? 1 : 0 ))
[ "${1:-}" = "--" ] && shift
arch=${ARCH:-x86_64}
fixture="$build/fixtures/$arch/reference/tracecorr-fixture"
[ -x "$fixture" ] || { echo "no fixture at $fixture (build first)" >&2; exit 2; }

cmd=("$build/bin/tracecorr" conform "$@")
if [ "$arch" = arm64 ]; then
  port=$(( 20000 + RANDOM % 20000 ))
  cmd+=(--gdbstub "127.0.0.1:$port" -- qemu-aarch64 -L /usr/aarch64-linux-gnu -g "$port" "$fixture")
else
  cmd+=(-- "$fixture")
fi

echo "# ${cmd[*]}"
echo "# $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
times=()
for i in $(seq "$runs"); do
  out=$(mktemp)
  start=$EPOCHREALTIME
  /usr/bin/time -f '%M' -o "$out.rss" "${cmd[@]}" >"$out" 2>&1 && rc=0 || rc=$?
  end=$EPOCHREALTIME
  t=$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')
  times+=("$t")
  printf 'run %d: %.2f s, exit %d, peak RSS %s KiB, %s\n' "$i" "$t" "$rc" "$(tail -1 "$out.rss")" \
    "$(grep -Eo '[0-9]+ passed.*' "$out" | tail -1)"
  # A run that did not pass says why (the failing and erroring requirements, with their reasons).
  [ "$rc" = 0 ] || grep -A3 -E '(✘|error)' "$out" | head -20 || true
  rm -f "$out" "$out.rss"
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "min %.2f s, median %.2f s, max %.2f s over %d runs\n", a[1], a[int((NR+1)/2)], a[NR], NR}'
