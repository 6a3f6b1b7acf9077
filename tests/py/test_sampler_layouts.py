"""Both samplers read records through a RecordLayout given from Python.

The target (tests/unit/data/layout_record_target.c, built into
<build>/testdata) publishes, one thread per kind, records whose 28-byte header
says how long they are (OTEP 4947's shape), plus one record behind a pointer in
a memory area. A layout made here, as data, must be enough for the ptrace and
the BPF sampler to deliver the same bytes for the same thread state: the
declared length, cut at the layout's bound (and said to be), nothing from a
record whose declared bytes are unmapped.
"""
from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from build_products import BUILD, REPO, need

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr

TARGET = BUILD / "testdata" / "layout_record_target"
pytestmark = pytest.mark.root


def size_field_layout(**extra) -> tracecorr.RecordLayout:
    return tracecorr.RecordLayout(
        "python size-field record", size_field=(26, 2, 28), max_size=640, valid_offset=24, valid_values=[1],
        fields=[("trace-id", 0, 16), ("span-id", 16, 8), ("valid", 24, 1), ("attrs-data-size", 26, 2)], **extra)


class Published:
    """The running target and what it says it published."""

    def __init__(self):
        self.proc = subprocess.Popen([str(need(TARGET))], stdout=subprocess.PIPE)
        self.threads: dict[int, dict] = {}
        # The raw pipe, not a buffered reader: select() cannot see lines a reader has buffered.
        text = b""
        deadline = time.monotonic() + 10
        while b"ready\n" not in text and time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout.fileno()], [], [], 0.5)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                text += chunk
        for line in text.decode().splitlines():
            words = line.split()
            if words[0] == "tls_offset":
                self.tls_offset = int(words[1])
            elif words[0] == "area":
                self.area_address = int(words[1], 16)
                self.area_record = bytes.fromhex(words[4])
            elif words[0] == "thread":
                tid, kind, record, _length, declared, hexed = words[1:7]
                self.threads[int(tid)] = {"kind": kind, "record": int(record, 16), "declared": int(declared),
                                          "bytes": None if hexed == "-" else bytes.fromhex(hexed)}
        assert len(self.threads) == 6, f"the target did not publish every kind: {self.threads}"

    def close(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def published():
    p = Published()
    yield p
    p.close()


def sampler(reader: str):
    if reader == "bpf" and not tracecorr.HAVE_BPF:
        pytest.skip("this tracecorr was built without the BPF sampler")
    try:
        return tracecorr.make_sampler(reader, 499 if reader == "bpf" else 200)
    except tracecorr.TracecorrError as e:
        if os.geteuid() != 0:
            pytest.skip(f"the BPF sampler needs root here: {e}")
        raise


def each_thread(s, published: Published) -> dict[int, dict]:
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + 15
    while len(seen) < len(published.threads) and time.monotonic() < deadline:
        for sample in s.poll(0.1):
            if sample["tid"] in published.threads:
                seen[sample["tid"]] = sample
    assert len(seen) == len(published.threads), f"sampled only {sorted(seen)} of {sorted(published.threads)}"
    return seen


def test_layout_lengths_from_python():
    layout = size_field_layout()
    assert layout.fixed_part == 28
    header = bytearray(28)
    header[26:28] = (100).to_bytes(2, sys.byteorder)
    assert layout.record_length(bytes(header)) == 128
    header[26:28] = (700).to_bytes(2, sys.byteorder)
    with pytest.raises(tracecorr.TracecorrError, match="attrs-data-size"):
        layout.record_length(bytes(header))
    with pytest.raises(tracecorr.TracecorrError, match="28 bytes"):
        layout.record_length(bytes(10))
    with pytest.raises(tracecorr.TracecorrError, match="width 3"):
        tracecorr.RecordLayout("bad", size_field=(26, 3, 28), valid_offset=24)
    # A protocol's layout comes from its package.
    elastic = tracecorr.elastic_v1.tls_record_layout()
    assert elastic.fixed_part == tracecorr.elastic_v1.spec.kTlsRecordSize and elastic.in_tls_slot
    assert tracecorr.RECORD_MAX_BYTES >= 640


@pytest.mark.parametrize("reader", ["ptrace", "bpf"])
def test_samplers_read_size_field_records_through_the_tls_slot(reader, published):
    s = sampler(reader)
    with pytest.raises(ValueError, match="tls_offset"):
        s.track(published.proc.pid, size_field_layout(), area_address=published.area_address)
    s.track(published.proc.pid, size_field_layout(), tls_offset=published.tls_offset)
    seen = each_thread(s, published)
    for tid, want in published.threads.items():
        got = seen[tid]
        kind = want["kind"]
        if kind == "none":
            assert got["error"] == "record_pointer_null" and got["record"] is None, kind
            continue
        assert got["record_pointer"] == want["record"], kind
        if kind == "unmapped":
            assert got["error"] == "record_read_failed" and got["record"] is None, kind
            continue
        assert got["record"] == want["bytes"], kind
        assert got["record_declared_length"] == want["declared"], kind
        assert got["error"] == ("record_truncated" if kind == "oversized" else "ok"), kind
    counters = s.counters()
    assert counters["record_truncated"] >= 1 and counters["valid_zero"] >= 1, counters
    assert counters["lost"] == 0, counters


@pytest.mark.parametrize("reader", ["ptrace", "bpf"])
def test_samplers_read_the_record_behind_a_memory_area(reader, published):
    s = sampler(reader)
    layout = size_field_layout(memory_area_pointer_offset=8)
    assert not layout.in_tls_slot
    s.track(published.proc.pid, layout, area_address=published.area_address)
    for tid, got in each_thread(s, published).items():
        assert got["error"] == "ok" and got["record"] == published.area_record, (tid, got["error"])
