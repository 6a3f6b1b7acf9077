"""Only the target's spans count (issue 29): a local process that is not the
judged agent posts forged spans to tracecorr's OTLP receiver while the
reference is judged, in launch mode and in attach mode.

Before: forged spans (plain, random ids, one every 0.5 s) posted to the
attach-mode port turned 32 passes into failures of MSG-02, MSG-07 and HOST-01.
Now every connection's peer is resolved to its process (sock_diag, then
/proc/PID/fd) and checked against the judged tree; a launched agent also
carries a per-session token (OTEL_EXPORTER_OTLP_HEADERS). The forger here is
this test process, outside the tree and without the token: the reference must
pass as it does alone, and each forged export must be refused and counted.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import conform_support as cs

ARCH = "x86_64"
REFERENCE = cs.fixture_program(ARCH)
CONFIG = cs.REGISTRY["config"]
FORGE_EVERY_S = 0.5

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(not (cs.TRACECORR.exists() and REFERENCE.exists()),
                                 reason=cs.missing_reason(f"tracecorr or the {ARCH} fixtures under {cs.BUILD}"))]


def forged_export() -> bytes:
    """One plain OTLP/JSON export: a transaction with random ids, as an SDK would send it."""
    now = time.time_ns()
    span = {"traceId": os.urandom(16).hex(), "spanId": os.urandom(8).hex(), "name": "forged", "kind": 2,
            "startTimeUnixNano": str(now - 5_000_000), "endTimeUnixNano": str(now), "flags": 1,
            "attributes": [{"key": "elastic.profiler_stack_trace_ids",
                            "value": {"arrayValue": {"values": [{"stringValue": "YLQguzhR2dR6y5M9vnA5mw"}]}}}]}
    body = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "forger"}},
        {"key": "host.id", "value": {"stringValue": f"forged-{random.randrange(1 << 30)}"}}]},
        "scopeSpans": [{"scope": {"name": "forger"}, "spans": [span]}]}]}
    return json.dumps(body).encode()


class Forger:
    """Posts a forged export to every endpoint it is given, one every FORGE_EVERY_S, and counts the answers."""

    def __init__(self, endpoints):
        self.endpoints = endpoints  # a callable: the endpoints to post to now
        self.answers: dict[int, int] = {}  # HTTP status -> count (0: no connection)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _post(self, endpoint: str) -> int:
        request = urllib.request.Request(endpoint + "/v1/traces", data=forged_export(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    def _run(self):
        while not self.stop.wait(FORGE_EVERY_S):
            for endpoint in self.endpoints():
                status = self._post(endpoint)
                self.answers[status] = self.answers.get(status, 0) + 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)


def refused_counted(report: dict) -> int:
    return sum(v for k, v in report.get("counters", {}).items() if k.startswith("exports_refused."))


def assert_forgery_refused_and_named(report: dict, forger: Forger) -> None:
    assert forger.answers.get(403, 0) >= 2, f"the forger never reached a receiver: {forger.answers}"
    assert forger.answers.get(200, 0) == 0, f"a forged export was accepted: {forger.answers}"
    counted = refused_counted(report)
    # Each 403 the forger got is an export counted, unless it came after its session's counters were read; so
    # may be a post whose answer it never got (0: its 5 s ran out on a busy machine after the receiver refused it).
    assert 1 <= counted <= forger.answers[403] + forger.answers.get(0, 0), (counted, forger.answers, report.get("counters"))
    notes = " ".join(report["notes"])
    assert f"pid {os.getpid()}" in notes and "outside the judged process tree" in notes, report["notes"]


def test_launch_mode_reference_passes_while_a_forger_posts_to_every_receiver(tmp_path):
    endpoints = tmp_path / "endpoints"
    # The launch line records the endpoint each session gives the agent, then becomes the agent.
    wrapped = ["/bin/sh", "-c", f'echo "$OTEL_EXPORTER_OTLP_ENDPOINT" >> {endpoints}; exec "$@"', "sh", str(REFERENCE)]
    seen = lambda: endpoints.read_text().split() if endpoints.exists() else []  # noqa: E731
    with Forger(seen) as forger:
        run = cs.run_conform(wrapped, out_dir=tmp_path / "run", retry_inconclusive=cs.INCONCLUSIVE_RETRIES)
    assert not cs.judgement_problems(run), run.explain()
    assert_forgery_refused_and_named(run.report, forger)


def test_attach_mode_reference_passes_while_a_forger_posts_to_its_port(tmp_path):
    port = cs.free_tcp_port()
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
               **{CONFIG["enabled"]["env"]: "true", CONFIG["socket_dir"]["env"]: str(tmp_path)})
    proc = subprocess.Popen([str(REFERENCE), "--threads", "2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert "socket=" in proc.stdout.readline(), "the reference did not start"
        report_path = tmp_path / "report.json"
        with Forger(lambda: [f"http://127.0.0.1:{port}"]) as forger:
            run = subprocess.run([str(cs.TRACECORR), "conform", "--quiet", "--pid", str(proc.pid), "--otlp-port",
                                  str(port), "--json", str(report_path)], capture_output=True, text=True,
                                 timeout=cs.RUN_TIMEOUT_S)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    report = json.loads(report_path.read_text())
    verdicts = {r["id"]: r for r in report["results"]}
    # What the forgery used to break, and what attach mode judges live.
    for rid in ("MSG-02", "MSG-07", "HOST-01", "ELF-04", "PROC-01", "TLS-04", "SOCK-02", "MSG-04", "ATTR-04", "DEFER-01"):
        assert verdicts[rid]["verdict"] == "pass", verdicts[rid]
    assert run.returncode == cs.EXIT_OK, run.stdout[-4000:]
    assert_forgery_refused_and_named(report, forger)
