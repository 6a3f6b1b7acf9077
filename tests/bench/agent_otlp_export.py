#!/usr/bin/python3
"""What exporting OTLP profiles costs `tracecorr agent` (issue 27): the same run with and without
`--otlp-endpoint`, paired and alternated, against the OTEP 4947 reference writer (tlsdesc, THREADS workers
burning), exporting over gRPC to tracecorr's own receiver in this process. Prints, per run, the agent's CPU
seconds (user + sys, from wait4) and its peak RSS, the samples it took and what it exported.

    TRACECORR_BUILD=build /usr/bin/python3 tests/bench/agent_otlp_export.py [--runs 3] [--duration 10]
        [--frequency 999] [--reader bpf] [--threads 4]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("TRACECORR_BUILD", REPO / "build"))
sys.path.insert(0, str(REPO / "python"))
from tracecorr.profiles import ProfilesReceiver  # noqa: E402

WRITER = BUILD / "fixtures" / "x86_64" / "otel_thread_context" / "reference" / "tlsdesc" / "otel-tctx-writer"


def run_agent(pid: int, args: argparse.Namespace, export: list[str]) -> dict:
    command = [str(BUILD / "bin" / "tracecorr"), "agent", "--pid", str(pid), "--reader", args.reader, "--duration",
               str(args.duration), "--frequency", str(args.frequency), "--quiet", "--json", "-", *export]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")})
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    summary = json.loads(out)
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_mb": usage.ru_maxrss / 1024,
            "samples": summary["totals"]["samples"], "export": summary.get("otlp_export")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--frequency", type=int, default=999)
    parser.add_argument("--reader", default="bpf")
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    writer = subprocess.Popen([str(WRITER), "--threads", str(args.threads), "--hold", "--busy-percent", "100"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    results: dict[str, list[dict]] = {"without": [], "with": []}
    try:
        with ProfilesReceiver("grpc") as receiver:
            for _ in range(args.runs):
                results["without"].append(run_agent(writer.pid, args, []))
                results["with"].append(run_agent(writer.pid, args, ["--otlp-endpoint", receiver.endpoint]))
            received = receiver.counters()["samples"]
    finally:
        writer.kill()
        writer.wait()
    for name, runs in results.items():
        for r in runs:
            print(name, json.dumps(r))
        print(f"{name}: median cpu {statistics.median(r['cpu_s'] for r in runs):.3f} s, "
              f"median peak RSS {statistics.median(r['max_rss_mb'] for r in runs):.1f} MB, "
              f"median samples {statistics.median(r['samples'] for r in runs):.0f}")
    print("received by the receiver:", received, "exported (sum):",
          sum(r["export"]["samples_exported"] for r in results["with"]))


if __name__ == "__main__":
    main()
