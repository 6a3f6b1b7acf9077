"""No pass on nothing, every protocol a target publishes, other schemas named
(issue 25, deliveries 1, 2, 7 and 9).

- A program that publishes nothing exits 3 for each suite, for `--only`, and
  for the suites `--only` names across protocols; a run whose verdicts are all
  skips exits 3; an `--only` token that judged nothing is an error even when
  another was judged. Every report says why (JSON `gate.unjudged`, JUnit's
  `gate` testsuite, the console's "not judged:" line).
- A writer announcing another runtime's schema
  (<build>/fixtures/x86_64/otel_thread_context/variants/nodejs-schema: its
  context says `threadlocal.schema_version = nodejs_v1_dev`, its library
  exports `otel_thread_ctx_nodejs_v1`): `--protocol auto` judges its process
  context (which passes) and lists the thread context as not applicable with
  the schema and the variable seen, no failure; naming the thread context
  judges nothing (exit 3); `inspect` and `agent` say the same.

The writer publishing both OTel contexts (the OTEP 4947 reference) is judged
for both under `--protocol auto` in tests/py/test_conform_tctx_mutants.py.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import conform_support as cs

ARCH = "x86_64"
REFERENCE = cs.fixture_program(ARCH)
TCTX = cs.fixture_dir(ARCH) / "otel_thread_context"
TCTX_WRITER = TCTX / "reference" / "tlsdesc" / "otel-tctx-writer"
NODEJS = TCTX / "variants" / "nodejs-schema" / "otel-tctx-writer"
PCTX_WRITER = cs.fixture_dir(ARCH) / "otel_process_context" / "reference" / "otel-ctx-writer"
JOBS = int(os.environ.get("TRACECORR_CONFORM_JOBS", "2"))
# Publishes nothing of any protocol, and outlives every discovery deadline.
NOTHING = ["sleep", "120"]
WRITER_ARGS = ["--threads", "2", "--span-ms", "40", "--append"]
PCTX_WRITER_RULES = [r["id"] for r in json.loads((cs.REPO / "spec" / "otel-process-context.json").read_text())["requirements"]
                     if r["role"] == "writer"]

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(not all(p.exists() for p in (cs.TRACECORR, REFERENCE, TCTX_WRITER, NODEJS, PCTX_WRITER)),
                                 reason=cs.missing_reason(f"tracecorr or the {ARCH} fixtures under {cs.BUILD}"))]

# name -> run_conform's arguments. Sessions that publish nothing wait out their
# discovery deadline doing nothing: they overlap (--jobs) at no CPU cost.
RUNS = {
    "nothing:elastic-v1": {"command": NOTHING, "protocol": "elastic-v1", "extra_args": ["--jobs", "6"], "junit": True},
    "nothing:otel-process-context": {"command": NOTHING, "protocol": "otel-process-context", "extra_args": ["--jobs", "2"]},
    "nothing:otel-thread-context": {"command": NOTHING, "protocol": "otel-thread-context", "extra_args": ["--jobs", "2"]},
    "nothing:only": {"command": NOTHING, "only": ["ELF-01", "PCTX-01", "TCTX-01"], "extra_args": ["--jobs", "4"]},
    # TLS-06 (a MAY) is never judged against the agent: ELF-01 passes, the token TLS-06 judged nothing.
    "skips:elastic": {"command": [str(REFERENCE)], "only": ["ELF-01", "TLS-06"], "junit": True},
    # The MAY rules of OTEP 4947 are always skipped, with what was seen.
    "skips:otel-thread-context": {"command": [str(TCTX_WRITER), *WRITER_ARGS], "only": ["TCTX-09", "TCTX-18"]},
    "nodejs:auto": {"command": [str(NODEJS), *WRITER_ARGS], "junit": True},
    "nodejs:named": {"command": [str(NODEJS), *WRITER_ARGS], "protocol": "otel-thread-context"},
    "nodejs:both-named": {"command": [str(NODEJS), *WRITER_ARGS], "protocol": "otel-process-context,otel-thread-context"},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("conform-gate")
    return cs.run_pool(RUNS, out, JOBS)


def verdicts_of(run: cs.ConformRun) -> dict[str, str]:
    return run.verdicts()


def assert_judged_nothing(run: cs.ConformRun, *words: str) -> None:
    """Exit 3, no pass, no failure, and the reason in every report."""
    assert run.report is not None, run.explain()
    assert run.returncode == cs.EXIT_ENVIRONMENT, run.explain()
    assert "fail" not in run.verdicts().values(), run.explain()
    unjudged = run.report["gate"]["unjudged"]
    assert unjudged, run.explain()
    assert run.report["gate"]["exit_code"] == cs.EXIT_ENVIRONMENT
    for word in words:
        assert any(word in line for line in unjudged), (word, unjudged)
    assert any(line.startswith("not judged: ") for line in run.stdout.splitlines()), run.stdout[-3000:]
    if run.junit_path:
        gate = ET.parse(run.junit_path).getroot().find("./testsuite[@name='gate']")
        assert gate is not None and gate.findall("testcase/error"), run.junit_path.read_text()[-3000:]


@pytest.mark.parametrize("protocol", ["elastic-v1", "otel-process-context", "otel-thread-context"])
def test_a_program_that_publishes_nothing_exits_3_for_each_suite(runs, protocol):
    run = runs[f"nothing:{protocol}"]
    assert_judged_nothing(run, "nothing was judged")
    assert "pass" not in run.verdicts().values(), run.explain()
    assert [p["id"] for p in run.report["protocols"]] == [protocol]
    assert run.report["protocols"][0]["named"] is True


def test_a_program_that_publishes_nothing_exits_3_under_only(runs):
    """--only across three protocols: each token's suite is run, none judges anything."""
    run = runs["nothing:only"]
    assert_judged_nothing(run, "nothing was judged")
    assert sorted(p["id"] for p in run.report["protocols"]) == sorted(
        ["elastic-v1", "otel-process-context", "otel-thread-context"])
    assert sorted(run.verdicts()) == ["ELF-01", "PCTX-01", "TCTX-01"]
    # Nothing published: "published nothing", never a failure of the rule that finds the protocol.
    for rid in ("ELF-01", "PCTX-01"):
        assert run.verdict(rid) == "skip" and "published nothing" in run.result(rid)["reason"], run.explain(rid)


