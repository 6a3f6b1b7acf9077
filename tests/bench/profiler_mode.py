#!/usr/bin/python3
"""What a profiler-mode run costs (issue 27: at most 60 s and 300 MB): `tracecorr conform --profiler` over the
whole stage, the reference reader (`tracecorr agent --all --reader bpf`) as the profiler, RUNS times. Prints per
run the wall seconds of the conform process, its peak RSS (VmHWM, read from /proc while it runs: the last
reading before it exits), the largest peak RSS of any process of the tree (wait4: the agent, the writers), the
CPU seconds of the whole tree (wait4, children included), the stage members, the samples taken in, and the
verdicts.

Acts on every process of the host (the agent samples them all): run it on an otherwise idle machine.

    TRACECORR_BUILD=build /usr/bin/python3 tests/bench/profiler_mode.py [--runs 3] [--frequency 199]
        [--only IDS] [--protocol IDS]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("TRACECORR_BUILD", REPO / "build"))
TRACECORR = BUILD / "bin" / "tracecorr"


def vm_hwm_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class PeakWatch(threading.Thread):
    """The conform process's VmHWM, every 100 ms until it exits."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.conform_kb = pid, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.conform_kb = max(self.conform_kb, vm_hwm_kb(self.pid) or 0)
            time.sleep(0.1)


def one_run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [str(TRACECORR), "conform", "--profiler", "--profiler-protocol", "grpc", "--json", str(report),
                   "--quiet"]
        if args.only:
            command += ["--only", args.only]
        if args.protocol:
            command += ["--protocol", args.protocol]
        command += ["--", str(TRACECORR), "agent", "--all", "--reader", "bpf", "--frequency", str(args.frequency),
                    "--quiet"]
        began = time.monotonic()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        watch = PeakWatch(proc.pid)
        watch.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - began
        watch.done.set()
        watch.join()
        result = json.loads(report.read_text())
    verdicts: dict[str, int] = {}
    for r in result["results"]:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    return {"exit": os.waitstatus_to_exitcode(status), "wall_s": wall, "conform_rss_mb": watch.conform_kb / 1024,
            "tree_max_rss_mb": usage.ru_maxrss / 1024, "tree_cpu_s": usage.ru_utime + usage.ru_stime,
            "members": result["counters"].get("stage_members", 0), "samples": result["counters"]["profile_samples"],
            "verdicts": verdicts}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--frequency", type=int, default=199)
    parser.add_argument("--only", default="")
    parser.add_argument("--protocol", default="")
    args = parser.parse_args()
    runs = [one_run(args) for _ in range(args.runs)]
    for i, r in enumerate(runs, 1):
        print(f"run {i}: exit {r['exit']}, {r['wall_s']:.1f} s wall, conform peak RSS {r['conform_rss_mb']:.1f} MB, "
              f"largest in its tree {r['tree_max_rss_mb']:.1f} MB, tree CPU {r['tree_cpu_s']:.1f} s, {r['members']} members, "
              f"{r['samples']} samples, verdicts {r['verdicts']}")
    for key in ("wall_s", "conform_rss_mb", "tree_max_rss_mb", "tree_cpu_s"):
        values = [r[key] for r in runs]
        print(f"{key}: median {statistics.median(values):.1f}, max {max(values):.1f}")


if __name__ == "__main__":
    main()
