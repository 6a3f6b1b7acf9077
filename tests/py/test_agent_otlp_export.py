"""`tracecorr agent --otlp-endpoint` exports every sample as OTLP profiles (issue 27, the reference reader).

The agent samples a reference writer and exports to tracecorr's own profiles receiver (the Python binding of
the gRPC receiver, or the HTTP route), and the test holds what arrived against what the writer journaled:

  * every link (trace id, span id) names a record the writer published, on the thread that published it;
    a worker holding a valid record is never exported without its link; a thread without a record (the
    main thread, stopped by ptrace) is exported too, without a link;
  * the record's attributes arrive named through the key map (OTEP 4947);
  * `process.pid` is the writer's pid and `thread.id` one of its threads; the resource carries the process
    context's resource attributes (OTEP 4719) when the sample named a publication the agent read;
  * only frames the sampler took: every exported address is in one of the process's executable mappings;
  * a process publishing two protocols is exported once per interrupt, not once per protocol;
  * each profile says how it was sampled (its period, cpu or wall);
  * what the agent counts as exported is what the receiver took, nothing dropped or failed;
  * an endpoint that refuses connections costs the sampling nothing: failures counted, exit 0.

The OTEP 4947 writer in one static and one dynamic TLS model; Elastic's reference fixture holding its
records, with an OTel SDK's process context preloaded beside it; the variant of it that also publishes
OTEP 4947 (tests/py/dual_fixture.py). BPF when it works here, ptrace always; gRPC and HTTP, by the flags
and by the standard OTEL_EXPORTER_OTLP_* variables.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from build_products import HOST_ARCH, REPO, TRACECORR, fixture_program, need, package_fixture_program
from fixture_process import WAIT_S, read_journal
from thread_context_writer import DYNAMIC_TLS, held_writer

from dual_fixture import DualFixture  # Elastic's fixture also publishing OTEP 4947

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr
from tracecorr.profiles import HAVE_PROFILES, ProfilesReceiver

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the BPF sampler runs natively on x86-64 here"),
              pytest.mark.skipif(not HAVE_PROFILES, reason="built without OTLP profiles (libgrpc++-dev)")]

DURATION_S = 3  # as test_agent_thread_context.py: long enough for every burning worker to be sampled
FREQUENCY_HZ = 199
MAX_VALUE_BYTES = 255  # the writer shortens longer attribute values (test_agent_thread_context.py)
ELASTIC_FIXTURE = fixture_program(HOST_ARCH)
CONTEXT_PRELOAD = package_fixture_program("otel_process_context", "libotel-ctx-preload.so", HOST_ARCH)
OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL")


@pytest.fixture(scope="module")
def cli():
    return need(TRACECORR)


@pytest.fixture(scope="module")
def bpf_works(cli):
    if not tracecorr.HAVE_BPF:
        pytest.skip("this tracecorr was built without the BPF sampler")
    r = subprocess.run([str(cli), "doctor", "--json"], capture_output=True, text=True, timeout=60)
    verdict = json.loads(r.stdout)["verdicts"]["bpf_sampler"]
    if not verdict["works"]:
        pytest.skip("BPF sampler unavailable here: " + verdict["summary"])


def agent_environment(**variables: str) -> dict:
    """The test's environment without any OTLP variable of its own, plus `variables`."""
    env = {k: v for k, v in os.environ.items() if k not in OTEL_VARIABLES}
    env.update(variables)
    return env


def run_agent(cli, pid: int, reader: str, *args: str, env: dict | None = None) -> tuple[dict, str]:
    started = time.time_ns()
    r = subprocess.run([str(cli), "agent", "--pid", str(pid), "--reader", reader, "--duration", str(DURATION_S),
                        "--frequency", str(FREQUENCY_HZ), "--json", "-", *args],
                       capture_output=True, text=True, timeout=DURATION_S + 3 * WAIT_S,
                       env=env if env is not None else agent_environment())
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    summary["test_window_ns"] = (started, time.time_ns())
    return summary, r.stderr


