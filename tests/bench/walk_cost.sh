#!/usr/bin/env bash
# What the V8 context-map walk costs the BPF sampler per sample: the program's
# kernel run time per run (kernel.bpf_stats_enabled: run_time_ns / run_cnt,
# from bpftool) while `tracecorr agent --reader bpf` samples the Node.js C
# fixture (njs-v8-writer: each record reached from the TLS struct through a
# V8-shaped frame, table, bucket chain of two hops and wrapper), next to the
# same while it samples the OTEP 4947 reference writer (one pointer in TLS to
# the record). Both with --hold, two threads busy almost throughout, records
# and stacks alike; the
# configurations alternate in ROUNDS rounds of SECONDS each, so a ratio is of
# one run. Numbers for BENCHMARKS.md, never a pass/fail. Root.
#
#   tests/bench/walk_cost.sh [SECONDS=6] [ROUNDS=3]
#
# Env: TRACECORR_BUILD (default: build), HZ (default 1000).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${TRACECORR_BUILD:-build}
seconds=${1:-6}
rounds=${2:-3}
hz=${HZ:-1000}
tracecorr=$build/bin/tracecorr
njs=$build/fixtures/x86_64/otel_nodejs_thread_context/reference/njs-v8-writer
tctx=$build/fixtures/x86_64/otel_thread_context/reference/tlsdesc/otel-tctx-writer
for f in "$tracecorr" "$njs" "$tctx"; do [ -x "$f" ] || { echo "build first ($f)" >&2; exit 2; }; done
command -v bpftool >/dev/null || { echo "bpftool is needed (apt-get install bpftool)" >&2; exit 2; }

was=$(sysctl -n kernel.bpf_stats_enabled)
pids=()
cleanup() {
  sysctl -q -w kernel.bpf_stats_enabled="$was"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
sysctl -q -w kernel.bpf_stats_enabled=1

# run_time_ns and run_cnt of the agent's tc_sample program, read while it runs.
program_stats() {
  bpftool -j prog show name tc_sample 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; p=json.load(sys.stdin); p=p if isinstance(p,list) else [p]; print(sum(x.get("run_time_ns",0) for x in p), sum(x.get("run_cnt",0) for x in p))'
}

# One configuration: the writer started, the agent over it, the program's
# figures read near the run's end; f, the share of runs that hit a tracked
# thread, from the agent's own sample count; per tracked sample as in
# BENCHMARKS.md's BPF sampler table: (T - (1 - f) * MISS_NS) / f.
measure() {
  local name=$1; shift
  "$@" >/dev/null 2>&1 &
  local writer=$!
  pids+=("$writer")
  sleep 1
  local summary; summary=$(mktemp)
  "$tracecorr" agent --pid "$writer" --reader bpf --frequency "$hz" --duration "$seconds" --quiet --json "$summary" \
    >/dev/null 2>&1 &
  local agent=$!
  local read_at; read_at=$(echo "$seconds - 0.5" | bc -l)
  sleep "$read_at"
  local ns runs
  read -r ns runs < <(program_stats)
  wait "$agent" || true
  kill "$writer" 2>/dev/null || true
  wait "$writer" 2>/dev/null || true
  local samples
  samples=$(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(p.get("samples",0) for p in d["processes"]))' "$summary")
  rm -f "$summary"
  /usr/bin/python3 - "$name" "$round" "$runs" "$ns" "$samples" "$seconds" "$read_at" "$miss" <<'PY'
import sys
name, rnd, runs, ns, samples, seconds, read_at, miss = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
per_run = ns / runs if runs else 0.0
f = min(1.0, (samples / seconds) / (runs / read_at)) if runs else 0.0
tracked = (per_run - (1 - f) * miss) / f if f else 0.0
print(f"{name:<6} {rnd:>6} {int(runs):>10} {int(samples):>9} {per_run:>8.0f} {f:>6.3f} {tracked:>10.0f}")
PY
}

miss=${MISS_NS:-216}
echo "# $tracecorr agent --reader bpf --frequency $hz --duration $seconds; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); a pid-map miss taken as $miss ns (MISS_NS)"
printf '%-6s %6s %10s %9s %8s %6s %10s\n' reader round runs samples ns/run f ns/tracked
for round in $(seq 1 "$rounds"); do
  measure walk "$njs" --hold --threads 2 --span-ms 4000
  measure ptr "$tctx" --hold --threads 2 --busy-percent 100 --no-export
done
