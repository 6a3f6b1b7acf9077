#!/usr/bin/env bash
# The slow-start variant (the Elastic reference burning START_CPU_MS of its own
# CPU before it loads its library, as a JVM does) judged by full conform runs
# beside `stress-ng --cpu STRESS_CPUS`: each run must pass, or answer error
# with the figures, never fail (discovery waits on the target's progress).
# Numbers for BENCHMARKS.md, never a pass/fail of the test command.
#
#   tests/bench/slow_start_stress.sh [RUNS]
#
# Env: TRACECORR_BUILD (default: build), START_CPU_MS (default 8000),
# STRESS_CPUS (default 4).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${TRACECORR_BUILD:-build}
runs=${1:-5}
start_cpu_ms=${START_CPU_MS:-8000}
stress_cpus=${STRESS_CPUS:-4}
fixture="$build/fixtures/x86_64/reference/tracecorr-fixture"
[ -x "$fixture" ] || { echo "no fixture at $fixture (build first)" >&2; exit 2; }
command -v stress-ng >/dev/null || { echo "stress-ng is not installed (apt-get install stress-ng)" >&2; exit 2; }

stress-ng --cpu "$stress_cpus" --timeout 3600s --quiet &
stress=$!
trap 'kill "$stress" 2>/dev/null; wait "$stress" 2>/dev/null || true' EXIT
sleep 2

cmd=("$build/bin/tracecorr" conform -- "$fixture" --start-cpu-ms "$start_cpu_ms")
echo "# ${cmd[*]}"
echo "# beside stress-ng --cpu $stress_cpus; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$runs"); do
  out=$(mktemp)
  start=$EPOCHREALTIME
  "${cmd[@]}" >"$out" 2>&1 && rc=0 || rc=$?
  end=$EPOCHREALTIME
  printf 'run %d: %.1f s, exit %d, %s\n' "$i" "$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" "$rc" \
    "$(grep -Eo '[0-9]+ passed.*' "$out" | tail -1)"
  # How long each session's discovery took, and every verdict that is not a pass.
  grep -E 'session [a-z-]+: (judging|done)' "$out" | sed 's/^/    /' | head -12 || true
  grep -E '^\s+(✘|E|!) ' "$out" | sed 's/^/    /' | head -20 || true
  rm -f "$out"
done
