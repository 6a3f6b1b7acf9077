"""Session-wide set-up for the Python tests.

- A short temporary root: unix socket addresses hold 107 bytes, and pytest's
  own root (/tmp/pytest-of-USER/pytest-NNN/<test name>/...) grows with its run
  counter until the fixtures' socket paths no longer fit. Each run gets its own
  /tmp/tcpy-XXXXXX (so concurrent runs never share one), removed when the run
  passes and kept for inspection when it fails.
- Under CI, a test skipped for a missing build product (build_products.MISSING_PREFIX)
  is reported failed: CI built everything, so a missing product is a broken build.
- The kill matrix and timings of the conform tests (conform_support.KILL_MATRIX)
  in the terminal summary, so they show with -q as well as with -s.
- The CPU time each test took, its own and its finished children's (tracecorr,
  the targets, qemu; a module's fixtures count in the first test that used
  them), the largest in the terminal summary: the test command is bound by its
  CPU time on a 2-CPU machine, so that is where it can be made shorter.
  TRACECORR_TEST_CPU_REPORT=FILE appends every test's line to FILE (tab-separated).
- --shard K/N: only the K-th of N shards of the collected tests, so that
  scripts/test.sh can run N pytest processes side by side. A module stays whole
  (its fixtures are made once), modules that share a SHARD_GROUP stay together
  (the arm64 VM modules share one boot), and groups are dealt out largest first
  by the seconds tests/py/shard_weights.json gives them (scripts/shard-weights.py
  writes it from TRACECORR_TEST_CPU_REPORT files; a module it lacks weighs
  DEFAULT_SHARD_WEIGHT_S). A group whose module says SHARD_ALONE = True (the
  arm64 guest: minutes of both CPUs, the test command's long pole) goes to shard 1,
  which holds nothing else whenever there are two shards or more, so
  scripts/test.sh starts it first and nothing else waits behind it.
- --claim DIR: instead of a dealing fixed in advance, the groups are taken one
  at a time from a queue that every pytest process given the same DIR shares
  (tests/support/group_queue.py), alone groups first, then heaviest first, so
  that processes side by side end together whatever the groups weigh on this
  machine. The tests of groups other processes took count as deselected.
- tests/py/known_failures.txt: tests known to fail, each marked
  xfail(strict=True) with its issue: they still run, a listed test that passes
  fails the run (the list is stale), and any failure not listed fails it.
  Lines marked "flaky N:" are intermittent failures, quarantined as non-strict
  xfails (XFAIL or XPASS in the summary), each a bug still to find.
- arm64_vm_run: the one arm64 guest boot of the run, with the jobs of every VM
  test module that has a test selected (tests/support/arm64_vm.py).
"""
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import pytest

import arm64_vm
from group_queue import GroupQueue
import build_products
import conform_support
from known_failures import known_failures

_OWN_BASETEMP = None
SHARD_WEIGHTS = Path(__file__).with_name("shard_weights.json")
DEFAULT_SHARD_WEIGHT_S = 5.0
CPU_SUMMARY_LINES = 12
# A quarantined test's failure is shown whole up to this many characters (its end: the assertion's message):
# pytest hides an xfail's traceback, and each is a bug still to find.
QUARANTINED_FAILURE_CHARS = 6000
_quarantined_failures: list[tuple[str, str]] = []  # (nodeid, the end of its failure)
_cpu_by_test: list[tuple[float, float, str]] = []  # (CPU seconds, wall seconds, nodeid)


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_addoption(parser):
    parser.addoption("--shard", metavar="K/N", help="run only the K-th (1..N) of N shards of the collected tests")
    parser.addoption("--claim", metavar="DIR", help="run the groups this process takes from the queue in DIR, "
                     "shared with other pytest processes (the alone ones at once, the rest once DIR/open exists)")


def parse_shard(text: str) -> tuple[int, int]:
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise pytest.UsageError(f"--shard wants K/N with 1 <= K <= N, got {text!r}")
    return int(k), int(n)


def module_of(item) -> str:
    return item.nodeid.split("::")[0]


def shard_group(item) -> str:
    """The unit a shard takes whole: the module's SHARD_GROUP, else the module."""
    return getattr(item.module, "SHARD_GROUP", None) or module_of(item)


def shard_alone(item) -> bool:
    return bool(getattr(item.module, "SHARD_ALONE", False))


def deal_shards(weights: dict[str, float], n: int, alone: frozenset[str] = frozenset()) -> list[set[str]]:
    """The groups `weights` names into `n` shards of about equal weight. With
    n > 1, shard 1 holds the groups in `alone` and no other, even when there
    are none (scripts/test.sh starts it beside the host-wide tests, which must
    meet no other test's targets). The others go heaviest first, each to the
    lightest shard so far (ties by name, so every process deals alike)."""
    if n > 1:
        rest = deal_by_weight({g: w for g, w in weights.items() if g not in alone}, n - 1)
        return [set(alone & weights.keys()), *rest]
    return deal_by_weight(weights, n)


