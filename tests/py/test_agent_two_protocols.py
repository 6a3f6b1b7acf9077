"""`tracecorr agent` samples a process that publishes Elastic v1 and OTEP 4947 at once under both (issue 26).

The class: one process, two protocols (a JVM with Elastic's agent beside an OTel SDK, a tracer writing both
records). The target is fixtures/otel_thread_context/with_elastic_variant.cmake: Elastic's reference fixture that
also publishes each worker's span as an OTel thread context, with its process context and key map. Under `--hold`
each worker journals both records it published ("record": Elastic's, "otel_record": the OTel one) for the same span.

The agent tracks the process with two layouts (a layout slot each: Elastic's hook, SampledProcesses), the sampler
reads every thread's record by each, and the summary lists the process under each protocol with its own counts:
the Elastic entry's distinct records are exactly what the workers journaled, and the OTel entry's per-thread
records carry the same trace and span ids. A build that samples a process under one layout (the issue's "sampled as
Elastic only") lists no OTel entry for it and fails here.

x86-64 only: BPF runs natively here; the ptrace reader needs no BPF.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from build_products import HOST_ARCH, REGISTRY, REPO, TRACECORR, need
from dual_fixture import THREADS, DualFixture

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the BPF sampler runs natively on x86-64 here")]

OTEL = "otel-thread-context"
DURATION_S = 3
FREQUENCY_HZ = {"bpf": 199, "ptrace": 20}
TLS = {f["name"]: f for f in REGISTRY["layouts"]["tls_record"]["fields"]}
TLS_SIZE = REGISTRY["layouts"]["tls_record"]["size"]


@pytest.fixture
def dual(tmp_path):
    fx = DualFixture(tmp_path)
    try:
        yield fx
    finally:
        fx.stop()


def elastic_record_hex(ev: dict) -> str:
    """The Elastic record a "record" journal line describes, as the agent lists it."""
    rec = bytearray(TLS_SIZE)
    minor = TLS["layout_minor_version"]
    rec[minor["offset"]:minor["offset"] + minor["size"]] = int(ev["minor"]).to_bytes(minor["size"], "little")
    for name in ("valid", "trace_present", "trace_flags"):
        rec[TLS[name]["offset"]] = ev[name]
    for name in ("trace_id", "span_id", "transaction_id"):
        f = TLS[name]
        rec[f["offset"]:f["offset"] + f["size"]] = bytes.fromhex(ev[name])
    return rec.hex()


def run_agent(pid: int, reader: str) -> tuple[dict, str]:
    r = subprocess.run([str(need(TRACECORR)), "agent", "--pid", str(pid), "--reader", reader, "--duration",
                        str(DURATION_S), "--frequency", str(FREQUENCY_HZ[reader]), "--json", "-"],
                       capture_output=True, text=True, timeout=DURATION_S + 60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


@pytest.mark.parametrize("reader", ["bpf", "ptrace"])
def test_agent_samples_a_process_under_both_protocols(dual, reader):
    if reader == "bpf" and not tracecorr.HAVE_BPF:
        pytest.skip("this tracecorr was built without the BPF sampler")
    summary, log = run_agent(dual.pid, reader)
    assert summary["reader"] == reader
    entries = [p for p in summary["processes"] if p["pid"] == dual.pid]
    by_protocol = {p["protocol"]: p for p in entries}
    assert len(by_protocol) == len(entries) == 2, f"listed under {[p['protocol'] for p in entries]}: {log}"
    assert OTEL in by_protocol, f"sampled as {list(by_protocol)} only: {log}"
    (elastic_id,) = set(by_protocol) - {OTEL}
    elastic, otel = by_protocol[elastic_id], by_protocol[OTEL]

    # Elastic v1: every distinct record read is one a worker holds, and each worker's was read.
    held = {elastic_record_hex(ev) for ev in dual.last("record").values()}
    assert len(held) == THREADS
    assert {r["hex"] for r in elastic["records"]} == held, elastic["state"]
    assert elastic["samples"] > 0 and elastic["correlated"] > 0, elastic

    # OTEP 4947: each worker's thread shows the span it attached, the same ids as its Elastic record.
    assert not otel["exited"] and otel["state"].startswith("sampling"), otel["state"]
    threads = {t["tid"]: t for t in otel["threads"]}
    published = dual.last("otel_record")
    elastic_spans = {tid: (ev["trace_id"], ev["span_id"]) for tid, ev in dual.last("record").items()}
    for tid, meant in published.items():
        assert meant["attached"] and elastic_spans[tid] == (meant["trace_id"], meant["span_id"]), (meant,
                                                                                                     elastic_spans)
        thread = threads.get(tid)
        assert thread is not None, f"worker {tid} never sampled for {OTEL}: {sorted(threads)}"
        assert len(thread["records"]) == 1, thread  # a held record never changes
        record = thread["records"][0]["record"]
        assert (record["trace_id"], record["span_id"]) == (meant["trace_id"], meant["span_id"]), tid
        assert record["valid"] == 1 and record["trace_flags"] == meant["trace_flags"]
    assert otel["records_read"] >= sum(threads[tid]["samples"] for tid in published) > 0

    # Each protocol its own counts, summed in the totals; the console says it too.
    assert summary["totals"]["samples"] >= elastic["samples"] + otel["samples"]
    assert f"pid {dual.pid}: sampled under 2 protocols" in log, log
    # One interrupt, two records: the sampler emitted one per layout.
    assert summary["sampler"]["emitted"] >= elastic["samples"] + otel["samples"], summary["sampler"]
