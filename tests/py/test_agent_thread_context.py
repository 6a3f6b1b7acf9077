"""`tracecorr agent` samples an OpenTelemetry thread context (OTEP 4947) in every TLS model.

The target is the reference writer (fixtures/otel_thread_context) in one program per TLS model its variable
can have, dynamic TLS included (glibc's dlopen forced past static TLS by `glibc.rtld.optional_static_tls=0`,
musl's dlopen, general dynamic). Each worker publishes one record and burns CPU (`--hold`), journaling the
span it meant. The host agent finds the protocol through the engine's sampled-protocol registry, and the
BPF sampler (or the ptrace one) reads each thread's record itself, walking the DTV where the model needs it.
What `--json` lists per thread must be what the writer published: trace and span ids, valid 1, the flags,
and the attributes named through the key map the process context publishes.

x86-64 only: BPF runs natively here; arm64 BPF runs in tests/py/test_arm64_system.py's VM.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from build_products import HOST_ARCH, REPO, TRACECORR, need
from fixture_process import WAIT_S
from thread_context_writer import DYNAMIC_TLS, held_writer

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the BPF sampler runs natively on x86-64 here")]

PROTOCOL = "otel-thread-context"
THREADS = 2
DURATION_S = 3  # long enough for every burning worker to be sampled at FREQUENCY_HZ
FREQUENCY_HZ = 499
# The key map's values are UTF-8 of at most 255 bytes: the writer shortens longer ones at a character
# boundary (fixtures/otel_thread_context/README.md), so what a thread stores is a prefix of what it meant.
MAX_VALUE_BYTES = 255

# (fixture model, environment, the access model the engine must find, dynamic TLS)
MODELS = [
    ("tlsdesc", {}, "tlsdesc-static", False),
    ("tlsdesc-dlopen", DYNAMIC_TLS, "tlsdesc-dynamic", True),
    ("general-dynamic", {}, "general-dynamic", True),
    ("exe-local-exec", {}, "local-exec", False),
    ("static-pie", {}, "local-exec", False),
    ("musl-dlopen", {}, "tlsdesc-dynamic", True),
    ("rust-cdylib", {}, "tlsdesc-static", False),  # a Rust cdylib: the variable after std's thread-locals
]
MODEL_IDS = [m + ("-dynamic-tls" if env else "") for m, env, _, _ in MODELS]
PTRACE_MODELS = [m for m in MODELS if m[0] in ("tlsdesc", "general-dynamic") or m[1]]


@pytest.fixture(scope="module")
def tracecorr_cli():
    return need(TRACECORR)


@pytest.fixture
def writer(request, tmp_path):
    """The writer in one model, every worker's record published; yields it with the journal's records by tid."""
    model, env, _, _ = request.param
    with held_writer(model, env, tmp_path / "journal.jsonl", THREADS) as held:
        yield held


def run_agent(cli, pid: int, reader: str) -> tuple[dict, str]:
    r = subprocess.run([str(cli), "agent", "--pid", str(pid), "--reader", reader, "--duration", str(DURATION_S),
                        "--frequency", str(FREQUENCY_HZ), "--json", "-"],
                       capture_output=True, text=True, timeout=DURATION_S + WAIT_S)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def the_process(summary: dict, pid: int) -> dict:
    found = [p for p in summary["processes"] if p["pid"] == pid]
    assert len(found) == 1, summary["processes"]
    return found[0]


def assert_reads_what_was_published(process: dict, published: dict, access_model: str, dynamic: bool) -> None:
    """Each worker's thread shows exactly the record its journal line says it published."""
    assert process["protocol"] == PROTOCOL
    assert not process["exited"], process["state"]
    where = process["records_at"]
    assert where["access_model"] == access_model, where["explanation"]
    assert where["dynamic_tls"] == dynamic
    key_map = where["key_map"]
    assert key_map and {"http.route", "http.method", "tracecorr.note"} <= set(key_map), where
    threads = {t["tid"]: t for t in process["threads"]}
    assert set(published) <= set(threads), f"threads sampled: {sorted(threads)}, workers: {sorted(published)}"
    for tid, meant in published.items():
        thread = threads[tid]
        # A held record never changes: one distinct record, every sample of the thread read it.
        assert len(thread["records"]) == 1, thread
        assert thread["statuses"] == {"record": thread["samples"]}, thread
        read = thread["records"][0]
        record = read["record"]
        assert read["samples"] == thread["samples"] > 0
        assert record["trace_id"] == meant["trace_id"], tid
        assert record["span_id"] == meant["span_id"], tid
        assert record["valid"] == 1
        assert record["trace_flags"] == meant["trace_flags"]
        assert record["attrs_data_size"] == meant["attrs_data_size"]
        assert record["entries_end"] == "complete" and not record["truncated"]
        assert record["unknown_keys"] == []
        named = {a["key"]: a["value"] for a in record["attributes"]}
        assert set(named) == {key for key, _ in meant["attributes"]}, tid
        for key, value in meant["attributes"]:
            if len(value.encode()) <= MAX_VALUE_BYTES:
                assert named[key] == value, (tid, key)
            else:
                assert value.startswith(named[key]) and 0 < len(named[key].encode()) <= MAX_VALUE_BYTES, (tid, key)
    totals = process["statuses"]
    assert totals.get("record", 0) >= sum(threads[tid]["samples"] for tid in published)