def exporting(receiver: ProfilesReceiver, how: str) -> tuple[tuple[str, ...], dict]:
    """The agent's arguments and environment to export to `receiver`: the flags, or the standard variables."""
    if how == "flags":
        return ("--otlp-endpoint", receiver.endpoint, "--otlp-protocol", receiver.protocol), agent_environment()
    if receiver.protocol == "grpc":  # the general variables, and the default protocol
        return (), agent_environment(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    # The profiles signal's own URL, used as is, and the general protocol variable.
    return (), agent_environment(OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT=receiver.endpoint + "/v1development/profiles",
                                 OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
                                 OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")  # the profiles one wins


def hex_of(value: bytes | None) -> str | None:
    return value.hex() if value is not None else None


def assert_counted_as_received(summary: dict, receiver: ProfilesReceiver, protocol: str) -> list:
    """What the agent says it exported is what the receiver took, and it offered every sample it took."""
    exported = summary["otlp_export"]
    assert exported["protocol"] == protocol, exported
    assert exported["offered"] == summary["totals"]["observations"] > 0, (exported, summary["totals"])
    assert exported["dropped"] == 0 and exported["exports_failed"] == 0, exported
    assert exported["samples_exported"] == exported["offered"], exported
    assert receiver.wait_for(lambda s: len(s) >= exported["samples_exported"], WAIT_S)
    samples = receiver.samples()
    counters = receiver.counters()
    assert len(samples) == counters["samples"] == exported["samples_exported"], counters
    assert counters["accepted"] == counters["exports"] == exported["exports"], (counters, exported)
    return samples


def assert_of_the_process(samples: list, pid: int, tids: set[int], window: tuple[int, int]) -> None:
    """process.pid, thread.id and time are the sampled process's, threads' and run's."""
    for s in samples:
        assert s.pid == pid and s.resource.get("process.pid") == pid, (s, s.resource)
        assert s.tid in tids and s.attributes.get("thread.id") == s.tid, (s, sorted(tids))
        assert s.clock == "unix" and window[0] - 10**9 <= s.time_unix_nano <= window[1] + 10**9, s.time_unix_nano


def assert_attributes_published(sample, meant: dict) -> None:
    for key, value in meant["attributes"]:
        got = sample.attributes.get(key)
        if len(value.encode()) <= MAX_VALUE_BYTES:
            assert got == value, (key, got, value)
        else:
            assert isinstance(got, str) and value.startswith(got) and got, (key, got)


# ---- OTEP 4947's reference writer ----------------------------------------------------------------------

# (model, environment): one static TLS model, one reached through the DTV.
TCTX_MODELS = [("tlsdesc", {}), ("tlsdesc-dlopen", DYNAMIC_TLS)]
TCTX_IDS = ["tlsdesc", "tlsdesc-dlopen-dynamic-tls"]


def executable_ranges(pid: int) -> list[tuple[int, int]]:
    ranges = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            addresses, perms = line.split()[:2]
            if "x" in perms:
                lo, hi = addresses.split("-")
                ranges.append((int(lo, 16), int(hi, 16)))
    return ranges


def assert_stacks_are_the_processes(samples: list, ranges: list[tuple[int, int]]) -> None:
    """Only frames the sampler took: every address is in one of the process's executable mappings."""
    for s in samples:
        for address in s.stack:
            assert any(lo <= address < hi for lo, hi in ranges), (hex(address), s)


def check_thread_context_export(cli, model, env, reader, protocol, how, tmp_path):
    with held_writer(model, env, tmp_path / "journal.jsonl", 2) as (process, published), \
            ProfilesReceiver(protocol) as receiver:
        pid = process.proc.pid
        args, agent_env = exporting(receiver, how)
        summary, log = run_agent(cli, pid, reader, *args, env=agent_env)
        samples = assert_counted_as_received(summary, receiver, protocol)
        assert_stacks_are_the_processes(samples, executable_ranges(pid))
    assert any(s.stack for s in samples), "both samplers walk the frame pointers: the stacks are exported"
    assert "OTLP profiles to" in log, log
    assert_of_the_process(samples, pid, set(published) | {pid}, summary["test_window_ns"])
    # The profile says how it was sampled: every 1/FREQUENCY_HZ s, on-CPU (bpf) or wall clock (ptrace).
    assert {(s.profile["period"], s.profile["period_type"], s.profile["scope_name"]) for s in samples} == \
        {(10**9 // FREQUENCY_HZ, "wall" if reader == "ptrace" else "cpu", "tracecorr")}
    linked = [s for s in samples if s.span_id is not None]
    for s in linked:
        meant = published.get(s.tid)
        assert meant, f"thread {s.tid} exported a link, but published no record"
        assert (hex_of(s.trace_id), hex_of(s.span_id)) == (meant["trace_id"], meant["span_id"]), s.tid
        assert_attributes_published(s, meant)
    # A worker holds a valid record throughout: none of its samples goes without its link.
    assert all(s.span_id is not None for s in samples if s.tid in published)
    assert {s.tid for s in linked} == set(published), "every worker was exported with its span"
    if reader == "ptrace":  # it stops the main thread too, which publishes no record: exported without a link
        assert any(s.tid == pid and s.span_id is None for s in samples)
    return samples, summary


@pytest.mark.parametrize("model,env", TCTX_MODELS, ids=TCTX_IDS)
@pytest.mark.parametrize("protocol,how", [("grpc", "flags"), ("http/protobuf", "variables")])
def test_ptrace_agent_exports_thread_contexts(cli, tmp_path, model, env, protocol, how):
    check_thread_context_export(cli, model, env, "ptrace", protocol, how, tmp_path)


@pytest.mark.parametrize("model,env", TCTX_MODELS, ids=TCTX_IDS)
@pytest.mark.parametrize("protocol,how", [("grpc", "variables"), ("http/protobuf", "flags")])
def test_bpf_agent_exports_thread_contexts(cli, bpf_works, tmp_path, model, env, protocol, how):
    check_thread_context_export(cli, model, env, "bpf", protocol, how, tmp_path)


# ---- Elastic's reference APM agent, with an OTel SDK's process context beside it ---------------------------

class ElasticFixture:
    """The fixture holding its records (`--hold`: fixed ids), journaling them, and a preloaded process context."""

    def __init__(self, tmp_path, threads: int):
        self.journal = tmp_path / "journal.jsonl"
        env = dict(os.environ, TRACECORR_FIXTURE_JOURNAL=str(self.journal), TMPDIR=str(tmp_path),
                   LD_PRELOAD=str(need(CONTEXT_PRELOAD)), OTEL_SERVICE_NAME="checkout",
                   OTEL_RESOURCE_ATTRIBUTES="service.instance.id=i-42")
        self.proc = subprocess.Popen([str(need(ELASTIC_FIXTURE)), "--hold", "--threads", str(threads)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.threads = threads
        deadline = time.monotonic() + WAIT_S
        while len(self.records()) < threads:
            assert self.proc.poll() is None and time.monotonic() < deadline, "the fixture published no records"
            time.sleep(0.05)

    def records(self) -> dict[int, dict]:
        return {ev["tid"]: ev for ev in read_journal(self.journal, "record")}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.parametrize("reader,protocol", [("ptrace", "grpc"), ("bpf", "http/protobuf")])
def test_agent_exports_elastic_records_with_the_process_context_resource(cli, tmp_path, request, reader, protocol):
    if reader == "bpf":
        request.getfixturevalue("bpf_works")
    fx = ElasticFixture(tmp_path, threads=2)
    try:
        with ProfilesReceiver(protocol) as receiver:
            summary, _ = run_agent(cli, fx.proc.pid, reader, "--otlp-endpoint", receiver.endpoint,
                                   "--otlp-protocol", protocol)
            samples = assert_counted_as_received(summary, receiver, protocol)
        records = fx.records()
        tids = {int(t) for t in os.listdir(f"/proc/{fx.proc.pid}/task")}
    finally:
        fx.stop()
    assert_of_the_process(samples, fx.proc.pid, tids, summary["test_window_ns"])
    published = {(ev["trace_id"], ev["span_id"]) for ev in records.values() if ev["valid"] and ev["trace_present"]}
    assert len(published) == fx.threads, records
    linked = [s for s in samples if s.span_id is not None]
    assert {(hex_of(s.trace_id), hex_of(s.span_id)) for s in linked} == published, \
        "every link names a span the fixture published, and every held span was exported"
    for s in linked:
        assert (hex_of(s.trace_id), hex_of(s.span_id)) == (records[s.tid]["trace_id"], records[s.tid]["span_id"])
    # The resource: the SDK's publication when the sample named one the agent read, else the pid alone.
    attributed = [s for s in samples if "service.name" in s.resource]
    assert attributed, "no sample carried the process context's resource"
    for s in samples:
        assert s.resource in ({"process.pid": fx.proc.pid},
                              {"process.pid": fx.proc.pid, "service.name": "checkout",
                               "service.instance.id": "i-42"}), s.resource
    (process,) = [p for p in summary["processes"] if p["pid"] == fx.proc.pid]
    assert len(attributed) <= process["process_context"]["resolved"], "a resource is never guessed"


# ---- one process, two protocols: one observation per interrupt -----------------------------------------

@pytest.mark.parametrize("reader", ["ptrace", "bpf"])
def test_a_process_publishing_two_protocols_is_exported_once_per_interrupt(cli, tmp_path, request, reader):
    """Elastic's fixture that also publishes each worker's span as an OTel thread context: the sampler reads both
    records at each interrupt (two Samples, one per layout slot); the export has one observation per interrupt,
    linked to the worker's span (both records name it)."""
    if reader == "bpf":
        request.getfixturevalue("bpf_works")
    fx = DualFixture(tmp_path)
    try:
        with ProfilesReceiver("grpc") as receiver:
            summary, _ = run_agent(cli, fx.pid, reader, "--otlp-endpoint", receiver.endpoint)
            samples = assert_counted_as_received(summary, receiver, "grpc")
        otel = fx.last("otel_record")
        tids = {int(t) for t in os.listdir(f"/proc/{fx.pid}/task")}
    finally:
        fx.stop()
    assert_of_the_process(samples, fx.pid, tids, summary["test_window_ns"])
    interrupts = [(s.tid, s.time_unix_nano) for s in samples]
    assert len(set(interrupts)) == len(interrupts), "an interrupt exported once per protocol"
    entries = [p for p in summary["processes"] if p["pid"] == fx.pid]
    assert len(entries) == 2, "sampled under both protocols"
    assert len(samples) < sum(p["samples"] for p in entries), "the two slots' samples were not merged"
    linked = [s for s in samples if s.span_id is not None]
    assert {s.tid for s in linked} == set(otel), "every worker exported with its span"
    for s in linked:
        meant = otel[s.tid]
        assert (hex_of(s.trace_id), hex_of(s.span_id)) == (meant["trace_id"], meant["span_id"]), s.tid


# ---- an endpoint that refuses, a protocol not spoken -------------------------------------------------------

def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_refusing_endpoint_costs_the_sampling_nothing(cli, tmp_path, protocol):
    with held_writer("tlsdesc", {}, tmp_path / "journal.jsonl", 2) as (process, _):
        summary, log = run_agent(cli, process.proc.pid, "ptrace", "--otlp-endpoint",
                                 f"http://127.0.0.1:{unused_port()}", "--otlp-protocol", protocol)
    exported = summary["otlp_export"]
    (sampled,) = [p for p in summary["processes"] if p["pid"] == process.proc.pid]
    assert sampled["records_read"] > 0, "sampling went on"
    assert exported["offered"] == summary["totals"]["observations"] > 0, exported
    assert exported["samples_exported"] == 0 and exported["exports_failed"] == exported["exports"] > 0, exported
    assert exported["samples_failed"] + exported["dropped"] == exported["offered"], exported
    assert exported["last_error"], exported
    assert "failed exports" in log and "last error" in log, log


def test_a_protocol_not_spoken_is_refused_plainly(cli):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        r = subprocess.run([str(cli), "agent", "--pid", str(sleeper.pid), "--reader", "ptrace", "--duration", "1"],
                           capture_output=True, text=True, timeout=30,
                           env=agent_environment(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318",
                                                 OTEL_EXPORTER_OTLP_PROTOCOL="http/json"))
        flagged = subprocess.run([str(cli), "agent", "--pid", str(sleeper.pid), "--duration", "1",
                                  "--otlp-endpoint", "http://127.0.0.1:4318", "--otlp-protocol", "http/json"],
                                 capture_output=True, text=True, timeout=30, env=agent_environment())
    finally:
        sleeper.kill()
        sleeper.wait()
    assert r.returncode == 2 and "OTEL_EXPORTER_OTLP_PROTOCOL" in r.stderr and "http/json" in r.stderr, r.stderr
    assert flagged.returncode != 0 and "otlp-protocol" in flagged.stderr, flagged.stderr
