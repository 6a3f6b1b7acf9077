"""`pytest --shard K/N` (tests/py/conftest.py), as scripts/test.sh uses it: the
N shards together run every collected test exactly once, a module's tests
stay in one shard, and modules of one SHARD_GROUP (the arm64 VM modules, which
share one boot) stay together, in shard 1 and alone there (SHARD_ALONE). A
dealing that dropped a module would be a silent pass of everything in it."""
from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARDS = 4
ARM64_VM_MODULES = {"tests/py/test_arm64_system.py", "tests/py/test_arm64_thread_context.py",
                    "tests/py/test_arm64_profiler.py"}


def collected(*args: str) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                        "tests/py", "tests/scenarios", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return [line for line in r.stdout.splitlines() if "::" in line]


def test_the_shards_run_every_test_once_and_keep_modules_whole():
    everything = collected()
    shard_of: dict[str, int] = {}
    modules_in: dict[int, set[str]] = defaultdict(set)
    for k in range(1, SHARDS + 1):
        for nodeid in collected("--shard", f"{k}/{SHARDS}"):
            assert nodeid not in shard_of, f"{nodeid} in shards {shard_of[nodeid]} and {k}"
            shard_of[nodeid] = k
            modules_in[k].add(nodeid.split("::")[0])
    assert sorted(shard_of) == sorted(everything), "the shards together differ from one collection"
    for k, modules in modules_in.items():
        for other, theirs in modules_in.items():
            assert other == k or not modules & theirs, f"modules split between shards {k} and {other}: {modules & theirs}"
    holding_vm = [k for k, modules in modules_in.items() if modules & ARM64_VM_MODULES]
    assert len(holding_vm) == 1 and ARM64_VM_MODULES <= modules_in[holding_vm[0]], dict(modules_in)
    # scripts/test.sh starts shard 1 first, beside ctest and the host-wide tests: the guest alone.
    assert modules_in[1] == ARM64_VM_MODULES, dict(modules_in)


@pytest.mark.parametrize("bad", ["0/4", "5/4", "4", "a/b"])
def test_a_malformed_shard_is_refused(bad):
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                        "tests/py/test_reports.py", "--shard", bad], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 4 and "--shard wants K/N" in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
