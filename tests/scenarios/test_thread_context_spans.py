"""A tracer's threads move from span to span while a profiler samples them (OTEP 4947).

The reference writer (fixtures/otel_thread_context) runs two threads, each starting a span every
40 ms, publishing it through its thread-local `otel_thread_ctx_v1` and exporting it over OTLP once it
ends. The host agent's sampler reads every thread's record from outside for two seconds, the way a
profiler does at sample time (BPF where it can load, else ptrace). What a profiler then attaches to
its samples must be true of the spans the tracer exported: each record read names an exported span
of that trace (TCTX-27 from the reader's side), carries that span's W3C flags (TCTX-14), and its
attributes are named through the key map the process context publishes (TCTX-11).
"""
import pytest

import tracecorr
from build_products import HOST_ARCH, need, package_fixture_program
from scenario_support import WAIT_S
from tracecorr.otel_thread_context import PROTOCOL, RecordReader, attributes, sampled_records

# The writer in the recommended model (TLSDESC in a shared library); reference/models.json lists the others.
WRITER = package_fixture_program("otel_thread_context", "otel-tctx-writer", HOST_ARCH).parent / "tlsdesc" / \
    "otel-tctx-writer"
KEYS = {"http.route", "http.method", "tracecorr.note", "http.status_code"}  # the writer's key map


@pytest.mark.root
@pytest.mark.requirement("TCTX-11", "TCTX-14", "TCTX-27")
def test_every_sampled_record_names_an_exported_span():
    command = [str(need(WRITER)), "--threads", "2", "--span-ms", "40"]
    with tracecorr.OtlpReceiver() as receiver, \
            tracecorr.Target(command, receiver, protocol=PROTOCOL) as target:
        target.wait_ready()
        process = RecordReader(target).sample(2.0, "bpf" if tracecorr.HAVE_BPF else "ptrace", frequency_hz=199)
        read = {(r["trace_id"], r["span_id"]): r for records in sampled_records(process).values() for r in records
                if r["valid"] == 1}
        assert len(read) >= 10, f"only {len(read)} distinct spans sampled in 2 s of 40 ms spans: {process}"

        def all_exported(spans) -> bool:
            exported = {(s.trace_id.hex(), s.span_id.hex()) for s in spans}
            return set(read) <= exported

        # A span still running when sampling stopped is exported when it ends: wait, bounded.
        receiver.wait_for(all_exported, WAIT_S)
        spans = {(s.trace_id.hex(), s.span_id.hex()): s for s in receiver.spans()}

    never_exported = sorted(set(read) - set(spans))
    assert not never_exported, f"{len(never_exported)} of {len(read)} records name spans never exported: " \
                               f"{never_exported[:5]}"
    for ids, record in read.items():
        span = spans[ids]
        assert record["trace_flags"] == span.flags & 0xff, (ids, record["trace_flags"], span.flags)
        named = attributes(record)
        assert named and set(named) <= KEYS, (ids, record)
        assert not record["unknown_keys"], (ids, record)
