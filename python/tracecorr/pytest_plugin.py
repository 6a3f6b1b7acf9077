"""pytest plugin: scenario fixtures for an agent under test, and requirement verdicts.

Registered as the ``tracecorr`` pytest11 entry point when the package is
installed; in-tree, a conftest registers it (see tests/scenarios/conftest.py).

Target selection (first that applies):

* ``--tracecorr-pid N``: attach to a running agent (nothing is restarted);
* ``--tracecorr-cmd "CMD ARGS"``: launch CMD for every test that uses the target;
* ``@pytest.mark.tracecorr_target(cmd=..., env={...}, enabled="true")`` on a test or module;
* the ``tracecorr_default_cmd`` fixture (override it in a conftest).

``--tracecorr-protocol ID`` names the protocol under test (default: the first compiled in).

Fixtures: ``otlp_receiver`` (:class:`tracecorr.OtlpReceiver`), ``tracecorr_target``
(:class:`tracecorr.Target`, launched with the receiver's endpoint and waited on until it
has published what its protocol publishes), ``host_agent`` (the protocol package's profiler
side, connected to the target), ``tracecorr_reader`` (``"bpf"`` when the BPF sampler loads,
else ``"ptrace"``; ``--tracecorr-reader`` forces one).

``@pytest.mark.requirement("MSG-03", ...)`` records each marked test's outcome as a verdict on
those requirements in libtracecorr's RunResult model (the model ``tracecorr conform``
reports with): passed -> PASS; failed -> FAIL for a MUST, WARN for a SHOULD/MAY (FAIL with
``--tracecorr-strict`` for a SHOULD); skipped -> SKIP; setup/teardown error -> ERROR.
``--tracecorr-report-json FILE``, ``--tracecorr-report-junit FILE`` and ``--tracecorr-report-html FILE`` write the reports
with the C++ renderers. An id the registry does not define is a usage error.
"""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from typing import Dict, List, Optional

import pytest

from . import _tracecorr
from .otlp import OtlpReceiver
from .sampling import make_sampler
from .target import Target

_PROBE_PREFIX = "pytest:"
_STATE = pytest.StashKey["_ReportState"]()


class _ReportState:
    def __init__(self, config):
        self.config = config
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.results: List = []
        self.requirements: Dict[str, List[str]] = {}  # nodeid -> ids
        self.outcome: Dict[str, tuple] = {}  # nodeid -> (verdict source, report) of the deciding phase
        self.run = None


# ---- options and markers ---------------------------------------------------------------------
def pytest_addoption(parser):
    group = parser.getgroup("tracecorr", "tracecorr agent under test")
    group.addoption("--tracecorr-cmd", default=None,
                    help="Command line of the agent under test (launched per test, with the standard environment)")
    group.addoption("--tracecorr-pid", type=int, default=None, help="Attach to this running agent process instead")
    group.addoption("--tracecorr-protocol", default=None, metavar="ID",
                    help="The protocol under test (default: the first compiled in)")
    group.addoption("--tracecorr-otlp-port", type=int, default=0,
                    help="Port for the OTLP receiver (attach mode: where the agent exports)")
    group.addoption("--tracecorr-reader", choices=["auto", "bpf", "ptrace"], default="auto",
                    help="Sampler for host_agent.sample() (auto: bpf when it loads, else ptrace)")
    group.addoption("--tracecorr-report-json", default=None, metavar="FILE",
                    help="Write requirement verdicts as a tracecorr-report/2 JSON file")
    group.addoption("--tracecorr-report-junit", default=None, metavar="FILE",
                    help="Write requirement verdicts as JUnit XML (one testsuite per area)")
    group.addoption("--tracecorr-report-html", default=None, metavar="FILE",
                    help="Write requirement verdicts as one self-contained HTML page")
    group.addoption("--tracecorr-strict", action="store_true", default=False,
                    help="A failed SHOULD is a FAIL (not a WARN)")


def pytest_configure(config):
    config.addinivalue_line("markers", "requirement(*ids): the registry requirement ids the test exercises "
                                       "(recorded as verdicts in the tracecorr report)")
    config.addinivalue_line("markers", "tracecorr_target(cmd=None, env=None, enabled='true'): how to launch the "
                                       "agent under test for this test or module")
    config.stash[_STATE] = _ReportState(config)


