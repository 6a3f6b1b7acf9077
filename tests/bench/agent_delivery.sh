#!/usr/bin/env bash
# How many correlated samples `tracecorr agent` gets read in time by one agent
# that reads its socket every POLL ms: the reference fixture with
# --socket-poll-ms 20 and 100 (EDOT Java polls every 20 ms) and THREADS busy
# threads, sampled by the BPF reader at 1 kHz per CPU. READ_MAX=N makes the
# fixture read at most N datagrams per poll (an agent reading only what its
# queue holds); by default it reads until the queue is empty, as EDOT Java
# does. Numbers for BENCHMARKS.md, never a pass/fail.
#
#   tests/bench/agent_delivery.sh [SECONDS] [PERSONALITY] [SAMPLES_DELAY_MS]
#
# Env: TRACECORR_BUILD (default: build), POLLS (default "20 100"),
# THREADS (default "4"), READ_MAX (default 0), READER (default bpf).
# applied% = what the fixture recorded (its journal) / correlated;
# bound = the summary's capacity_bound (what any sender could have had read in
# time had the agent read only what its queue holds, 11 per poll); of-bound% =
# read in time / bound.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${TRACECORR_BUILD:-build}
seconds=${1:-10}
personality=${2:-spec}
delay=${3:-1000}
polls=${POLLS:-20 100}
threads_list=${THREADS:-4}
read_max=${READ_MAX:-0}
reader=${READER:-bpf}
fixture="$build/fixtures/x86_64/reference/tracecorr-fixture"
tracecorr="$build/bin/tracecorr"
[ -x "$fixture" ] && [ -x "$tracecorr" ] || { echo "build first ($fixture, $tracecorr)" >&2; exit 2; }

echo "# $tracecorr agent --reader $reader --frequency 1000 --duration $seconds --personality $personality --samples-delay-ms $delay"
echo "# fixture --socket-read-max $read_max; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), net.unix.max_dgram_qlen=$(cat /proc/sys/net/unix/max_dgram_qlen)"
printf '%-5s %-7s %9s %9s %8s %6s %7s %8s %9s %8s %8s %8s %9s %8s %9s\n' poll threads correlated delivered in_time late unconf expired recorded unknown applied% bound of-bound% messages wall_s
for poll in $polls; do
  for threads in $threads_list; do
    work=$(mktemp -d)
    ELASTIC_OTEL_UNIVERSAL_PROFILING_INTEGRATION_ENABLED=true \
    ELASTIC_OTEL_UNIVERSAL_PROFILING_INTEGRATION_SOCKET_DIR="$work" \
    TRACECORR_FIXTURE_JOURNAL="$work/journal" \
      "$fixture" --threads "$threads" --socket-poll-ms "$poll" --socket-read-max "$read_max" >"$work/out" 2>&1 &
    fx=$!
    for _ in $(seq 400); do grep -q '"ready"' "$work/journal" 2>/dev/null && break; sleep 0.05; done
    start=$(date +%s.%N)
    "$tracecorr" agent --pid "$fx" --reader "$reader" --frequency 1000 --duration "$seconds" \
      --personality "$personality" --samples-delay-ms "$delay" --quiet --json "$work/summary.json" || true
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    sleep 0.3  # the fixture's last poll
    kill "$fx" 2>/dev/null; wait "$fx" 2>/dev/null || true
    /usr/bin/python3 - "$work" "$poll" "$threads" "$wall" <<'PY'
import json, sys
from collections import Counter
work, poll, threads, wall = sys.argv[1:]
p = json.load(open(f"{work}/summary.json"))["processes"][0]
d = p["delivery"]
journal = Counter()
for line in open(f"{work}/journal"):
    e = json.loads(line)
    if e.get("event") == "message" and e.get("kind") == "correlation":
        journal[e["outcome"]] += e["count"]
corr = p["correlated"]
dropped = d.get("dropped", {})
expired = dropped.get("expired", dropped.get("eagain", {})).get("samples", 0)
bound = d.get("capacity_bound", {}).get("samples", corr)
in_time = d["read_in_time"]["samples"]
print(f"{poll:<5} {threads:<7} {corr:9d} {d['delivered']['samples']:9d} {in_time:8d} {d['late']['samples']:6d} "
      f"{d['unconfirmed']['samples']:7d} {expired:8d} {journal['recorded']:9d} {journal['unknown_transaction']:8d} "
      f"{100.0 * journal['recorded'] / corr if corr else 0:7.2f}% {bound:8d} {100.0 * in_time / bound if bound else 0:8.2f}% "
      f"{d['delivered']['messages']:8d} {float(wall):9.2f}")
PY
    rm -rf "$work"
  done
done