@pytest.mark.parametrize("writer,access_model,dynamic", [((m, e, a, d), a, d) for m, e, a, d in MODELS],
                         ids=MODEL_IDS, indirect=["writer"])
def test_agent_bpf_reads_every_thread_context_model(tracecorr_cli, writer, access_model, dynamic):
    if not tracecorr.HAVE_BPF:
        pytest.skip("this tracecorr was built without the BPF sampler")
    process, published = writer
    summary, log = run_agent(tracecorr_cli, process.proc.pid, "bpf")
    assert summary["reader"] == "bpf"
    sampled = the_process(summary, process.proc.pid)
    assert_reads_what_was_published(sampled, published, access_model, dynamic)
    assert summary["sampler"]["record_pointer_read_failed"] == 0, summary["sampler"]
    assert f"pid {process.proc.pid}: publishes {PROTOCOL}" in log, log


@pytest.mark.parametrize("writer,access_model,dynamic", [((m, e, a, d), a, d) for m, e, a, d in PTRACE_MODELS],
                         ids=[MODEL_IDS[MODELS.index(m)] for m in PTRACE_MODELS], indirect=["writer"])
def test_agent_ptrace_reads_thread_contexts(tracecorr_cli, writer, access_model, dynamic):
    process, published = writer
    summary, _ = run_agent(tracecorr_cli, process.proc.pid, "ptrace")
    assert summary["reader"] == "ptrace"
    sampled = the_process(summary, process.proc.pid)
    assert_reads_what_was_published(sampled, published, access_model, dynamic)
    # The ptrace sampler stops every thread, the main one included, which has no context: NULL, or in dynamic
    # TLS possibly no block for the module yet (glibc allocates it at a thread's first use): never an error.
    main = {t["tid"]: t for t in sampled["threads"]}[process.proc.pid]
    nothing_published = {"record_pointer_null", "tls_block_not_allocated"} if dynamic else {"record_pointer_null"}
    assert set(main["statuses"]) <= nothing_published and sum(main["statuses"].values()) == main["samples"] > 0, main


@pytest.mark.parametrize("writer,access_model,dynamic", [(MODELS[1], MODELS[1][2], True)], ids=[MODEL_IDS[1]],
                         indirect=["writer"])
def test_python_record_reader_samples_thread_contexts(writer, access_model, dynamic):
    """RecordReader.sample(), the Python profiler side: the same per-thread records, through the BPF sampler
    walking the DTV (ptrace when BPF is not built)."""
    process, published = writer
    reader = "bpf" if tracecorr.HAVE_BPF else "ptrace"
    sampled = tracecorr.otel_thread_context.RecordReader(process.proc.pid).sample(DURATION_S, reader,
                                                                                 frequency_hz=FREQUENCY_HZ)
    assert_reads_what_was_published(sampled, published, access_model, dynamic)
    records = tracecorr.otel_thread_context.sampled_records(sampled)
    for tid, meant in published.items():
        assert [(r["trace_id"], r["span_id"]) for r in records[tid]] == [(meant["trace_id"], meant["span_id"])]


@pytest.mark.host_wide
@pytest.mark.parametrize("writer,access_model,dynamic", [(MODELS[5], MODELS[5][2], True)], ids=[MODEL_IDS[5]],
                         indirect=["writer"])
def test_agent_all_finds_thread_contexts(tracecorr_cli, writer, access_model, dynamic):
    """--all: every process is asked for each sampled protocol; the writer is found and read like with --pid
    (BPF only: it reads other processes' memory from the kernel, stopping none of them)."""
    if not tracecorr.HAVE_BPF:
        pytest.skip("this tracecorr was built without the BPF sampler")
    process, published = writer
    r = subprocess.run([str(tracecorr_cli), "agent", "--all", "--reader", "bpf", "--duration", str(DURATION_S),
                        "--frequency", str(FREQUENCY_HZ), "--quiet", "--json", "-"],
                       capture_output=True, text=True, timeout=DURATION_S + WAIT_S)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert_reads_what_was_published(the_process(summary, process.proc.pid), published, access_model, dynamic)
    # Only what it could look into and found publishing: no kernel thread (no memory), no process it may not read.
    for listed in summary["processes"]:
        assert not is_kernel_thread(listed["pid"]), listed
        assert "permission denied" not in (listed.get("state") or ""), listed


PF_KTHREAD = 0x00200000


def is_kernel_thread(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False  # gone since
    return bool(int(stat[stat.rindex(")") + 2:].split()[6]) & PF_KTHREAD)


def test_agent_does_not_sample_a_process_without_a_context(tracecorr_cli):
    """A process that publishes neither protocol is the run's failure, said as before."""
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        r = subprocess.run([str(tracecorr_cli), "agent", "--pid", str(sleeper.pid), "--reader", "ptrace",
                            "--duration", "1", "--json", "-"], capture_output=True, text=True, timeout=30)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["processes"] == []