def _marker_ids(item) -> List[str]:
    ids: List[str] = []
    for mark in item.iter_markers("requirement"):
        for arg in mark.args:
            ids.extend([arg] if isinstance(arg, str) else list(arg))
    return ids


def pytest_collection_modifyitems(session, config, items):
    state = config.stash[_STATE]
    problems = []
    for item in items:
        ids = _marker_ids(item)
        if not ids:
            continue
        unknown = _tracecorr.validate_ids(ids)
        if unknown:
            problems.append(f"{item.nodeid}: unknown requirement id(s) {', '.join(unknown)} "
                            f"(no compiled-in protocol's registry defines them: tracecorr list)")
        state.requirements[item.nodeid] = list(dict.fromkeys(ids))
    if problems:
        raise pytest.UsageError("@pytest.mark.requirement: " + "; ".join(problems))


# ---- outcomes -> RequirementResult ----------------------------------------------------------------
def _decides(report, previous) -> bool:
    """Whether this phase's report decides the test's verdict (first failure wins, else the call)."""
    if previous is not None and previous[0] in ("error", "fail", "skip"):
        return False
    if report.when == "call":
        return True
    return report.failed or report.skipped


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Outermost wrapper: the report is final (xfail handling included) after the yield.
    outcome = yield
    report = outcome.get_result()
    state = item.config.stash.get(_STATE, None)
    if state is None or report.nodeid not in state.requirements:
        return
    previous = state.outcome.get(report.nodeid)
    if not _decides(report, previous):
        return
    if report.skipped:
        kind = "skip"
    elif report.failed:
        kind = "fail" if report.when == "call" else "error"
    else:
        kind = "pass"
    state.outcome[report.nodeid] = (kind, report)


def _reason(kind: str, report) -> str:
    if kind == "pass":
        return f"scenario {report.nodeid} passed"
    if kind == "skip":
        longrepr = report.longrepr
        text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        if hasattr(report, "wasxfail"):
            text = f"xfail: {report.wasxfail}"
        return f"scenario skipped: {text}"
    message = ""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        message = crash.message
    else:
        message = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    where = "scenario" if kind == "fail" else f"scenario {report.when}"
    return f"{where} failed: {first}"


def _repeat_command(config, nodeid: str) -> str:
    argv = [os.path.basename(sys.executable) if sys.executable else "python3", "-m", "pytest", nodeid]
    cmd = config.getoption("--tracecorr-cmd")
    pid = config.getoption("--tracecorr-pid")
    if pid:
        argv += ["--tracecorr-pid", str(pid)]
    elif cmd:
        argv += ["--tracecorr-cmd", cmd]
    return " ".join(shlex.quote(a) for a in argv)


def _build_run(state: _ReportState):
    config = state.config
    strict = config.getoption("--tracecorr-strict")
    run = _tracecorr.RunResult()
    try:
        from importlib.metadata import version
        run.tool_version = "tracecorr-python " + version("tracecorr")
    except Exception:
        run.tool_version = "tracecorr-python (in-tree)"
    target = _tracecorr.TargetDescription()
    pid = config.getoption("--tracecorr-pid")
    target.description = f"pid {pid}" if pid else (config.getoption("--tracecorr-cmd") or "per-test targets")
    target.pid = pid
    target.arch = platform.machine()
    run.target = target
    run.personality = "pytest"
    run.strict = strict
    run.started = state.started
    run.finished = datetime.datetime.now(datetime.timezone.utc)
    for nodeid, ids in state.requirements.items():
        decided = state.outcome.get(nodeid)
        if decided is None:
            continue  # deselected or not run
        kind, report = decided
        for rid in ids:
            r = _tracecorr.make_result(rid)
            if kind == "skip":
                r.verdict = _tracecorr.Verdict.SKIP
            elif kind == "error":
                r.verdict = _tracecorr.Verdict.ERROR
            else:
                r.verdict = _tracecorr.judge(r.level, kind == "pass", strict)
            r.reason = _reason(kind, report)
            r.probe = _PROBE_PREFIX + nodeid
            r.duration = datetime.timedelta(seconds=report.duration)
            r.repeat_command = _repeat_command(config, nodeid)
            if kind in ("fail", "error"):
                ev = _tracecorr.Evidence()
                ev.label = f"pytest {report.when} of {nodeid}"
                ev.expected = "the scenario passes"
                ev.actual = report.longreprtext[-4000:]
                r.evidence = [ev]
            run.add_result(r)
    counters = dict(run.counters)
    counters["scenarios"] = len(state.outcome)
    run.counters = counters
    return run


