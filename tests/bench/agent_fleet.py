#!/usr/bin/env python3
"""`tracecorr agent` against a fleet: N Elastic agents (the reference fixture,
T workload threads each, reading their socket every --poll-ms) and M OTEP 4947
writers (sampled, sent nothing), all named with --pid (never --all: other
processes on this host are not ours to send to). Numbers for BENCHMARKS.md,
never a pass/fail.

  tests/bench/agent_fleet.py [--build build] [--elastic 30] [--writers 10] [--threads 4]
                             [--busy-percent 2] [--seconds 10] [--frequencies 1000,99]
                             [--poll-ms 20] [--read-max 0]

The targets run at nice 19 (on a shared machine, others' work goes first)
and burn --busy-percent of each span: 160 threads at the fixtures' default 25 %
want 40 CPUs; at 2 %, about three.

Per frequency, one line: the agent's wall time for a --duration run, its CPU
time and peak RSS (wait4), what it correlated, and where it went by its
summary (read in time / late / unconfirmed / dropped) and by the agents' own
journals (recorded / unknown_transaction). *timely* = recorded / correlated.
The summary's timeline splits the wall time: sampling (ends at the duration
unless the loop's thread was kept from a CPU: *cpu wait*) and the final reads.
"""
import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ENABLED = "ELASTIC_OTEL_UNIVERSAL_PROFILING_INTEGRATION_ENABLED"
SOCKET_DIR = "ELASTIC_OTEL_UNIVERSAL_PROFILING_INTEGRATION_SOCKET_DIR"


def start(command, work, env_extra):
    work.mkdir(parents=True)
    command = ["nice", "-n", "19", *command]
    env = dict(os.environ, TMPDIR=str(work), TRACECORR_FIXTURE_JOURNAL=str(work / "journal.jsonl"), **env_extra)
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            process_group=0), work / "journal.jsonl"


def journal(path):
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def wait_ready(journals, seconds=60):
    deadline = time.monotonic() + seconds
    for j in journals:
        while not any(e["event"] == "ready" for e in journal(j)):
            if time.monotonic() > deadline:
                sys.exit(f"not ready: {j}")
            time.sleep(0.05)


def stop(processes):
    for p in processes:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in processes:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def run_agent(tracecorr, pids, args, out):
    cmd = [str(tracecorr), "agent", "--quiet", "--json", str(out), *args]
    for pid in pids:
        cmd += ["--pid", str(pid)]
    start_t = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start_t
    proc.returncode = os.waitstatus_to_exitcode(status)
    # 1: a named process gave nothing to correlate (a starved target at 99 Hz); the summary is written.
    if proc.returncode not in (0, 1) or not out.exists():
        sys.exit(f"agent exit {proc.returncode}: {proc.stderr.read().decode()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def one_run(a, frequency, root):
    build = Path(a.build)
    fixture = build / "fixtures/x86_64/reference/tracecorr-fixture"
    writer = build / "fixtures/x86_64/otel_thread_context/reference/tlsdesc/otel-tctx-writer"
    elastic, writers = [], []
    try:
        for i in range(a.elastic):
            args = [str(fixture), "--threads", str(a.threads), "--busy-percent", str(a.busy_percent),
                    "--socket-poll-ms", str(a.poll_ms)]
            if a.read_max:
                args += ["--socket-read-max", str(a.read_max)]
            d = root / f"elastic{i}"
            elastic.append(start(args, d, {SOCKET_DIR: str(d)}))
        for i in range(a.writers):
            writers.append(start([str(writer), "--threads", str(a.threads), "--busy-percent", str(a.busy_percent)],
                                 root / f"writer{i}", {}))
        wait_ready([j for _, j in elastic])
        out = root / "summary.json"
        wall, cpu, rss = run_agent(build / "bin/tracecorr", [p.pid for p, _ in elastic + writers],
                                   ["--frequency", str(frequency), "--duration", str(a.seconds)], out)
        time.sleep(0.5)  # the agents' last reads
    finally:
        stop([p for p, _ in elastic + writers])
    summary = json.loads(out.read_text())
    by_pid = {p["pid"]: p for p in summary["processes"]}
    totals = Counter()
    for proc, j in elastic:
        p = by_pid.get(proc.pid)
        if p is None:
            continue
        d = p["delivery"]
        totals["correlated"] += p["correlated"]
        totals["delivered"] += d["delivered"]["samples"]
        totals["in_time"] += d["read_in_time"]["samples"]
        totals["late"] += d["late"]["samples"]
        totals["unconfirmed"] += d["unconfirmed"]["samples"]
        totals["expired"] += d["dropped"]["expired"]["samples"]
        totals["dropped_other"] += d["dropped"]["queue_full"]["samples"] + d["dropped"]["unsendable"]["samples"]
        for e in journal(j):
            if e["event"] == "message" and e["kind"] == "correlation":
                totals[e["outcome"]] += e["count"]
    found = sum(1 for p, _ in elastic + writers if p.pid in by_pid)
    return found, wall, cpu, rss, totals, summary["totals"]["samples"], summary["timeline"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("TRACECORR_BUILD", "build"))
    ap.add_argument("--elastic", type=int, default=30)
    ap.add_argument("--writers", type=int, default=10)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--busy-percent", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--frequencies", default="1000,99")
    ap.add_argument("--poll-ms", type=int, default=20)
    ap.add_argument("--read-max", type=int, default=0)
    a = ap.parse_args()
    print(f"# {a.elastic} Elastic agents (reference fixture, --threads {a.threads}, --busy-percent {a.busy_percent}, "
          f"--socket-poll-ms {a.poll_ms}"
          f"{', --socket-read-max ' + str(a.read_max) if a.read_max else ''}) + {a.writers} OTEP 4947 writers, "
          f"tracecorr agent --pid x{a.elastic + a.writers} --duration {a.seconds:g}")
    print(f"# {os.cpu_count()} CPUs, load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print(f"{'Hz':>5} {'found':>5} {'wall s':>7} {'CPU s':>6} {'RSS MB':>6} {'samples':>8} {'correl.':>8} "
          f"{'in time':>8} {'late':>5} {'unconf':>6} {'expired':>7} {'recorded':>8} {'unknown':>7} {'timely%':>7} "
          f"{'sampling s':>10} {'final s':>7} {'cpu wait s':>10}")
    for f in [int(x) for x in a.frequencies.split(",")]:
        with tempfile.TemporaryDirectory(prefix="tcfleet-") as tmp:
            found, wall, cpu, rss, t, samples, timeline = one_run(a, f, Path(tmp))
        timely = 100.0 * t["recorded"] / t["correlated"] if t["correlated"] else 0.0
        print(f"{f:>5} {found:>5} {wall:>7.2f} {cpu:>6.2f} {rss:>6.1f} {samples:>8} {t['correlated']:>8} "
              f"{t['in_time']:>8} {t['late']:>5} {t['unconfirmed']:>6} {t['expired']:>7} {t['recorded']:>8} "
              f"{t['unknown_transaction']:>7} {timely:>6.2f}% {timeline['sampling_s']:>10.2f} "
              f"{timeline['final_reads_s']:>7.2f} {timeline['loop_waited_for_cpu_s']:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
