"""The samplers read a thread's record in every TLS access model, dynamic TLS included.

Targets are the OTEP 4947 writer fixtures (fixtures/otel_thread_context), one program per TLS model a
library or executable can give `otel_thread_ctx_v1` (static and dynamic TLS descriptors, general dynamic,
initial exec, local exec, static-pie; glibc and musl). Each runs two workers that publish one record and burn
CPU (`--hold`). The engine finds how the process's threads reach the variable (`resolve_tls_variable`: a
thread-pointer offset, or a module's block through each thread's DTV) and the sampler is given only that:
the BPF program walks the DTV itself. What a sample carries must be what the writer published: the record
address it journaled, and the bytes /proc/PID/mem shows there.

x86-64 only: BPF runs natively here; arm64 BPF runs in tests/py/test_arm64_system.py's VM.
"""
from __future__ import annotations

import struct
import sys
import time

import pytest

from build_products import HOST_ARCH, REPO
from fixture_process import WAIT_S
from thread_context_writer import DYNAMIC_TLS, held_writer

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr

pytestmark = [pytest.mark.root, pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the BPF sampler runs natively on x86-64 here")]

THREADS = 2
# The OTEP's record as data: trace_id[16], span_id[8], valid u8, trace_flags u8, attrs_data_size u16.
RECORD_HEADER = struct.Struct("<16s8sBBH")

# (fixture model, environment, the access model the engine must find)
MODELS = [
    ("tlsdesc", {}, "tlsdesc-static"),
    ("tlsdesc-dlopen", {}, "tlsdesc-static"),  # glibc's optional static TLS while it lasts
    ("tlsdesc-dlopen", DYNAMIC_TLS, "tlsdesc-dynamic"),
    ("general-dynamic", {}, "general-dynamic"),
    ("lib-initial-exec", {}, "initial-exec"),
    ("exe-initial-exec", {}, "local-exec"),
    ("exe-local-exec", {}, "local-exec"),
    ("static-pie", {}, "local-exec"),
    ("musl-tlsdesc", {}, "tlsdesc-static"),
    ("musl-dlopen", {}, "tlsdesc-dynamic"),
    ("musl-general-dynamic", {}, "general-dynamic"),
    ("musl-static-pie", {}, "local-exec"),
    ("rust-cdylib", {}, "tlsdesc-static"),  # a Rust cdylib: the variable after std's thread-locals, dlopen()ed
]


def record_layout() -> tracecorr.RecordLayout:
    return tracecorr.RecordLayout(
        "OTEP 4947 record", size_field=(26, 2, RECORD_HEADER.size), max_size=640, valid_offset=24, valid_values=[1],
        fields=[("trace-id", 0, 16), ("span-id", 16, 8), ("valid", 24, 1), ("attrs-data-size", 26, 2)])


def bpf_sampler():
    if not tracecorr.HAVE_BPF:
        pytest.skip("this tracecorr was built without the BPF sampler")
    return tracecorr.make_sampler("bpf", 499)


@pytest.mark.parametrize("model,env,access_model", MODELS,
                         ids=[m + ("-dynamic-tls" if e else "") for m, e, _ in MODELS])
def test_bpf_sampler_reads_the_record_in_every_tls_model(model, env, access_model, tmp_path):
    with held_writer(model, env, tmp_path / "journal.jsonl", THREADS) as (writer, journaled):
        published = {tid: int(e["record"], 16) for tid, e in journaled.items()}
        pid = writer.proc.pid

        variable = tracecorr.resolve_tls_variable(pid, library_regex=r".*/libotel-tctx-writer\.so",
                                                  tls_symbol="otel_thread_ctx_v1", look_in_executables=True)
        assert variable.model == access_model, variable.explanation
        assert variable.dynamic == (access_model in ("tlsdesc-dynamic", "general-dynamic"))

        sampler = bpf_sampler()
        sampler.track(pid, record_layout(), tls_variable=variable)
        seen: dict[int, dict] = {}
        deadline = time.monotonic() + WAIT_S
        while len(seen) < len(published) and time.monotonic() < deadline:
            for sample in sampler.poll(0.1):
                if sample["tid"] in published and sample["error"] == "ok":
                    seen[sample["tid"]] = sample
        counters = sampler.counters()
        assert set(seen) == set(published), f"records read for {sorted(seen)} of {sorted(published)}: {counters}"
        for tid, address in published.items():
            got = seen[tid]
            assert got["record_pointer"] == address, tid
            # A held record does not change: what the sample carries is what the process's memory holds.
            header = writer.read(address, RECORD_HEADER.size)
            *_, valid, _flags, size = RECORD_HEADER.unpack(header)
            assert valid == 1
            assert got["record"] == writer.read(address, RECORD_HEADER.size + size), tid
            assert got["record_declared_length"] == RECORD_HEADER.size + size
        assert counters["record_pointer_read_failed"] == 0, counters
        assert counters["lost"] == 0, counters

