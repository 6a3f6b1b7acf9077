#!/usr/bin/env python3
"""What one `tracecorr inspect` of a hostile process costs (issue 29): bounded
by the kit, not by the target. Numbers for BENCHMARKS.md, never assertions.

1. A process mapping one OTEL_CTX memfd MAPPINGS times, every header leading
   to one PAYLOAD-byte payload (testdata/context_mappings): before, every
   mapping was read and decoded (400 x 1 MiB: 1.65 GB, 2000: std::bad_alloc).
2. The OTEP 4947 writer's key-outside-map mutant with THREADS threads, each
   record carrying a key index outside the key map: before, every record
   took a whole new snapshot (2000 threads: 41 to over 60 s). Beside it the
   reference writer, whose keys are all in the map: the same threads cost
   the same.

Each inspect runs as a child of this script; its wall time, CPU time (user +
system, ru_utime + ru_stime: the kit's own cost, which the machine's load
stretches into wall time) and peak RSS (ru_maxrss) are what is printed. The
2000-thread writers (idle threads wake every 5 ms) keep both CPUs of a small
machine busy by themselves: the load average is printed before and after.
Usage (root, from the repository):

    /usr/bin/python3 tests/bench/reader_bounds.py [--build build] [--runs 3] [--against OTHER_BUILD]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from pathlib import Path


def timed(argv: list[str]) -> tuple[float, int, str, float]:
    """(wall seconds, peak RSS in MiB, stdout, CPU seconds) of one run."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"{argv} exited {status}"
    return (time.monotonic() - started, usage.ru_maxrss // 1024, out.decode(errors="replace"),
            usage.ru_utime + usage.ru_stime)


def row(label: str, runs: list[tuple[float, int, str, float]]) -> None:
    walls = sorted(r[0] for r in runs)
    cpus = sorted(r[3] for r in runs)
    rss = max(r[1] for r in runs)
    print(f"| {label} | {walls[len(walls) // 2]:.2f} s (min {walls[0]:.2f}, max {walls[-1]:.2f}) | "
          f"{cpus[len(cpus) // 2]:.2f} s | {rss} MiB | {os.getloadavg()[0]:.1f} |")


def context_mappings(build: Path, cli: str, mappings: int, payload: int, runs: int) -> None:
    proc = subprocess.Popen([str(build / "testdata" / "context_mappings"), str(mappings), str(payload)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().startswith("ready")
        text = [timed([cli, "inspect", str(proc.pid)]) for _ in range(runs)]
        as_json = [timed([cli, "inspect", "--json", str(proc.pid)]) for _ in range(runs)]
        doc = json.loads(as_json[0][2])["otel-process-context"]
        label = f"{mappings} mappings x {payload >> 10} KiB payload"
        row(f"`inspect`, {label} (read {len(doc['mappings'])}, counted {doc['mappings_found']})", text)
        row(f"`inspect --json`, {label} ({len(as_json[0][2]) >> 10} KiB of output)", as_json)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def thread_records(build: Path, cli: str, threads: int, runs: int, mutant: str | None, against: str | None) -> None:
    """`mutant` "key-outside-map" (every record's key index outside the map), or None: the reference.
    `against`: another build's tracecorr, run in turn with this one against the same writer (a ratio
    measured in one run, under the same load)."""
    fixtures = build / "fixtures" / "x86_64" / "otel_thread_context"
    program = (fixtures / "mutants" / mutant if mutant else fixtures / "reference" / "tlsdesc") / "otel-tctx-writer"
    journal = Path(f"/tmp/tracecorr-bench-journal-{os.getpid()}.jsonl")
    journal.unlink(missing_ok=True)
    proc = subprocess.Popen([str(program), "--threads", str(threads), "--hold", "--busy-percent", "0"], stdout=subprocess.DEVNULL,
                            env=dict(os.environ, TRACECORR_FIXTURE_JOURNAL=str(journal)), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while '"event":"ready"' not in (journal.read_text() if journal.exists() else "").replace(" ", ""):
            assert time.monotonic() < deadline, "the writer never got ready"
            time.sleep(0.1)
        clis = {"": cli, " (other build)": against} if against else {"": cli}
        results = {name: [] for name in clis}
        texts = {name: [] for name in clis}
        for _ in range(runs):
            for name, one in clis.items():
                results[name].append(timed([one, "inspect", "--json", str(proc.pid)]))
                texts[name].append(timed([one, "inspect", str(proc.pid)]))
        doc = json.loads(results[""][0][2])["otel-thread-context"]
        missing = sum(1 for t in doc["threads"] if t["record"] and t["record"]["unknown_keys"])
        for name in clis:
            row(f"`inspect --json`{name}, {threads} threads, {missing} records with a key outside the map "
                f"(key map read {doc['process_context']['key_map_reads']}x)", results[name])
            row(f"`inspect`{name}, {threads} threads (as above, text)", texts[name])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        journal.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, default=Path("build"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another build directory whose tracecorr inspects the same "
                                                      "thread writers in turn with this one")
    a = parser.parse_args()
    cli = str((a.build / "bin" / "tracecorr").resolve())
    against = str((a.against / "bin" / "tracecorr").resolve()) if a.against else None
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| what | wall time (median of %d) | CPU time (median) | peak RSS | load after |" % a.runs)
    print("|---|---|---|---|---|")
    for mappings in (400, 2000):
        context_mappings(a.build, cli, mappings, 1 << 20, a.runs)
    thread_records(a.build, cli, 2000, a.runs, "key-outside-map", against)
    thread_records(a.build, cli, 2000, a.runs, None, against)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
