"""The OTel thread context (OTEP 4947) from Python: a Target of the protocol launches the reference
writer, waits until it has published, and its inspect() (and the package's helpers) give every thread's
record, checked against the writer's journal."""
from __future__ import annotations

import json
import sys
import time

import pytest

from build_products import HOST_ARCH, REPO, need, package_fixture_program

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr

from tracecorr import otel_thread_context as tctx

pytestmark = pytest.mark.skipif(HOST_ARCH != "x86_64", reason="runs the x86-64 writer natively")

WAIT_S = 20.0


def journal_records(path, count):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        lines = [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []
        records = {r["tid"]: r for r in lines if r["event"] == "record"}
        if len(records) >= count:
            return records
        time.sleep(0.05)
    pytest.fail(f"the writer journaled fewer than {count} records")


def test_a_target_of_the_protocol_reads_every_threads_record(tmp_path):
    program = need(package_fixture_program("otel_thread_context", "otel-tctx-writer", HOST_ARCH).parent / "tlsdesc" /
                   "otel-tctx-writer")
    journal = tmp_path / "journal.jsonl"
    with tracecorr.Target([str(program), "--threads", "3", "--hold"], protocol=tctx.PROTOCOL,
                          env={"TRACECORR_FIXTURE_JOURNAL": str(journal)}) as target:
        assert target.protocol.id == tctx.PROTOCOL and target.protocol.module is tctx
        ready = target.wait_ready()
        assert tctx.not_ready(ready) is None
        published = journal_records(journal, 3)

        document = target.inspect()
        assert document["access"]["model"] == "tlsdesc-static"
        records = tctx.records(document)
        assert set(records) == set(published)
        for tid, meant in published.items():
            record = records[tid]
            assert (record["trace_id"], record["span_id"], record["trace_flags"]) == \
                (meant["trace_id"], meant["span_id"], meant["trace_flags"])
            assert tctx.attributes(record)["http.route"] == dict(meant["attributes"])["http.route"]
        assert set(target.thread_records()) == set(published)
        assert document["findings"] == []

        # The profiler's side: distinct records seen across looks, each thread's once while it holds its span.
        with target.protocol.profiler(target) as reader:
            seen = reader.read_for(0.2)
        assert {(r["trace_id"], r["span_id"]) for r in seen} == {(m["trace_id"], m["span_id"]) for m in published.values()}


def test_not_ready_says_what_is_missing():
    assert "otel_thread_ctx_v1" in tctx.not_ready({"variable": None})
    assert "schema" in tctx.not_ready({"variable": {}, "process_context": {"known_schema": False}})