def deal_by_weight(weights: dict[str, float], n: int) -> list[set[str]]:
    shards: list[tuple[float, int, set[str]]] = [(0.0, i, set()) for i in range(n)]
    for group in sorted(weights, key=lambda g: (-weights[g], g)):
        load, i, members = min(shards, key=lambda s: (s[0], s[1]))
        members.add(group)
        shards[i] = (load + weights[group], i, members)
    return [members for _, _, members in shards]


def mark_known_failures(items) -> None:
    known = known_failures()
    for item in items:
        if item.nodeid in known:
            why = known[item.nodeid]
            flaky = why.startswith("flaky ")
            item.add_marker(pytest.mark.xfail(strict=not flaky,
                                              reason=("intermittent, issue " + why[6:]) if flaky else "known failure, issue " + why))


def group_weights(items) -> dict[str, float]:
    """Each group's measured seconds (shard_weights.json), the default for a module it lacks."""
    measured = json.loads(SHARD_WEIGHTS.read_text())["seconds"] if SHARD_WEIGHTS.exists() else {}
    modules_of: dict[str, set[str]] = {}
    for item in items:
        modules_of.setdefault(shard_group(item), set()).add(module_of(item))
    return {group: sum(measured.get(m, DEFAULT_SHARD_WEIGHT_S) for m in modules)
            for group, modules in modules_of.items()}


def alone_groups(items) -> frozenset[str]:
    return frozenset(shard_group(item) for item in items if shard_alone(item))


def pytest_collection_modifyitems(config, items):
    mark_known_failures(items)
    if config.getoption("--claim") and config.getoption("--shard"):
        raise pytest.UsageError("--claim and --shard are two ways to share the tests out: give one")
    if not config.getoption("--shard"):
        return
    k, n = parse_shard(config.getoption("--shard"))
    mine = deal_shards(group_weights(items), n, alone_groups(items))[k - 1]
    config.hook.pytest_deselected(items=[item for item in items if shard_group(item) not in mine])
    items[:] = [item for item in items if shard_group(item) in mine]


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """--claim DIR: pytest's own loop over the items of each group this process takes."""
    directory = session.config.getoption("--claim")
    if not directory or session.config.option.collectonly or not session.items:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    items_of: dict[str, list] = {}
    for item in session.items:
        items_of.setdefault(shard_group(item), []).append(item)
    weights = group_weights(session.items)
    queue = GroupQueue(Path(directory), sorted(weights, key=lambda g: (-weights[g], g)), alone_groups(session.items))
    for group in queue.groups():
        run_group(session, items_of[group])
    session.config.hook.pytest_deselected(items=[item for group, items in items_of.items()
                                                 if group not in queue.taken for item in items])
    return True


def run_group(session, items) -> None:
    """Runs `items` as pytest's own loop would. The last one's teardown is the
    group's, fixtures of every scope included: the next group is not known yet."""
    for i, item in enumerate(items):
        nextitem = items[i + 1] if i + 1 < len(items) else None
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)


def pytest_configure(config):
    global _OWN_BASETEMP
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        _OWN_BASETEMP = tempfile.mkdtemp(prefix="tcpy-", dir="/tmp")
        config.option.basetemp = _OWN_BASETEMP


def pytest_sessionfinish(session, exitstatus):
    if _OWN_BASETEMP and exitstatus == 0:
        shutil.rmtree(_OWN_BASETEMP, ignore_errors=True)


@pytest.fixture(scope="session")
def arm64_vm_run(request):
    return arm64_vm.shared_boot({item.module.__name__ for item in request.session.items})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu_seconds(), time.monotonic()
    yield
    _cpu_by_test.append((_cpu_seconds() - cpu, time.monotonic() - wall, item.nodeid))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if hasattr(report, "wasxfail") and report.skipped and call.excinfo is not None:
        _quarantined_failures.append((item.nodeid, str(report.longrepr)[-QUARANTINED_FAILURE_CHARS:]))
    if report.skipped and build_products.in_ci() and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if reason.startswith("Skipped: "):
            reason = reason[len("Skipped: "):]
        if reason.startswith(build_products.MISSING_PREFIX):
            report.outcome = "failed"
            report.longrepr = "CI: " + reason


def pytest_terminal_summary(terminalreporter):
    for nodeid, failure in _quarantined_failures:
        terminalreporter.write_sep("-", f"quarantined failure (known_failures.txt): {nodeid}")
        terminalreporter.write_line(failure)
    if _cpu_by_test:
        total = sum(cpu for cpu, _, _ in _cpu_by_test)
        terminalreporter.write_sep("=", f"CPU time: {total:.0f} s in {len(_cpu_by_test)} tests; the largest")
        for cpu, wall, nodeid in sorted(_cpu_by_test, reverse=True)[:CPU_SUMMARY_LINES]:
            terminalreporter.write_line(f"{cpu:7.1f} s CPU {wall:7.1f} s wall  {nodeid}")
        if report := os.environ.get("TRACECORR_TEST_CPU_REPORT"):
            with open(report, "a") as out:
                out.writelines(f"{cpu:.2f}\t{wall:.2f}\t{nodeid}\n" for cpu, wall, nodeid in _cpu_by_test)
    lines = conform_support.KILL_MATRIX.render()
    if not lines:
        return
    terminalreporter.write_sep("=", "tracecorr conform kill matrix")
    for line in lines:
        terminalreporter.write_line(line)