def pytest_sessionfinish(session, exitstatus):
    state = session.config.stash.get(_STATE, None)
    if state is None:
        return
    state.run = _build_run(state)
    json_path = session.config.getoption("--tracecorr-report-json")
    junit_path = session.config.getoption("--tracecorr-report-junit")
    if json_path:
        _tracecorr.write_text_file(json_path, _tracecorr.render_json(state.run))
    if junit_path:
        _tracecorr.write_text_file(junit_path, _tracecorr.render_junit(state.run))
    html_path = session.config.getoption("--tracecorr-report-html")
    if html_path:
        _tracecorr.write_text_file(html_path, _tracecorr.render_html(state.run))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = config.stash.get(_STATE, None)
    if state is None or state.run is None or not state.run.results:
        return
    terminalreporter.write_sep("-", "tracecorr requirement verdicts")
    terminalreporter.write_line(_tracecorr.render_console(state.run, color=False, show_passes=True).rstrip())
    for opt in ("--tracecorr-report-json", "--tracecorr-report-junit"):
        if config.getoption(opt):
            terminalreporter.write_line(f"tracecorr: wrote {config.getoption(opt)}")


def tracecorr_run_result(config):
    """The RunResult built at the end of the session (None before)."""
    state = config.stash.get(_STATE, None)
    return state.run if state else None


# ---- fixtures -----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def tracecorr_default_cmd() -> Optional[str]:
    """The command used when neither an option nor a marker names one. Override in a conftest."""
    return None


@pytest.fixture(scope="session")
def tracecorr_reader(pytestconfig) -> str:
    """``"bpf"`` or ``"ptrace"``: the sampler host_agent.sample() should use here."""
    choice = pytestconfig.getoption("--tracecorr-reader")
    if choice != "auto":
        return choice
    if _tracecorr.HAVE_BPF:
        try:
            make_sampler("bpf")
            return "bpf"
        except _tracecorr.TracecorrError:
            pass
    return "ptrace"


@pytest.fixture
def otlp_receiver(pytestconfig):
    """An OTLP/HTTP receiver for the target's spans (ephemeral port unless --tracecorr-otlp-port)."""
    with OtlpReceiver(port=pytestconfig.getoption("--tracecorr-otlp-port")) as rx:
        yield rx


@pytest.fixture
def tracecorr_target(request, pytestconfig, otlp_receiver, tracecorr_default_cmd):
    """The agent under test, ready (its protocol published): launched per test, or attached."""
    pid = pytestconfig.getoption("--tracecorr-pid")
    protocol = pytestconfig.getoption("--tracecorr-protocol")
    marker = request.node.get_closest_marker("tracecorr_target")
    kwargs = dict(marker.kwargs) if marker else {}
    if pid:
        target = Target.attach(pid, receiver=otlp_receiver, protocol=protocol)
    else:
        cmd = pytestconfig.getoption("--tracecorr-cmd") or kwargs.get("cmd") or tracecorr_default_cmd
        if not cmd:
            raise pytest.UsageError("no agent under test: give --tracecorr-cmd CMD, --tracecorr-pid PID, "
                                    "@pytest.mark.tracecorr_target(cmd=...), or override tracecorr_default_cmd")
        target = Target(cmd, otlp_receiver, env=kwargs.get("env"), enabled=kwargs.get("enabled", "true"),
                        protocol=protocol)
    with target:
        target.wait_ready(timeout=kwargs.get("ready_timeout", 10.0))
        yield target
        if target.launched and not target.stopped_by_request and not target.alive():
            pytest.fail(f"the agent exited during the test ({target.exit_description()}):\n{target.output()[-2000:]}")


@pytest.fixture
def host_agent(tracecorr_target):
    """A profiler's side of the target's protocol, connected to it (its package's ``profiler``)."""
    with tracecorr_target.protocol.profiler(tracecorr_target) as agent:
        yield agent