def test_an_only_token_that_judged_nothing_is_an_error_beside_a_pass(runs):
    run = runs["skips:elastic"]
    assert run.verdict("ELF-01") == "pass", run.explain("ELF-01")
    assert run.verdict("TLS-06") == "skip", run.explain("TLS-06")
    assert_judged_nothing(run, "--only TLS-06 judged nothing")


def test_a_run_whose_verdicts_are_all_skips_exits_3(runs):
    run = runs["skips:otel-thread-context"]
    assert set(run.verdicts().values()) == {"skip"}, run.explain()
    assert_judged_nothing(run, "nothing was judged")


def test_another_schema_is_not_applicable_and_the_process_context_is_judged(runs):
    """--protocol auto on the Node-schema writer: the three protocols listed,
    the process context judged and passing, OTEP 4947's thread context not
    applicable with the schema and the variable seen, and the schema's own
    package judging it: this writer announces nodejs_v1_dev over OTEP 4947's
    8-byte pointer, no Node.js struct, so NJS-02 fails and the run exits 1."""
    run = runs["nodejs:auto"]
    assert run.report is not None, run.explain()
    sections = {p["id"]: p for p in run.report["protocols"]}
    assert set(sections) == {"otel-process-context", "otel-thread-context", "otel-nodejs-thread-context"}, \
        run.report["protocols"]
    tctx = sections["otel-thread-context"]
    assert tctx["status"] == "not-applicable" and tctx["named"] is False, tctx
    assert tctx["not_applicable"].startswith("schema nodejs_v1_dev"), tctx
    assert "otel_thread_ctx_nodejs_v1" in tctx["not_applicable"], tctx
    assert sections["otel-process-context"]["status"] == "judged"
    assert sections["otel-nodejs-thread-context"]["status"] == "judged"
    by_protocol: dict[str, list[dict]] = {}
    for r in run.report["results"]:
        by_protocol.setdefault(r["protocol"], []).append(r)
    for r in by_protocol["otel-thread-context"]:
        assert r["verdict"] == "skip" and r["reason"].startswith("not applicable: schema nodejs_v1_dev"), r
    pctx = {r["id"]: r for r in by_protocol["otel-process-context"]}
    assert sorted(pctx) == sorted(PCTX_WRITER_RULES)
    assert not [r for r in pctx.values() if r["verdict"] in ("fail", "warn", "error")], run.explain()
    assert sum(r["verdict"] == "pass" for r in pctx.values()) >= 10, run.explain()
    njs = {r["id"]: r for r in by_protocol["otel-nodejs-thread-context"]}
    assert njs["NJS-02"]["verdict"] == "fail" and "has size 8" in njs["NJS-02"]["reason"], run.explain("NJS-02")
    assert njs["NJS-09"]["verdict"] == "pass", run.explain("NJS-09")
    assert run.returncode == cs.EXIT_FAILURE, run.explain()
    assert "not applicable: schema nodejs_v1_dev" in run.stdout, run.stdout[-3000:]
    # JUnit: every verdict carries its protocol.
    root = ET.parse(run.junit_path).getroot()
    protocols = {p.get("value") for p in root.findall("./testsuite/testcase/properties/property[@name='protocol']")}
    assert protocols == {"otel-process-context", "otel-thread-context", "otel-nodejs-thread-context"}


