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
"""
import resource
import shutil
import tempfile
import time

import pytest

import build_products
import conform_support

_OWN_BASETEMP = None
CPU_SUMMARY_LINES = 12
_cpu_by_test: list[tuple[float, float, str]] = []  # (CPU seconds, wall seconds, nodeid)


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_configure(config):
    global _OWN_BASETEMP
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        _OWN_BASETEMP = tempfile.mkdtemp(prefix="tcpy-", dir="/tmp")
        config.option.basetemp = _OWN_BASETEMP


def pytest_sessionfinish(session, exitstatus):
    if _OWN_BASETEMP and exitstatus == 0:
        shutil.rmtree(_OWN_BASETEMP, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu_seconds(), time.monotonic()
    yield
    _cpu_by_test.append((_cpu_seconds() - cpu, time.monotonic() - wall, item.nodeid))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and build_products.in_ci() and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if reason.startswith("Skipped: "):
            reason = reason[len("Skipped: "):]
        if reason.startswith(build_products.MISSING_PREFIX):
            report.outcome = "failed"
            report.longrepr = "CI: " + reason


def pytest_terminal_summary(terminalreporter):
    if _cpu_by_test:
        total = sum(cpu for cpu, _, _ in _cpu_by_test)
        terminalreporter.write_sep("=", f"CPU time: {total:.0f} s in {len(_cpu_by_test)} tests; the largest")
        for cpu, wall, nodeid in sorted(_cpu_by_test, reverse=True)[:CPU_SUMMARY_LINES]:
            terminalreporter.write_line(f"{cpu:7.1f} s CPU {wall:7.1f} s wall  {nodeid}")
    lines = conform_support.KILL_MATRIX.render()
    if not lines:
        return
    terminalreporter.write_sep("=", "tracecorr conform kill matrix")
    for line in lines:
        terminalreporter.write_line(line)
