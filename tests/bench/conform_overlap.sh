#!/usr/bin/env bash
# Sessions overlap (issue 15): a full `tracecorr conform` on the reference with
# its sessions one after another (--jobs 1) and overlapped (--jobs 2 x CPUs,
# the default on a machine that is not already busy),
# alternated RUNS times. For each run: wall time, its longest session (from
# the "session NAME: done in S s" lines), their ratio, peak RSS and verdicts.
# Numbers for BENCHMARKS.md, never a pass/fail.
#
#   tests/bench/conform_overlap.sh [RUNS] [-- extra conform args]
#
# Env: TRACECORR_BUILD (default: build).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${TRACECORR_BUILD:-build}
runs=${1:-3}
shift $(( $# > 0 ? 1 : 0 ))
[ "${1:-}" = "--" ] && shift
fixture="$build/fixtures/x86_64/reference/tracecorr-fixture"
[ -x "$fixture" ] || { echo "no fixture at $fixture (build first)" >&2; exit 2; }

echo "# $build/bin/tracecorr conform [--jobs 1] $* -- $fixture"
echo "# $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$runs"); do
  for jobs in 1 $((2 * $(nproc))); do
    args=("$@" --jobs "$jobs")
    out=$(mktemp)
    start=$EPOCHREALTIME
    /usr/bin/time -f '%M' -o "$out.rss" "$build/bin/tracecorr" conform "${args[@]}" -- "$fixture" >"$out" 2>&1 && rc=0 || rc=$?
    end=$EPOCHREALTIME
    longest=$(grep -Eo 'done in [0-9.]+ s' "$out" | awk '{ if ($3 > m) m = $3 } END { print m + 0 }')
    awk -v a="$start" -v b="$end" -v l="$longest" -v j="$jobs" -v rss="$(tail -1 "$out.rss")" -v rc="$rc" \
        -v v="$(grep -Eo '[0-9]+ passed.*' "$out" | tail -1)" \
        'BEGIN { printf "run %s jobs=%-3s wall %6.2f s, longest session %5.2f s, ratio %.2f, peak RSS %s KiB, exit %d, %s\n", "'"$i"'", j, b - a, l, (b - a) / l, rss, rc, v }'
    rm -f "$out" "$out.rss"
  done
done