def test_naming_a_protocol_published_under_another_schema_judges_nothing(runs):
    run = runs["nodejs:named"]
    assert_judged_nothing(run, "not applicable: schema nodejs_v1_dev")
    assert set(run.verdicts().values()) == {"skip"}, run.explain()
    both = runs["nodejs:both-named"]
    assert_judged_nothing(both, "otel-thread-context (--protocol) judged nothing: not applicable: schema nodejs_v1_dev")
    assert "pass" in {r["verdict"] for r in both.report["results"] if r["protocol"] == "otel-process-context"}


# ---- inspect and agent on the Node-schema writer and a process context alone ---------------------------

def started(command: list[str], wait_for: str) -> subprocess.Popen:
    """`command` running, once its process context names `wait_for` (inspect --json)."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = subprocess.run([str(cs.TRACECORR), "inspect", "--json", "--no-threads", str(proc.pid)],
                             capture_output=True, text=True, timeout=30).stdout
        if wait_for in out:
            return proc
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"{command[0]} did not publish {wait_for}")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_inspect_lists_another_schema_as_not_applicable_and_names_the_variable():
    proc = started([str(NODEJS), *WRITER_ARGS], "nodejs_v1_dev")
    try:
        text = subprocess.run([str(cs.TRACECORR), "inspect", str(proc.pid)], capture_output=True, text=True, timeout=60)
        document = json.loads(subprocess.run([str(cs.TRACECORR), "inspect", "--json", str(proc.pid)],
                                             capture_output=True, text=True, timeout=60).stdout)
    finally:
        stop(proc)
    assert text.returncode == 0, text.stderr
    assert "not applicable   schema nodejs_v1_dev" in text.stdout, text.stdout
    assert "otel_thread_ctx_nodejs_v1" in text.stdout, text.stdout
    tctx = document["otel-thread-context"]
    assert tctx["not_applicable"].startswith("schema nodejs_v1_dev"), tctx
    assert [p["symbol"] for p in tctx["passed_over"]] == ["otel_thread_ctx_nodejs_v1"], tctx["passed_over"]
    assert tctx["findings"] == [], tctx["findings"]  # not MUST failures: nothing of this schema is read
    # The process context itself is read and judged as usual.
    assert document["otel-process-context"]["findings"] == [], document["otel-process-context"]["findings"]


def agent(pid: int, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    summary = tmp_path / f"agent-{pid}.json"
    run = subprocess.run([str(cs.TRACECORR), "agent", "--pid", str(pid), "--reader", "ptrace", "--duration", "2",
                          "--json", str(summary)], capture_output=True, text=True, timeout=60)
    return run, json.loads(summary.read_text())


def test_agent_hands_another_schema_to_its_reader_and_says_why_neither_reads_it(tmp_path):
    # The OTEP 4947 reader passes a nodejs_v1_dev process to the Node.js schema's reader, which finds an
    # 8-byte pointer where its 32-byte struct should be: a lookalike of both, read by neither, and both say why.
    proc = started([str(NODEJS), *WRITER_ARGS], "nodejs_v1_dev")
    try:
        run, summary = agent(proc.pid, tmp_path)
    finally:
        stop(proc)
    (listed,) = [p for p in summary["processes"] if p["pid"] == proc.pid]
    assert listed["protocol"] == "otel-nodejs-thread-context", listed
    assert "is 8 bytes, not the 32 of the struct" in listed["state"], listed
    assert "otel-thread-context: " in listed["state"] and "schema nodejs_v1_dev" in listed["state"], listed
    assert run.returncode == 1, run.stderr  # nothing sampled: said, not a silent success
    assert "nothing sampled" in run.stderr and "schema nodejs_v1_dev" in run.stderr, run.stderr


def test_agent_lists_a_process_context_alone_with_its_resource(tmp_path):
    proc = started([str(PCTX_WRITER), "--service-name", "gate-fixture"], "gate-fixture")
    try:
        run, summary = agent(proc.pid, tmp_path)
    finally:
        stop(proc)
    (listed,) = [p for p in summary["processes"] if p["pid"] == proc.pid]
    assert listed["protocol"] is None, listed
    assert listed["process_context_only"]["resource"]["service.name"] == "gate-fixture", listed
    assert "publishes only an OTel process context" in listed["state"], listed
    assert "service.name=gate-fixture" in run.stderr, run.stderr
    # Named, with the protocols looked for: its per-thread records and Elastic's library.
    assert run.returncode == 1 and "otel-thread-context" in run.stderr and "elastic-v1" in run.stderr, run.stderr


# ---- attach mode: every protocol the process publishes --------------------------------------------------

def attach_run(pid: int, tmp_path: Path, name: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / f"{name}.json"
    run = subprocess.run([str(cs.TRACECORR), "conform", "--pid", str(pid), "--json", str(report)],
                         capture_output=True, text=True, timeout=cs.RUN_TIMEOUT_S)
    return run, json.loads(report.read_text())


def test_attach_mode_judges_every_protocol_the_process_publishes(tmp_path):
    """The OTEP 4947 reference publishes both OTel contexts: an attached run
    judges both (their attach sessions one after the other, on one process);
    the Node-schema writer's thread context is listed as not applicable by
    OTEP 4947 and judged by the Node.js package, which fails its 8-byte
    variable (NJS-02)."""
    proc = started([str(TCTX_WRITER), *WRITER_ARGS], "tlsdesc_v1_dev")
    try:
        both, report = attach_run(proc.pid, tmp_path, "both")
    finally:
        stop(proc)
    sections = {p["id"]: p for p in report["protocols"]}
    assert set(sections) == {"otel-process-context", "otel-thread-context"}, report["protocols"]
    assert all(p["status"] == "judged" for p in sections.values()), sections
    assert all(p["chosen_by"] == f"attached: pid {proc.pid} publishes it" for p in sections.values()), sections
    assert not [r for r in report["results"] if r["verdict"] == "fail"], both.stdout[-4000:]
    assert both.returncode == cs.EXIT_OK, both.stdout[-4000:]
    proc = started([str(NODEJS), *WRITER_ARGS], "nodejs_v1_dev")
    try:
        node, report = attach_run(proc.pid, tmp_path, "node")
    finally:
        stop(proc)
    sections = {p["id"]: p for p in report["protocols"]}
    assert sections["otel-thread-context"]["status"] == "not-applicable", sections
    assert sections["otel-process-context"]["status"] == "judged", sections
    assert sections["otel-nodejs-thread-context"]["status"] == "judged", sections
    failed = {r["id"] for r in report["results"] if r["verdict"] == "fail"}
    assert "NJS-02" in failed and not {f for f in failed if not f.startswith("NJS-")}, node.stdout[-4000:]
    assert node.returncode == cs.EXIT_FAILURE, node.stdout[-4000:]
