"""The OTEP 4719 writer fixtures (fixtures/otel_process_context) publish what the OTEP says.

Checked from outside, the way a profiler reads a process, and without tracecorr's
reader (its bugs must not hide the writer's): tests/support/process_context_oracle.py
finds the mapping by name in /proc/PID/maps, reads the 32-byte header and the payload
through /proc/PID/mem under the timestamp and decodes the payload with a wire-format
walker of its own; when protoc is installed, protoc decodes it too, against a schema
written here. The x86-64
programs run natively, the arm64 ones under qemu-aarch64 (guest addresses are host
addresses there: qemu-user maps 64-bit guests at guest_base 0, which the first
test checks against maps).

Build outputs: <build>/fixtures/<arch>/otel_process_context/{reference,mutants/<name>}/otel-ctx-writer.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from build_products import HOST_ARCH, REPO, need, package_fixture_program
from fixture_process import FixtureProcess, command_for
from process_context_oracle import HEADER, SIGNATURE, consistent_read, context_mappings, mappings, process_context

PACKAGE = "otel_process_context"
PROGRAM = "otel-ctx-writer"
MUTANTS = json.loads((REPO / "fixtures" / PACKAGE / "mutants" / "mutants.json").read_text())
ARCHES = ["x86_64", "arm64"]
PROTOC = shutil.which("protoc")
STRACE = shutil.which("strace")

UPDATE_COUNT_KEY = "tracecorr.fixture.update_count"
BASE_ARGS = ["--service-name", "pctx-test", "--attribute", "deployment.environment.name=test"]

# Consistent-read attempts before giving up (the writer under test updates at most every 20 ms).
READ_ATTEMPTS = 1000


def program(arch, mutant=None):
    return need(package_fixture_program(PACKAGE, PROGRAM, arch, mutant))


# ---- protobuf: tests/support/process_context_oracle.py; protoc, when installed ----

# The schema protoc checks the payload against, from OTLP's field numbers
# (common/v1, resource/v1) and the OTEP's ProcessContext.
PROTO_SCHEMA = """syntax = "proto3";
package pctx_test;
message AnyValue {
  oneof value {
    string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
    ArrayValue array_value = 5; KeyValueList kvlist_value = 6; bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
message KeyValue { string key = 1; AnyValue value = 2; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message ProcessContext { Resource resource = 1; repeated KeyValue attributes = 2; }
"""


def protoc_decode(tmp_path, payload):
    """protoc's text rendering of the payload as a ProcessContext (asserting it parses)."""
    schema = tmp_path / "pctx_test.proto"
    schema.write_text(PROTO_SCHEMA)
    r = subprocess.run([PROTOC, f"--proto_path={tmp_path}", "--decode=pctx_test.ProcessContext", schema.name],
                       input=payload, capture_output=True, check=False)
    assert r.returncode == 0, f"protoc rejects the payload: {r.stderr.decode(errors='replace')}"
    return r.stdout.decode()


# ---- a running writer --------------------------------------------------------

class Writer(FixtureProcess):
    """One otel-ctx-writer (tests/support/fixture_process.py), read as a profiler reads it
    (tests/support/process_context_oracle.py)."""

    FIRST_LINE = re.compile(r"otel-ctx-writer pid=(\d+) mapping=(0x[0-9a-f]+|none) payload=(after-header|separate)")

    def __init__(self, arch, journal_path, args=(), mutant=None, wrap=()):
        super().__init__(list(wrap) + command_for(arch, program(arch, mutant)) + list(args), journal_path)
        line = self.read_line()
        m = self.FIRST_LINE.fullmatch(line)
        assert m, f"unexpected first stdout line {line!r}"
        self.pid = int(m.group(1))
        self.mapping = None if m.group(2) == "none" else int(m.group(2), 16)
        self.placement = m.group(3)

    def mappings(self, pid=None):
        return mappings(pid or self.pid)

    def context_mappings(self, pid=None):
        return context_mappings(pid or self.pid)

    def vm_flags(self, start):
        smaps = Path(f"/proc/{self.pid}/smaps").read_text()
        section = smaps[smaps.index(f"{start:x}-"):]
        return set(re.search(r"^VmFlags:(.*)$", section, re.M).group(1).split())

    def consistent_read(self, start):
        """The OTEP's reading protocol: (header fields, payload bytes) under one non-zero timestamp."""
        result = consistent_read(self.pid, start, READ_ATTEMPTS)
        if result is None:
            pytest.fail(f"no consistent read in {READ_ATTEMPTS} attempts")
        return result

    def payloads_by_timestamp(self, start, updates):
        """{timestamp: {(payload, payload_size, bytes)}} from consistent reads until the
        journal has `updates` updates. A conforming writer never shows two payloads
        under one timestamp."""
        seen = {}

        def read():
            (_, _, size, timestamp, payload), body = self.consistent_read(start)
            seen.setdefault(timestamp, set()).add((payload, size, body))
            time.sleep(0.001)

        self.wait_journal("update", updates, between=read)
        return seen


@pytest.fixture
def writers(tmp_path):
    started = []

    def start(arch, args=(), mutant=None, wrap=()):
        w = Writer(arch, tmp_path / f"journal-{len(started)}.jsonl", args, mutant, wrap)
        started.append(w)
        return w

    yield start
    for w in started:
        if w.proc.returncode is None:
            w.stop()


def boottime_of_start(pid):
    """When the process started, in CLOCK_BOOTTIME nanoseconds (at clock-tick precision)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])
    return start_ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def only_mapping(writer):
    found = writer.context_mappings()
    assert len(found) == 1, [m.name for m in found]
    return found[0]


# ---- the reference -------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHES)
def test_reference_publishes_a_readable_context(arch, writers, tmp_path):
    w = writers(arch, BASE_ARGS + ["--extra", "threadlocal.schema_version=tlsdesc_v1_dev", "--typed-examples"])
    mapping = only_mapping(w)
    assert mapping.name.startswith("/memfd:OTEL_CTX"), mapping.name
    assert mapping.start == w.mapping, "the first line names the mapping maps shows"
    assert mapping.perms == "rw-p"

    (signature, version, size, timestamp, payload), body = w.consistent_read(mapping.start)
    assert signature == SIGNATURE
    assert version == 2
    assert boottime_of_start(w.pid) - 10_000_000 <= timestamp <= time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    assert len(body) == size <= 65536

    decoded = process_context(body)  # every declared byte is part of the message
    assert decoded["resource"] == [("service.name", "pctx-test"), ("deployment.environment.name", "test")]
    assert decoded["attributes"] == [
        ("threadlocal.schema_version", "tlsdesc_v1_dev"),
        ("example.bool", True), ("example.int", -42), ("example.double", 1.5), ("example.bytes", b"\x00\xff"),
        ("example.array", ["a", 1]), ("example.kvlist", {"k": "v"}),
        (UPDATE_COUNT_KEY, 0),
    ]
    if PROTOC is not None:
        text = protoc_decode(tmp_path, body)
        assert 'key: "threadlocal.schema_version"' in text and "int_value: -42" in text

    publish, = w.journal("publish")
    assert (publish["timestamp"], int(publish["payload"], 16), publish["payload_size"]) == (timestamp, payload, size)
    assert publish["name_attempted"], "prctl(PR_SET_VMA_ANON_NAME) is called even where it fails"


@pytest.mark.skipif(HOST_ARCH != "x86_64", reason="runs the x86-64 programs natively")
def test_mapping_is_dontfork_and_a_forked_child_has_none(writers):
    # Natively only: qemu-user 7.2 turns madvise() into a no-op, so under qemu the
    # flag is missing and children inherit the mapping whatever the writer does.
    w = writers("x86_64", BASE_ARGS)
    mapping = only_mapping(w)
    assert "dc" in w.vm_flags(mapping.start)

    os.kill(w.pid, signal.SIGUSR1)
    m = re.fullmatch(r"forked pid=(\d+)", w.read_line())
    assert m
    child = int(m.group(1))
    assert os.getpgid(child) == w.proc.pid, "the child lives on, in the writer's process group"
    assert w.context_mappings(child) == []
    assert len(w.context_mappings()) == 1, "the parent keeps its context"
    w.stop()
    assert w.returncode == 0, "SIGTERM ends the writer with status 0"


@pytest.mark.parametrize("arch", ARCHES)
def test_updates_publish_new_payloads_under_later_timestamps(arch, writers):
    w = writers(arch, BASE_ARGS + ["--update-ms", "20", "--updates", "5"])
    updates = w.wait_journal("update", 5)
    publish, = w.journal("publish")
    stamps = [publish["timestamp"]] + [u["timestamp"] for u in updates]
    assert stamps == sorted(set(stamps)), "every update's timestamp is later than the one before"
    assert [u["previous_timestamp"] for u in updates] == stamps[:-1]
    payloads = [publish["payload"]] + [u["payload"] for u in updates]
    assert all(a != b for a, b in zip(payloads, payloads[1:])), "each update's payload is a new allocation"
    assert all(u["name_attempted"] for u in updates), "prctl is re-issued on every update"

    (_, _, size, timestamp, payload), body = w.consistent_read(only_mapping(w).start)
    assert (timestamp, payload, size) == (stamps[-1], int(updates[-1]["payload"], 16), updates[-1]["payload_size"])
    assert (UPDATE_COUNT_KEY, 5) in process_context(body)["attributes"]


def test_reference_never_shows_two_payloads_under_one_timestamp(writers):
    w = writers(HOST_ARCH, BASE_ARGS + ["--update-ms", "20", "--updates", "10"])
    seen = w.payloads_by_timestamp(only_mapping(w).start, 10)
    assert all(len(payloads) == 1 for payloads in seen.values())


def traced_prctl_naming_calls(writers, tmp_path, args, mutant=None):
    """(prctl(PR_SET_VMA) calls, publications + updates journaled) of a writer run under strace."""
    if STRACE is None:
        pytest.skip("strace not installed")
    trace = tmp_path / f"strace-{mutant or 'reference'}.txt"
    w = writers(HOST_ARCH, args + ["--update-ms", "20", "--updates", "3"], mutant=mutant,
                wrap=[STRACE, "-f", "-qq", "-e", "trace=prctl", "-o", str(trace)])
    w.wait_journal("update", 3)
    w.stop()
    calls = [line for line in trace.read_text().splitlines()
             if "prctl(" in line and ("PR_SET_VMA" in line or "0x53564d41" in line)]
    return len(calls), len(w.journal("publish")) + len(w.journal("update"))


@pytest.mark.skipif(HOST_ARCH != "x86_64", reason="runs the x86-64 programs natively")
def test_reference_names_its_mapping_on_publish_and_every_update(writers, tmp_path):
    calls, publications = traced_prctl_naming_calls(writers, tmp_path, BASE_ARGS)
    assert calls == publications == 4


# ---- reference variants ------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHES)
def test_payload_after_header_variant(arch, writers):
    w = writers(arch, BASE_ARGS + ["--payload", "after-header"])
    assert w.placement == "after-header"
    mapping = only_mapping(w)
    (_, _, _, _, payload), body = w.consistent_read(mapping.start)
    assert payload == mapping.start + HEADER.size
    assert process_context(body)["resource"][0] == ("service.name", "pctx-test")


@pytest.mark.parametrize("arch", ARCHES)
def test_version_1_variant_warns(arch, writers):
    w = writers(arch, BASE_ARGS + ["--version-1"])
    (_, version, _, _, _), _ = w.consistent_read(only_mapping(w).start)
    assert version == 1
    assert any("version 1" in e["text"] for e in w.journal("warning"))


@pytest.mark.skipif(HOST_ARCH != "x86_64", reason="runs the x86-64 programs natively")
def test_late_publisher_updates_once_from_each_worker(writers):
    """--publish-after-ms publishes late; --worker-updates N starts N threads --worker-start-ms apart after it,
    each updating the context once as it starts (an SDK whose tracer starts with each worker)."""
    w = writers(HOST_ARCH, BASE_ARGS + ["--publish-after-ms", "300", "--worker-updates", "3", "--worker-start-ms", "150"])
    updates = w.wait_journal("update", 3)
    config, = w.journal("config")
    published, = w.journal("publish")
    assert published["t"] - config["t"] >= 300e6
    gaps = [b["t"] - a["t"] for a, b in zip([published, *updates], updates)]
    assert all(gap >= 140e6 for gap in gaps), gaps
    assert [u["count"] for u in updates] == [1, 2, 3]
    time.sleep(0.3)
    assert len(w.journal("update")) == 3, "each worker updates once"


@pytest.mark.parametrize("arch", ARCHES)
def test_anonymous_fallback_needs_prctl_naming(arch, writers):
    w = writers(arch, BASE_ARGS + ["--no-memfd"])
    published = w.journal("publish")
    if published:  # a kernel with CONFIG_ANON_VMA_NAME named it
        assert published[0]["backing"] == "anonymous" and published[0]["name_errno"] == 0
        assert only_mapping(w).name.startswith("[anon:OTEL_CTX]")
    else:  # no name, no reader could find it: publication failed, and the writer says so
        failed, = w.journal("publish_failed")
        assert failed["backing"] == "anonymous" and failed["name_errno"] != 0
        assert w.mapping is None
        assert w.context_mappings() == []
        assert any("publication failed" in e["text"] for e in w.journal("warning"))


# ---- mutants -----------------------------------------------------------------

def mutant_args(name):
    return next(m["args"] for m in MUTANTS["mutants"] if m["name"] == name)


def test_one_mutant_per_writer_rule():
    requirements = [m["requirement"] for m in MUTANTS["mutants"]]
    assert requirements == [f"PCTX-{i:02d}" for i in range(1, 19)]
    assert all(isinstance(m["args"], list) for m in MUTANTS["mutants"])


@pytest.mark.parametrize("arch", ARCHES)
def test_every_mutant_is_built(arch):
    program(arch)
    for m in MUTANTS["mutants"]:
        assert package_fixture_program(PACKAGE, PROGRAM, arch, m["name"]).exists(), m["name"]


@pytest.mark.parametrize("arch", ARCHES)
def test_two_mappings_mutant_shows_two_mappings(arch, writers):
    w = writers(arch, mutant_args("two-mappings"), mutant="two-mappings")
    found = w.context_mappings()
    assert len(found) == 2, [m.name for m in found]
    assert w.mapping in {m.start for m in found}
    for mapping in found:
        (signature, _, _, _, _), body = w.consistent_read(mapping.start)
        assert signature == SIGNATURE
        assert process_context(body)["resource"][0] == ("service.name", "pctx-fixture")


# What each mutant breaks, seen from outside as a profiler (or strace) would see it.

def _consistent(w):
    return w.consistent_read(only_mapping(w).start)


def _misnamed(w):
    assert w.context_mappings() == []
    assert any(m.name.startswith("/memfd:otel_ctx") for m in w.mappings())


def _bad_signature(w):
    assert _consistent(w)[0][0] != SIGNATURE


def _bad_version(w):
    assert _consistent(w)[0][1] not in (1, 2)


def _undecodable(w):
    with pytest.raises(ValueError):
        process_context(_consistent(w)[1])


def _size_mismatch(w):
    body = _consistent(w)[1]
    with pytest.raises(ValueError):
        process_context(body)
    # The message itself is fine: payload_size overstates it.
    assert process_context(body[:-7])["resource"][0] == ("service.name", "pctx-fixture")


def _not_boottime(w):
    assert _consistent(w)[0][3] > time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def _two_payloads_under_one_timestamp(w):
    seen = w.payloads_by_timestamp(only_mapping(w).start, 3)
    assert any(len(payloads) > 1 for payloads in seen.values())


def _inherited_by_child(w):
    mapping = only_mapping(w)
    assert "dc" not in w.vm_flags(mapping.start)
    child = int(re.fullmatch(r"forked pid=(\d+)", w.read_line()).group(1))
    assert len(w.context_mappings(child)) == 1


def _duplicate_keys(w):
    keys = [k for k, _ in process_context(_consistent(w)[1])["resource"]]
    assert len(keys) != len(set(keys))


def _threadlocal_in_resource(w):
    decoded = process_context(_consistent(w)[1])
    assert any(k.startswith("threadlocal.") for k, _ in decoded["resource"])


def _shared(w):
    assert only_mapping(w).perms == "rw-s"


def _oversized(w):
    assert _consistent(w)[0][2] > 65536


MUTANT_SIGNS = {
    "memfd-misnamed": _misnamed,
    "bad-signature": _bad_signature,
    "bad-version": _bad_version,
    "payload-size-mismatch": _size_mismatch,
    "payload-not-protobuf": _undecodable,
    "realtime-clock": _not_boottime,
    "timestamp-first": _two_payloads_under_one_timestamp,
    "update-without-zero": _two_payloads_under_one_timestamp,
    "timestamp-reused": _two_payloads_under_one_timestamp,
    "payload-rewritten-in-place": _two_payloads_under_one_timestamp,
    "no-dontfork": _inherited_by_child,
    "duplicate-keys": _duplicate_keys,
    "threadlocal-in-resource": _threadlocal_in_resource,
    "shared-mapping": _shared,
    "oversized-payload": _oversized,
}
# Only strace (or a prctl hook) sees these: naming calls in a publication and 3 updates.
PRCTL_MUTANTS = {"no-prctl-on-publish": 3, "no-prctl-on-update": 1}


def test_every_mutant_has_an_outside_sign():
    shown_above = {"two-mappings"}
    assert set(MUTANT_SIGNS) | set(PRCTL_MUTANTS) | shown_above == {m["name"] for m in MUTANTS["mutants"]}


@pytest.mark.skipif(HOST_ARCH != "x86_64", reason="runs the x86-64 programs natively")
@pytest.mark.parametrize("name", sorted(MUTANT_SIGNS))
def test_mutant_breaks_its_rule_visibly(name, writers):
    MUTANT_SIGNS[name](writers(HOST_ARCH, mutant_args(name), mutant=name))


@pytest.mark.skipif(HOST_ARCH != "x86_64", reason="runs the x86-64 programs natively")
@pytest.mark.parametrize("name", sorted(PRCTL_MUTANTS))
def test_prctl_mutant_leaves_out_naming_calls(name, writers, tmp_path):
    calls, publications = traced_prctl_naming_calls(writers, tmp_path, ["--service-name", "pctx-fixture"], name)
    assert publications == 4
    assert calls == PRCTL_MUTANTS[name]
