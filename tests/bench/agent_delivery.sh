#!/usr/bin/env bash
# How many correlated samples `tracecorr agent` delivers to agents that drain
# their socket slowly: the reference fixture with --socket-poll-ms 10, 20 and
# 100 (EDOT Java polls every 20 ms) and 2..8 busy threads, sampled by the BPF
# reader at 1 kHz per CPU. Numbers for BENCHMARKS.md, never a pass/fail.
#
#   tests/bench/agent_delivery.sh [SECONDS] [PERSONALITY] [SAMPLES_DELAY_MS]
#
# Env: TRACECORR_BUILD (default: build), POLLS (default "10 20 100"),
# THREADS (default "2 4 8"), READER (default bpf).
# "arrived" is what the fixture's journal says it received (correlation
# messages it recorded, summed counts): the agent-side view of "delivered".
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${TRACECORR_BUILD:-build}
seconds=${1:-8}
personality=${2:-spec}
delay=${3:-1000}
polls=${POLLS:-10 20 100}
threads_list=${THREADS:-2 4 8}
reader=${READER:-bpf}
fixture="$build/fixtures/x86_64/reference/tracecorr-fixture"
tracecorr="$build/bin/tracecorr"
[ -x "$fixture" ] && [ -x "$tracecorr" ] || { echo "build first ($fixture, $tracecorr)" >&2; exit 2; }

echo "# $tracecorr agent --reader $reader --frequency 1000 --duration $seconds --personality $personality --samples-delay-ms $delay"
echo "# $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), net.unix.max_dgram_qlen=$(cat /proc/sys/net/unix/max_dgram_qlen)"
printf '%-5s %-7s %9s %9s %9s %7s %8s %8s %8s %9s %9s\n' poll threads correlated delivered arrived "deliv%" late expired qfull unsendable messages
for poll in $polls; do
  for threads in $threads_list; do
    work=$(mktemp -d)
    ELASTIC_OTEL_UNIVERSAL_PROFILING_INTEGRATION_ENABLED=true \
    ELASTIC_OTEL_UNIVERSAL_PROFILING_INTEGRATION_SOCKET_DIR="$work" \
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9 \
    TRACECORR_FIXTURE_JOURNAL="$work/journal" \
      "$fixture" --threads "$threads" --socket-poll-ms "$poll" >"$work/out" 2>&1 &
    fx=$!
    for _ in $(seq 200); do grep -q socket= "$work/out" 2>/dev/null && break; sleep 0.05; done
    "$tracecorr" agent --pid "$fx" --reader "$reader" --frequency 1000 --duration "$seconds" \
      --personality "$personality" --samples-delay-ms "$delay" --quiet --json "$work/summary.json" || true
    sleep 0.3  # the fixture's last poll
    kill "$fx" 2>/dev/null; wait "$fx" 2>/dev/null || true
    /usr/bin/python3 - "$work" "$poll" "$threads" <<'PY'
import json, sys
work, poll, threads = sys.argv[1:]
s = json.load(open(f"{work}/summary.json"))
t = s["totals"]
p = s["processes"][0] if s["processes"] else {}
d = p.get("delivery", {})
dropped = d.get("dropped", {})
arrived = 0
for line in open(f"{work}/journal"):
    e = json.loads(line)
    if e.get("event") == "message" and e.get("kind") == "correlation" and e.get("outcome") in (
            "recorded", "unknown_transaction", "transaction_full"):
        arrived += e.get("count", 0)
corr = t["correlated"]
pct = 100.0 * t["samples_sent"] / corr if corr else 0.0
g = lambda k: dropped.get(k, {}).get("samples", 0)
print(f"{poll:<5} {threads:<7} {corr:9d} {t['samples_sent']:9d} {arrived:9d} {pct:6.2f}% {t.get('samples_late', 0):8d} "
      f"{g('expired') + g('eagain'):8d} {g('queue_full'):8d} {t['samples_unsendable']:9d} {t['messages_sent']:9d}")
PY
    rm -rf "$work"
  done
done
