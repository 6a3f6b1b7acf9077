"""Discovery judged by the target's progress, not the clock (issue 25,
Deliver 3). A target that wants a CPU and seldom gets one is waited for; when
the wall-clock ceiling passes while it waited for a CPU longer than it ran,
the answer is an error with the figures, never ✘ ELF-01.

The starved target is the Elastic reference told to burn a minute of its own
CPU before it loads its library (--start-cpu-ms), pinned at nice 19 to one CPU
beside three busy loops of nice 0; --discovery-ceiling shortens the ceiling
to a few seconds. The slow start that does load its library in the end is
the variant `slow-start` (test_conform_variants.py) and the benchmark beside
stress-ng (tests/bench/slow_start_stress.sh).
"""
from __future__ import annotations

import os
import subprocess

import pytest

import conform_support as cs

REFERENCE = cs.fixture_program("x86_64")

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(not (cs.TRACECORR.exists() and REFERENCE.exists()),
                                 reason=cs.missing_reason(f"tracecorr or the x86_64 reference under {cs.BUILD}"))]


def test_a_starved_target_is_an_error_with_the_figures_never_a_failure(tmp_path):
    cpu = str(min(os.sched_getaffinity(0)))
    rivals = [subprocess.Popen(["taskset", "-c", cpu, "/bin/sh", "-c", "while :; do :; done"]) for _ in range(3)]
    try:
        run = cs.run_conform(["taskset", "-c", cpu, "nice", "-n", "19", str(REFERENCE), "--start-cpu-ms", "60000"],
                             only=["ELF-01"], out_dir=tmp_path, extra_args=["--discovery-ceiling", "4"],
                             protocol="elastic-v1")
    finally:
        for r in rivals:
            r.kill()
            r.wait()
    assert run.verdict("ELF-01") == "error", run.explain("ELF-01")
    reason = run.result("ELF-01")["reason"]
    assert "starved" in reason and "waited" in reason and "for a CPU" in reason, reason
    assert run.returncode == cs.EXIT_ENVIRONMENT, run.explain()
