#!/usr/bin/env bash
# A longer libFuzzer run of every decoder harness (tests/fuzz/): runs,
# executions per second, coverage and crashes per fuzzer, as a Markdown table
# for BENCHMARKS.md. Never a pass/fail of the test command (that is the short
# run in tests/py/test_fuzz_smoke.py); exits 1 if any fuzzer found something.
#
#   tests/bench/fuzz_run.sh [SECONDS_PER_FUZZER] [FUZZER...]
#
# Env: TRACECORR_BUILD (default: build). Each fuzzer starts from the seed
# corpus in tests/fuzz/corpus/<name> and grows a scratch corpus in a temporary
# directory (the repo's corpus is not touched); findings are kept in
# $TRACECORR_FUZZ_OUT (default: a temporary directory, printed).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${TRACECORR_BUILD:-build}
seconds=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
fuzzers=("$@")
((${#fuzzers[@]})) || fuzzers=(message storage_record maps elf otlp_protobuf otlp_json gzip process_context otlp_profiles json_lines)
out=${TRACECORR_FUZZ_OUT:-$(mktemp -d /tmp/tracecorr-fuzz-XXXXXX)}

echo "# $seconds s per fuzzer, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); findings in $out"
echo
echo "| fuzzer | runs | execs/s | coverage (edges) | corpus (seed → end) | crashes |"
echo "|---|---:|---:|---:|---|---:|"
found=0
for name in "${fuzzers[@]}"; do
  binary="$build/fuzz/bin/fuzz_$name"
  [ -x "$binary" ] || { echo "no $binary (build with clang installed: TRACECORR_FUZZ=ON)" >&2; exit 2; }
  work="$out/$name"
  mkdir -p "$work/corpus" "$work/artifacts"
  seeds=$(find "tests/fuzz/corpus/$name" -type f | wc -l)
  log="$work/log"
  rc=0
  nice "$binary" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" "tests/fuzz/corpus/$name" \
    >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  execs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corpus=$(find "$work/corpus" -type f | wc -l)
  crashes=$(find "$work/artifacts" -type f | wc -l)
  (( rc == 0 && crashes == 0 )) || found=1
  echo "| fuzz_$name | ${runs:-?} | ${execs:-?} | ${cov:-?} | $seeds → $((seeds + corpus)) | $crashes$( ((rc)) && echo " (exit $rc)") |"
done
exit $found
