"""`pytest --shard K/N` and `pytest --claim DIR` (tests/py/conftest.py), the
latter as scripts/test.sh uses it: the N shards, or the processes sharing one
queue, together run every collected test exactly once, a module's tests stay
in one process, and modules of one SHARD_GROUP (the arm64 VM modules, which
share one boot) stay together, in shard 1 and alone there (SHARD_ALONE). A
dealing that dropped a module would be a silent pass of everything in it."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARDS = 4
ARM64_VM_MODULES = {"tests/py/test_arm64_system.py", "tests/py/test_arm64_thread_context.py",
                    "tests/py/test_arm64_profiler.py"}


def collected(*args: str, paths: tuple[str, ...] = ("tests/py", "tests/scenarios")) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                        *paths, *args], cwd=REPO, capture_output=True, text=True, timeout=120)
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


# Quick modules, none of them this one: three processes share their queue.
QUEUED_MODULES = ["tests/py/test_reports.py", "tests/py/test_docs_paths.py", "tests/py/test_inspect.py",
                  "tests/py/test_sampler_layouts.py", "tests/py/test_fixture_mutants.py"]
QUEUE_PROCESSES = 3


def ran(junit: Path) -> list[str]:
    """The node ids a process ran, from its JUnit XML (classname "tests.py.test_x", name "test_y[p]")."""
    cases = ET.parse(junit).getroot().iter("testcase")
    return [f'{c.get("classname").replace(".", "/")}.py::{c.get("name")}' for c in cases]


def queue_env() -> dict[str, str]:
    """The processes' tests are this test's: kept out of the test command's CPU report."""
    return {k: v for k, v in os.environ.items() if k != "TRACECORR_TEST_CPU_REPORT"}


def test_processes_sharing_a_queue_run_every_test_once_and_keep_modules_whole(tmp_path):
    everything = collected(paths=tuple(QUEUED_MODULES))
    queue = tmp_path / "queue"
    queue.mkdir()
    (queue / "open").touch()
    runs = [subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *QUEUED_MODULES,
                              "--claim", str(queue), "--junitxml", str(tmp_path / f"{k}.xml")],
                             cwd=REPO, env=queue_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for k in range(QUEUE_PROCESSES)]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0] * QUEUE_PROCESSES, "\n".join(o[-2000:] for o in outputs)
    process_of: dict[str, int] = {}
    for k in range(QUEUE_PROCESSES):
        for nodeid in ran(tmp_path / f"{k}.xml"):
            assert nodeid not in process_of, f"{nodeid} ran in processes {process_of[nodeid]} and {k}"
            process_of[nodeid] = k
    assert sorted(process_of) == sorted(everything), "the processes together differ from one collection"
    module_in = {}
    for nodeid, k in process_of.items():
        assert module_in.setdefault(nodeid.split("::")[0], k) == k, f"{nodeid.split('::')[0]} split between processes"
    assert len(list(queue.glob("*.claim"))) == len(QUEUED_MODULES)


def test_the_queue_waits_for_open_before_any_group_not_alone(tmp_path):
    """scripts/test.sh's first process takes the guest beside the host-wide tests, and nothing else until they end."""
    queue = tmp_path / "queue"
    queue.mkdir()
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", QUEUED_MODULES[0],
                            "--claim", str(queue)], cwd=REPO, env=queue_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    with pytest.raises(subprocess.TimeoutExpired):
        run.communicate(timeout=8)
    assert not list(queue.glob("*.claim")), "a group was taken before the queue opened"
    (queue / "open").touch()
    output = run.communicate(timeout=120)[0]
    assert run.returncode == 0 and " passed" in output, output[-2000:]
    assert len(list(queue.glob("*.claim"))) == 1


def test_claim_and_shard_together_are_refused():
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/py/test_reports.py",
                        "--claim", "/nonexistent", "--shard", "1/2"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 4 and "give one" in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
