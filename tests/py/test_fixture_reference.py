"""The reference agent-side fixture (fixtures/elastic_v1/reference) behaves per the protocol.

Runs the x86-64 reference natively and the arm64 one under qemu-aarch64, each
with an in-test OTLP/HTTP JSON receiver and a journal, and plays the profiler
by sending datagrams to the fixture's socket.

Build outputs are found under $TRACECORR_BUILD (default: build/ in this repository):
<build>/fixtures/<arch>/reference/tracecorr-fixture.
"""
import base64
import collections
import json
import os
import re
import shutil
import socket
import stat
import struct
import subprocess
import time
from pathlib import Path

import pytest

from json_otlp_receiver import JsonOtlpReceiver

from build_products import REGISTRY, need
import build_products
MESSAGES = {m["name"]: m for m in REGISTRY["layouts"]["messages"]}
CORRELATION = MESSAGES["correlation"]
REGISTRATION = MESSAGES["registration"]
ATTRIBUTE = REGISTRY["attribute"]["name"]
ENV = {k: v["env"] for k, v in REGISTRY["config"].items() if isinstance(v, dict) and "env" in v}
QEMU = shutil.which("qemu-aarch64")
AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"

# Generous bound for waiting on events; a missed event is a failure, not a slow pass.
WAIT_S = 20.0


def fixture_program(arch, variant="reference"):
    return need(build_products.fixture_program(arch, None if variant == "reference" else variant))


def command_for(arch, program):
    if arch == "arm64":
        if QEMU is None:
            pytest.skip("qemu-aarch64 not installed")
        return [QEMU, "-L", AARCH64_SYSROOT, str(program)]
    return [str(program)]


# ---- wire encoding (layouts from the registry) ------------------------------

def field(message, name):
    return next(f for f in message["fields"] if f["name"] == name)


def correlation(trace_id, transaction_id, stack_trace_id, count, minor=CORRELATION["current_minor"]):
    buf = bytearray(CORRELATION["fixed_size"])
    struct.pack_into("=HH", buf, 0, CORRELATION["message_type"], minor)
    for name, value in (("trace_id", trace_id), ("transaction_id", transaction_id),
                        ("stack_trace_id", stack_trace_id)):
        f = field(CORRELATION, name)
        assert len(value) == f["size"]
        buf[f["offset"]:f["offset"] + f["size"]] = value
    struct.pack_into("=H", buf, field(CORRELATION, "count")["offset"], count)
    return bytes(buf)


def registration(delay_ms, host_id, minor=REGISTRATION["current_minor"]):
    host = host_id.encode()
    return (struct.pack("=HH", REGISTRATION["message_type"], minor)
            + struct.pack("=I", delay_ms) + struct.pack("=I", len(host)) + host)


