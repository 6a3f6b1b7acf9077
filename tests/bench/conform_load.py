#!/usr/bin/python3
"""False failures under load: conformance runs of conforming agents, several at
once, beside a CPU hog (what a shared CI runner sees). Numbers for
BENCHMARKS.md; exits 1 when a conforming agent was failed.

    tests/bench/conform_load.py [--runs 21] [--at-once 3] [--hog "stress-ng --cpu 2"] [--no-hog]

Each run judges one of the reference variants (conform_support.reference_variants:
the reference, its socket drained every 200 ms, 5 s export batches, no span
flags, the warning in other words), round robin. A run counts as
  pass           exit 0 and every verdict a pass on evidence (TLS-06 may skip)
  error          exit 3 and no fail: tracecorr said it could not tell (figures in the reason)
  FALSE FAILURE  anything else (a fail or warn verdict, exit 1)
Env: TRACECORR_BUILD (default: build/).
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "py"))
import conform_support as cs  # noqa: E402


def classify(run: cs.ConformRun) -> tuple[str, list[str]]:
    problems = cs.judgement_problems(run)
    if not problems:
        return "pass", []
    verdicts = run.verdicts() if run.report else {}
    if run.returncode == cs.EXIT_ENVIRONMENT and not any(v in ("fail", "warn") for v in verdicts.values()):
        return "error", problems
    return "FALSE FAILURE", problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--at-once", type=int, default=3)
    ap.add_argument("--hog", default="stress-ng --cpu 2 --quiet")
    ap.add_argument("--no-hog", action="store_true")
    args = ap.parse_args()

    variants = cs.reference_variants("x86_64")
    if not cs.TRACECORR.exists() or not Path(variants["reference"][0]).exists():
        print(f"build first: no tracecorr or fixtures under {cs.BUILD}", file=sys.stderr)
        return 2
    names = list(variants)
    plan = [names[i % len(names)] for i in range(args.runs)]
    print(f"# {args.runs} conform runs, {args.at_once} at once, beside: {'nothing' if args.no_hog else args.hog}")
    print(f"# {os.cpu_count()} CPUs, load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")

    hog = None
    if not args.no_hog:
        hog = subprocess.Popen(shlex.split(args.hog), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    out = Path(tempfile.mkdtemp(prefix="tracecorr-load-"))
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=args.at_once) as pool:
            futures = [(i, n, pool.submit(cs.run_conform, variants[n], out_dir=out / f"{i:02d}-{n}"))
                       for i, n in enumerate(plan)]
            results = [(i, n, f.result()) for i, n, f in futures]
    finally:
        if hog is not None:
            os.killpg(hog.pid, signal.SIGTERM)  # the hog's own process group (start_new_session)
            hog.wait()
    wall = time.monotonic() - started

    counts = {"pass": 0, "error": 0, "FALSE FAILURE": 0}
    for i, name, run in results:
        kind, problems = classify(run)
        counts[kind] += 1
        print(f"run {i + 1:2d} {name:24s} {run.seconds:5.1f} s  exit {run.returncode}  {kind}")
        for p in problems[:6]:
            print(f"        {p[:400]}")
    print(f"# {counts['pass']} passed, {counts['error']} errors, {counts['FALSE FAILURE']} false failures "
          f"in {wall:.0f} s (reports under {out})")
    return 1 if counts["FALSE FAILURE"] else 0


if __name__ == "__main__":
    sys.exit(main())
