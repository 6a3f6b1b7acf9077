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
"""
import shutil
import tempfile

import pytest

import build_products
import conform_support

_OWN_BASETEMP = None


def pytest_configure(config):
    global _OWN_BASETEMP
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        _OWN_BASETEMP = tempfile.mkdtemp(prefix="tcpy-", dir="/tmp")
        config.option.basetemp = _OWN_BASETEMP


def pytest_sessionfinish(session, exitstatus):
    if _OWN_BASETEMP and exitstatus == 0:
        shutil.rmtree(_OWN_BASETEMP, ignore_errors=True)


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
    lines = conform_support.KILL_MATRIX.render()
    if not lines:
        return
    terminalreporter.write_sep("=", "tracecorr conform kill matrix")
    for line in lines:
        terminalreporter.write_line(line)