def b64url(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


# ---- the in-test OTLP receiver ----------------------------------------------

@pytest.fixture
def receiver():
    r = JsonOtlpReceiver()
    yield r
    r.close()


# ---- running a fixture -------------------------------------------------------

class Fixture:
    def __init__(self, arch, tmp_path, receiver, args=(), env=None, variant="reference"):
        self.journal_path = tmp_path / f"journal-{arch}-{variant}.jsonl"
        socket_dir = tmp_path / "sockets"
        socket_dir.mkdir(exist_ok=True)
        full_env = dict(os.environ)
        full_env.update({
            "TRACECORR_FIXTURE_JOURNAL": str(self.journal_path),
            ENV["socket_dir"]: str(socket_dir),
            ENV["enabled"]: "true",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        })
        if receiver is not None:
            full_env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        full_env.update(env or {})
        cmd = command_for(arch, fixture_program(arch, variant)) + list(args)
        self.proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.fullmatch(r"tracecorr-fixture pid=(\d+) socket=(\S*)\n", line)
        assert m, f"unexpected first stdout line {line!r}; stderr: {self.proc.stderr.read() if self.proc.poll() is not None else ''}"
        self.pid = int(m.group(1))
        self.socket_path = m.group(2)
        self.sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

    def send(self, datagram):
        self.sender.sendto(datagram, self.socket_path)

    def events(self, name=None):
        if not self.journal_path.exists():
            return []
        out = []
        text = self.journal_path.read_text()
        # The fixture may be mid-write: only newline-terminated lines are complete.
        for line in text[:text.rfind("\n") + 1].splitlines():
            e = json.loads(line)
            if name is None or e["event"] == name:
                out.append(e)
        return out

    def wait_for(self, predicate, what):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            result = predicate()
            if result:
                return result
            assert self.proc.poll() is None, f"fixture exited ({self.proc.returncode}) while waiting for {what}"
            time.sleep(0.02)
        pytest.fail(f"timed out after {WAIT_S}s waiting for {what}")

    def stop(self):
        self.sender.close()
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            out, err = self.proc.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        self.stderr = err
        return self.proc.returncode


@pytest.fixture
def run_fixture(tmp_path):
    started = []

    def start(arch, receiver, args=(), env=None, variant="reference"):
        f = Fixture(arch, tmp_path, receiver, args, env, variant)
        started.append(f)
        return f

    yield start
    for f in started:
        f.stop()


ARCHES = ["x86_64", "arm64"]
WORKLOAD = ["--threads", "2", "--spans", "1", "--span-ms", "30"]


def wait_open_transaction(fixture, after_t=0):
    """A sampled transaction that just ended: it sits in the deferral queue,
    so correlations sent now still count for it."""
    def find():
        for e in fixture.events("span_end"):
            if e["transaction"] and e["sampled"] and e["t"] > after_t:
                return e
        return None
    return fixture.wait_for(find, "a transaction to end")


def exported(receiver, span_id):
    return next((s for s in receiver.snapshot() if s[2]["spanId"] == span_id), None)


def stack_ids(span):
    attrs = [a for a in span.get("attributes", []) if a["key"] == ATTRIBUTE]
    if not attrs:
        return []
    assert len(attrs) == 1
    values = attrs[0]["value"]["arrayValue"]["values"]
    return [v["stringValue"] for v in values]


# ---- tests ---------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHES)
def test_storage_published_after_socket(arch, run_fixture):
    fixture = run_fixture(arch, None, WORKLOAD)
    fixture.wait_for(lambda: fixture.events("ready"), "ready")
    order = [e["event"] for e in fixture.events()]
    assert order.index("socket") < order.index("storage"), order
    storage = fixture.events("storage")[0]
    assert storage["minor"] == REGISTRY["layouts"]["process_storage"]["minor_versions"][-1]
    assert storage["socket_file_path"] == fixture.socket_path == fixture.events("socket")[0]["path"]
    assert f"-{fixture.pid}-" in Path(fixture.socket_path).name
    mode = os.stat(fixture.socket_path).st_mode
    assert stat.S_ISSOCK(mode)
    assert mode & 0o022 == 0, oct(mode)  # SOCK-04: no one else may write
    library = fixture.events("library")[0]
    assert re.fullmatch(REGISTRY["library"]["name_regex"], library["path"]), library["path"]
    threads = fixture.events("thread")
    assert len({t["record_address"] for t in threads}) == len(threads) == 2


@pytest.mark.parametrize("arch", ARCHES)
def test_deferral_and_stack_ids(arch, run_fixture, receiver):
    delay_ms = 700
    fixture = run_fixture(arch, receiver, WORKLOAD)
    fixture.wait_for(lambda: fixture.events("ready"), "ready")
    fixture.send(registration(delay_ms, "tracecorr-test-host"))
    reg = fixture.wait_for(lambda: [e for e in fixture.events("message") if e["kind"] == "registration"],
                           "the registration")[0]
    assert reg["applied"] and reg["samples_delay_ms"] == delay_ms

    tx = wait_open_transaction(fixture, after_t=reg["t"])
    trace_id, tx_id = bytes.fromhex(tx["trace_id"]), bytes.fromhex(tx["span_id"])
    ids = [bytes([i]) * 16 for i in (1, 2, 3)]
    ids[2] = bytes.fromhex("60b420bb3851d9d47acb933dbe70399b")  # the spec's example id
    sent = [(ids[0], 2), (ids[1], 1), (ids[0], 1), (ids[2], 3), (ids[1], 0)]
    for stack_trace_id, count in sent:
        fixture.send(correlation(trace_id, tx_id, stack_trace_id, count))

    got = fixture.wait_for(lambda: exported(receiver, tx["span_id"]), "the transaction's export")
    receive_ns, resource, span = got
    expected = collections.Counter()
    for stack_trace_id, count in sent:
        expected[b64url(stack_trace_id)] += count
    assert collections.Counter(stack_ids(span)) == expected
    assert "YLQguzhR2dR6y5M9vnA5mw" in expected  # the spec's own encoding example
    assert span["kind"] == 2 and "parentSpanId" not in span

    # Deferral: no transaction ending after the registration left before the delay.
    fixture.wait_for(lambda: len([s for s in receiver.snapshot() if s[2]["kind"] == 2
                                  and int(s[2]["endTimeUnixNano"]) > reg["t"]]) >= 5, "five deferred transactions")
    for when, res, s in receiver.snapshot():
        if s["kind"] == 2 and int(s["endTimeUnixNano"]) > reg["t"]:
            assert when - int(s["endTimeUnixNano"]) >= delay_ms * 1_000_000, s["spanId"]
            assert res["host.id"] == {"stringValue": "tracecorr-test-host"}
    for e in fixture.events("export"):
        if e["transaction"] and e["reason"] == "delay" and e["t"] > reg["t"]:
            assert e["deferred_ms"] >= delay_ms

    # Child spans are not deferred: each arrives before its transaction.
    spans = receiver.snapshot()
    position = {s[2]["spanId"]: i for i, s in enumerate(spans)}
    children = [s[2] for s in spans if s[2]["kind"] == 1]
    assert children
    for child in children:
        assert child["parentSpanId"]
        assert not stack_ids(child)
        if child["parentSpanId"] in position:
            assert position[child["spanId"]] < position[child["parentSpanId"]]
    child_exports = [e for e in fixture.events("export") if not e["transaction"]]
    assert child_exports and all(e["reason"] == "immediate" for e in child_exports)

    assert fixture.stop() == 0


@pytest.mark.parametrize("arch", ARCHES)
def test_truncated_messages_discarded(arch, run_fixture, receiver):
    delay_ms = 600
    fixture = run_fixture(arch, receiver, WORKLOAD)
    fixture.wait_for(lambda: fixture.events("ready"), "ready")
    fixture.send(registration(delay_ms, ""))
    reg_t = fixture.wait_for(lambda: [e["t"] for e in fixture.events("message") if e["kind"] == "registration"],
                             "the registration")[0]
    tx = wait_open_transaction(fixture, after_t=reg_t)
    trace_id, tx_id = bytes.fromhex(tx["trace_id"]), bytes.fromhex(tx["span_id"])

    bad, good = bytes([0xBA]) * 16, bytes([0x60]) * 16
    full_correlation = correlation(trace_id, tx_id, bad, 7)
    full_registration = registration(1, "truncated-host")
    truncations = [full_correlation[:n] for n in range(len(full_correlation))]
    truncations += [full_registration[:n] for n in range(len(full_registration))]
    for datagram in truncations:
        fixture.send(datagram)
    fixture.send(correlation(trace_id, tx_id, good, 2))

    def messages_after_registration():
        return [e for e in fixture.events("message") if e["t"] > reg_t]
    fixture.wait_for(lambda: len(messages_after_registration()) >= len(truncations) + 1, "all messages decoded")
    decoded = messages_after_registration()
    assert [e["kind"] for e in decoded[:len(truncations)]] == ["discarded"] * len(truncations)
    assert sorted(e["size"] for e in decoded[:len(truncations)]) == sorted(len(d) for d in truncations)
    last = decoded[len(truncations)]
    assert last["kind"] == "correlation" and last["outcome"] == "recorded"

    _, resource, span = fixture.wait_for(lambda: exported(receiver, tx["span_id"]), "the transaction's export")
    assert stack_ids(span) == [b64url(good)] * 2
    # The truncated registration changed nothing: the delay still holds, no host.id adopted.
    assert "host.id" not in resource
    for e in fixture.events("export"):
        if e["transaction"] and e["reason"] == "delay" and e["t"] > reg_t:
            assert e["deferred_ms"] >= delay_ms
    assert fixture.stop() == 0


DESCRIPTOR = {
    "x86_64": (REGISTRY["library"]["tls_dialects"]["x86_64"]["descriptor_relocation"], r"/ld-linux-x86-64\.so\.2$"),
    "arm64": (REGISTRY["library"]["tls_dialects"]["aarch64"]["descriptor_relocation"], r"/ld-linux-aarch64\.so\.1$"),
}


@pytest.mark.parametrize("arch", ARCHES)
def test_dynamic_tls_variant_gets_dynamic_descriptor(arch, run_fixture):
    """TLS-07 variant: its TLS descriptor is resolved dynamically, unlike the reference's.

    Reads the library's TLSDESC GOT slot (resolver, argument) from /proc/PID/mem.
    A static descriptor's argument is the variable's small offset from the thread
    pointer (negative on x86-64); a dynamic one points to glibc's heap argument and
    uses another resolver. qemu-user maps guest memory 1:1 (guest_base 0) here, so
    the arm64 fixture is read the same way; without binfmt_misc the fixture cannot
    re-exec itself under qemu, so the test passes the tunable in the environment.
    """
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf not installed")
    relocation, ldso_pattern = DESCRIPTOR[arch]

    def descriptor(fixture):
        library = fixture.events("library")[0]["path"]
        relocs = subprocess.run([readelf, "-rW", library], capture_output=True, text=True, check=True).stdout
        offset = int(next(l for l in relocs.splitlines() if relocation in l).split()[0], 16)
        maps = Path(f"/proc/{fixture.pid}/maps").read_text().splitlines()
        base = min(int(l.split("-")[0], 16) for l in maps if l.endswith(library))
        ldso = min(int(l.split("-")[0], 16) for l in maps if re.search(ldso_pattern, l))
        with open(f"/proc/{fixture.pid}/mem", "rb") as mem:
            mem.seek(base + offset)
            entry, arg = struct.unpack("<Qq", mem.read(16))
        return entry - ldso, arg

    env = {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=0"} if arch == "arm64" else None
    reference = run_fixture(arch, None, ["--hold", "--threads", "1"])
    dynamic = run_fixture(arch, None, ["--hold", "--threads", "1"], env=env, variant="dynamic-tls")
    for f in (reference, dynamic):
        f.wait_for(lambda f=f: f.events("ready"), "ready")
    assert "glibc.rtld.optional_static_tls=0" in dynamic.events("library")[0]["glibc_tunables"]
    assert "glibc_tunables" not in reference.events("library")[0]
    static_entry, static_arg = descriptor(reference)
    dynamic_entry, dynamic_arg = descriptor(dynamic)
    assert abs(static_arg) < 1 << 20, hex(static_arg)  # an offset from the thread pointer
    if arch == "x86_64":
        assert static_arg < 0  # variant II TLS lies below the thread pointer
    assert dynamic_entry != static_entry
    assert dynamic_arg >= 1 << 20, hex(dynamic_arg)  # a pointer, not an offset


def test_own_host_id_kept_with_warning(run_fixture, receiver):
    fixture = run_fixture("x86_64", receiver, WORKLOAD, env={"OTEL_RESOURCE_ATTRIBUTES": "team=a,host.id=own-host"})
    fixture.wait_for(lambda: fixture.events("ready"), "ready")
    fixture.send(registration(50, "profiler-host"))
    reg_t = fixture.wait_for(lambda: [e["t"] for e in fixture.events("message") if e["kind"] == "registration"],
                             "the registration")[0]
    fixture.wait_for(lambda: [s for s in receiver.snapshot() if s[2]["kind"] == 2
                              and int(s[2]["endTimeUnixNano"]) > reg_t], "a transaction after the registration")
    assert fixture.stop() == 0
    assert {s[1]["host.id"]["stringValue"] for s in receiver.snapshot()} == {"own-host"}
    assert "host.id mismatch" in fixture.stderr


def test_full_queue_forwards_at_once_with_warning(run_fixture, receiver):
    fixture = run_fixture("x86_64", receiver, ["--threads", "2", "--spans", "0", "--span-ms", "0"],
                          env={ENV["buffer_size"]: "1"})
    fixture.wait_for(lambda: [e for e in fixture.events("export") if e["reason"] == "queue_full"],
                     "a transaction forwarded because the queue is full")
    assert fixture.stop() == 0
    assert "transaction queue full (1 entries): profiling correlation data may be incomplete" in fixture.stderr
    ended = {e["span_id"] for e in fixture.events("span_end") if e["transaction"] and e["sampled"]}
    sent = {s[2]["spanId"] for s in receiver.snapshot()}
    assert ended and ended <= sent  # nothing dropped


def test_auto_mode_waits_for_registration(run_fixture, receiver):
    fixture = run_fixture("x86_64", receiver, WORKLOAD, env={ENV["enabled"]: "auto"})
    tx = wait_open_transaction(fixture)
    fixture.send(correlation(bytes.fromhex(tx["trace_id"]), bytes.fromhex(tx["span_id"]), bytes(16), 1))
    before = fixture.wait_for(lambda: [e for e in fixture.events("message") if e["kind"] == "correlation"],
                              "the correlation")[0]
    assert before["outcome"] == "ignored_before_registration"
    unregistered = [e for e in fixture.events("export") if e["transaction"]]
    assert unregistered and all(e["reason"] == "immediate" for e in unregistered)

    fixture.send(registration(100, ""))
    reg_t = fixture.wait_for(lambda: [e["t"] for e in fixture.events("message") if e["kind"] == "registration"],
                             "the registration")[0]
    fixture.wait_for(lambda: [e for e in fixture.events("export")
                              if e["transaction"] and e["reason"] == "delay" and e["t"] > reg_t],
                     "a deferred transaction after the registration")
    assert fixture.stop() == 0


def test_disabled_opens_no_socket_and_defers_nothing(run_fixture, receiver):
    fixture = run_fixture("x86_64", receiver, WORKLOAD, env={ENV["enabled"]: "false"})
    assert fixture.socket_path == ""
    fixture.wait_for(lambda: len([e for e in fixture.events("export") if e["transaction"]]) >= 3, "transactions")
    assert fixture.stop() == 0
    events = fixture.events()
    assert not [e for e in events if e["event"] in ("socket", "storage")]
    assert all(e["reason"] == "immediate" for e in events if e["event"] == "export")
