"""`tracecorr agent --reader-defect NAME`: the reference reader made to break one reader requirement (issue 27,
reader mutants), so that profiler-mode conformance can prove each of its judges able to fail.

Each test runs the ptrace reader (deterministic: every thread stopped and read) against a writer that shows the
defect's hazard, exporting OTLP profiles to tracecorr's own receiver, twice: without the defect, the exported
samples are what the rule demands; with it, they show exactly the broken reading. The hazards:

  * ignores-valid (TCTXR-08): the mutant writer valid-2 marks its records with 2: no link, or the ids as a link;
  * keeps-out-of-map (TCTXR-11): key-outside-map ends every record with an index past the key map: dropped, or
    exported as `tracecorr.index.N`;
  * never-refreshes-key-map (TCTXR-10): the reference writer appends a key to its map every 300 ms and uses it
    at once: named by the refreshed map, or dropped (every exported key is one the map had at discovery);
  * reads-any-schema (TCTXR-03): the variant nodejs-schema (threadlocal.schema_version nodejs_v1_dev, its
    variable otel_thread_ctx_nodejs_v1): never read, or its records exported as OTEP 4947's;
  * static-tls-only (TCTXR-05): the reference writer's library dlopen'ed into dynamic TLS (glibc's tunable,
    and musl's dlopen): every worker linked, or samples exported without context;
  * unbounded-record (TCTXR-16): the reference writer holding the stage's oversize state (a record declaring
    about 1054 bytes): the entry the 1024-byte bound cuts dropped, or exported (read again whole);
  * reads-running-thread (TCTXR-06): the reference writer updating in place every 4 ms: never a torn pair of
    ids from a stopped thread, torn pairs from reads 1 ms apart while it runs;
  * one-mapping-name (PCTXR-01): an OTel SDK's process context beside Elastic's reference, in a memfd this
    kernel cannot rename: its resource exported, or the pid alone;
  * no-registration (MSG-01) and wrong-counts (MSG-08): Elastic's reference APM agent journals every datagram
    it reads: the registration first and counts that sum to the samples sent, or correlations without a
    registration, each count one more than the samples it covers.

And for every defect: --json names the defects in force, stderr warns that the reader is defective, and a name
no protocol declares is refused. first-duplicate-wins (TCTXR-12), Elastic's ignores-valid/ignores-trace-present
(TLS-08, TLS-09), any-signature (PCTXR-02) and ignores-seqlock (PCTXR-03, 04) have no writer here that shows
their hazard to a sampled process (no duplicate key, no poison ids under valid 0 or trace-present 0, no process
context with a wrong signature or a long zero timestamp beside records): their policies are unit-tested where
the rule sits (ReadingPolicy.*, AgentRecordPolicy.*, ProcessContextReadDefects.*).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from build_products import HOST_ARCH, REPO, TRACECORR, fixture_program, need, package_fixture_program
from fixture_process import WAIT_S, FixtureProcess, read_journal
from thread_context_writer import DYNAMIC_TLS, models_built

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr
from tracecorr.profiles import HAVE_PROFILES, ProfilesReceiver

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the fixtures run natively on x86-64 here"),
              pytest.mark.skipif(not HAVE_PROFILES, reason="built without OTLP profiles (libgrpc++-dev)")]

DURATION_S = 2
FREQUENCY_HZ = 99
TCTX = "otel_thread_context"
WRITER = "otel-tctx-writer"
# The writers busy a tenth of the time: the ptrace reader stops each thread at its frequency whether it runs or
# not, so a writer burning both CPUs was sampled no more, and only slowed what ran beside it (the module: 61
# CPU-s in a CI with writers busy 100 %, 20 at 10 %, every test passing beside stress-ng --cpu 2 too).
HELD = ["--threads", "2", "--hold", "--busy-percent", "10"]
OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL")


@pytest.fixture(scope="module")
def cli():
    return need(TRACECORR)


def tctx_program(kind: str, name: str) -> Path:
    """The OTEP 4947 writer of a reference model, a mutant or a variant."""
    return need(package_fixture_program(TCTX, WRITER, HOST_ARCH).parent.parent / kind / name / WRITER)


@contextlib.contextmanager
def writer(program: Path, args: list[str], journal: Path, env: dict | None = None) -> Iterator[FixtureProcess]:
    """The writer started, its workers ready; stopped (as a group) on the way out."""
    process = FixtureProcess([str(program), *args], journal, dict(os.environ, **(env or {})))
    try:
        process.read_line()  # its first line: the process started
        process.wait_journal("ready", 1)
        yield process
    finally:
        process.stop()


class Run:
    """One agent run: its exit code, --json summary, stderr and the samples the receiver took."""

    def __init__(self, code: int, summary: dict, log: str, samples: list):
        self.code, self.summary, self.log, self.samples = code, summary, log, samples

    def of(self, pid: int) -> list:
        return [s for s in self.samples if s.pid == pid]

    def linked(self, pid: int) -> list:
        return [s for s in self.of(pid) if s.span_id is not None]

    def process(self, pid: int) -> dict:
        (entry,) = [p for p in self.summary["processes"] if p["pid"] == pid and p.get("protocol")]
        return entry


def run_agent(cli, pid: int, *defects: str, extra: tuple[str, ...] = (), duration_s: float = DURATION_S) -> Run:
    """The ptrace agent over `pid` for `duration_s`, exporting to a fresh receiver, with `defects` in force."""
    env = {k: v for k, v in os.environ.items() if k not in OTEL_VARIABLES}
    with ProfilesReceiver("grpc") as receiver:
        args = [str(cli), "agent", "--pid", str(pid), "--reader", "ptrace", "--duration", str(duration_s),
                "--frequency", str(FREQUENCY_HZ), "--json", "-", "--otlp-endpoint", receiver.endpoint, *extra]
        for d in defects:
            args += ["--reader-defect", d]
        r = subprocess.run(args, capture_output=True, text=True, timeout=duration_s + 4 * WAIT_S, env=env)
        assert r.stdout, f"no summary (exit {r.returncode}): {r.stderr}"
        summary = json.loads(r.stdout)
        exported = summary["otlp_export"]["samples_exported"]
        assert receiver.wait_for(lambda s: len(s) >= exported, WAIT_S)
        samples = receiver.samples()
    assert summary["reader_defects"] == sorted(defects), summary["reader_defects"]
    warned = "THIS READER IS DEFECTIVE ON PURPOSE" in r.stderr
    assert warned == bool(defects), r.stderr
    for d in defects:
        assert d in r.stderr, r.stderr
    return Run(r.returncode, summary, r.stderr, samples)


def hex_of(value: bytes | None) -> str | None:
    return value.hex() if value is not None else None


def published_links(process: FixtureProcess) -> dict[int, tuple[str, str]]:
    return {e["tid"]: (e["trace_id"], e["span_id"]) for e in process.journal("record")}


# ---- OTEP 4947 ----------------------------------------------------------------------------------------------

def test_ignores_valid_links_records_whose_valid_byte_is_not_1(cli, tmp_path):
    """TCTXR-08: valid-2's records carry ids under valid 2: a conforming reader exports no link."""
    with writer(tctx_program("mutants", "valid-2"), HELD, tmp_path / "journal.jsonl") as w:
        pid = w.proc.pid
        published = published_links(w)
        conforming = run_agent(cli, pid)
        defective = run_agent(cli, pid, "ignores-valid")
    assert len(published) == 2, published
    assert conforming.of(pid) and not conforming.linked(pid), "a record with valid 2 was read"
    assert "record_not_valid" in conforming.process(pid)["statuses"]
    linked = defective.linked(pid)
    assert {s.tid for s in linked} == set(published), "every worker's invalid record exported as a link"
    for s in linked:
        assert (hex_of(s.trace_id), hex_of(s.span_id)) == published[s.tid]


def test_keeps_out_of_map_exports_entries_past_the_key_map(cli, tmp_path):
    """TCTXR-11: key-outside-map ends every record with {key map length + 3, 1, "x"}."""
    with writer(tctx_program("mutants", "key-outside-map"), HELD, tmp_path / "journal.jsonl") as w:
        pid = w.proc.pid
        conforming = run_agent(cli, pid)
        defective = run_agent(cli, pid, "keeps-out-of-map")
    for run in (conforming, defective):
        assert run.linked(pid), "the workers' records were exported"
    assert not any(k.startswith("tracecorr.index.") for s in conforming.of(pid) for k in s.attributes)
    kept = {k: v for s in defective.linked(pid) for k, v in s.attributes.items() if k.startswith("tracecorr.index.")}
    assert kept, "no entry past the key map was exported"
    assert set(kept.values()) == {"x"}, kept
    (index,) = {int(k.rsplit(".", 1)[1]) for k in kept}
    key_map = defective.process(pid)["records_at"]["key_map"]
    assert index == len(key_map) + 3, (index, key_map)


# A key every 500 ms for 32 periods (the writer's LATE_KEYS_MAX): 16 s in which the defective run, the first,
# meets keys appended after its discovery however late a loaded machine starts it.
LATE_KEYS = ["--threads", "2", "--span-ms", "40", "--busy-percent", "10", "--late-key-after-ms", "300",
             "--late-key-every-ms", "500"]


def late_keys(process: FixtureProcess) -> set[str]:
    """The keys the writer appended to its map after start-up (its key_map journal lines)."""
    maps = [e["keys"] for e in process.journal("key_map")]
    return set(maps[-1]) - set(maps[0]) if maps else set()


def test_never_refreshes_key_map_drops_keys_appended_after_discovery(cli, tmp_path):
    """TCTXR-10: a key appended to the map every 300 ms and used at once by the records."""
    with writer(tctx_program("reference", "tlsdesc"), LATE_KEYS, tmp_path / "journal.jsonl") as w:
        pid = w.proc.pid
        defective = run_agent(cli, pid, "never-refreshes-key-map")
        conforming = run_agent(cli, pid)  # its discovery map may hold every key by now: some were appended late
        appended = late_keys(w)
    assert appended, "the writer appended no key"
    conforming_keys = {k for s in conforming.of(pid) for k in s.attributes}
    assert conforming_keys & appended, "the refreshed key map named no appended key"
    described = defective.process(pid)["records_at"]
    assert described["key_map_reads"] == 0 and not described["key_map_refreshed"], described
    discovered = set(described["key_map"])
    unknown = {i for t in defective.process(pid)["threads"] for r in t["records"] for i in r["record"]["unknown_keys"]}
    assert unknown, "no record named a key the discovery map lacked: the hazard was not met"
    exported = {k for s in defective.of(pid) for k in s.attributes if k != "thread.id"}
    assert exported and exported <= discovered, (exported, discovered)


def test_reads_any_schema_reads_another_runtimes_records(cli, tmp_path):
    """TCTXR-03: nodejs-schema announces nodejs_v1_dev and names its variable otel_thread_ctx_nodejs_v1."""
    with writer(tctx_program("variants", "nodejs-schema"), HELD, tmp_path / "journal.jsonl") as w:
        pid = w.proc.pid
        published = published_links(w)
        conforming = run_agent(cli, pid)
        defective = run_agent(cli, pid, "reads-any-schema")
    assert conforming.code == 1 and "nodejs_v1_dev" in conforming.log, conforming.log
    assert not conforming.linked(pid), "a record of another schema was read"
    assert defective.code == 0, defective.log
    linked = defective.linked(pid)
    assert {s.tid for s in linked} == set(published), "the lookalike's records were not read"
    for s in linked:
        assert (hex_of(s.trace_id), hex_of(s.span_id)) == published[s.tid]


DYNAMIC_MODELS = [("tlsdesc-dlopen", DYNAMIC_TLS), ("musl-dlopen", {})]


@pytest.mark.parametrize("model,env", DYNAMIC_MODELS, ids=["glibc-dlopen-dynamic-tls", "musl-dlopen"])
def test_static_tls_only_gives_no_context_in_dynamic_tls(cli, tmp_path, model, env):
    """TCTXR-05: the library dlopen'ed after start-up, its TLS block allocated per thread (the DTV)."""
    if model not in models_built():
        pytest.skip(f"{model} was not built (fixtures/otel_thread_context/README.md, Models)")
    with writer(tctx_program("reference", model), HELD, tmp_path / "journal.jsonl", env) as w:
        pid = w.proc.pid
        published = published_links(w)
        conforming = run_agent(cli, pid)
        defective = run_agent(cli, pid, "static-tls-only")
    assert conforming.process(pid)["records_at"]["dynamic_tls"], "not dynamic TLS: the hazard was not met"
    assert {s.tid for s in conforming.linked(pid)} == set(published)
    workers = [s for s in defective.of(pid) if s.tid in published]
    assert workers, "the workers were not sampled"
    assert not defective.linked(pid), "a record in dynamic TLS gave a context"


# The stage's oversize state held: three 250-byte pad values after the usual attributes, attrs_data_size about
# 1026: the read bound (1024 bytes) cuts the third pad entry.
OVERSIZE = ["--threads", "2", "--busy-percent", "10", "--state-journal", "--hold-hazard", "oversize"]
PAST_THE_BOUND = "tracecorr.pad.3"


def test_unbounded_record_exports_the_entry_past_the_bound(cli, tmp_path):
    """TCTXR-16: a record declaring more than 1024 bytes: the conforming reader drops the entry the bound cut,
    the defective one reads the record again whole and exports it."""
    with writer(tctx_program("reference", "tlsdesc"), OVERSIZE, tmp_path / "journal.jsonl") as w:
        pid = w.proc.pid
        conforming = run_agent(cli, pid)
        defective = run_agent(cli, pid, "unbounded-record")
    for run in (conforming, defective):
        assert run.linked(pid), "the workers' records were exported"
        assert any("tracecorr.pad.2" in s.attributes for s in run.linked(pid)), "the pad before the bound was dropped"
    assert not any(PAST_THE_BOUND in s.attributes for s in conforming.of(pid)), "read past the bound"
    assert any(PAST_THE_BOUND in s.attributes for s in defective.linked(pid)), "no entry past the bound exported"


IN_PLACE = ["--threads", "2", "--span-ms", "4", "--style", "in-place", "--busy-percent", "10"]


def torn(sample) -> bool:
    """The writer's span n of worker i has trace id 7c x 8 + be64(i+1 << 32 | n) and span id 5e + the same
    seq's low 7 bytes: a pair whose two halves name different spans was never published together."""
    return sample.trace_id[9:] != sample.span_id[1:]


def test_reads_running_thread_exports_torn_pairs(cli, tmp_path):
    """TCTXR-06: the reference writer updating its records in place every 4 ms; the ptrace reader stops the
    thread while it reads, the defective one reads trace_id and span_id 1 ms apart while the thread runs."""
    with writer(tctx_program("reference", "tlsdesc"), IN_PLACE, tmp_path / "journal.jsonl") as w:
        pid = w.proc.pid
        # Longer runs: a worker stopped mid-update (valid 0) gives no link, and a starved machine samples less.
        conforming = run_agent(cli, pid, duration_s=2 * DURATION_S)
        defective = run_agent(cli, pid, "reads-running-thread", duration_s=2 * DURATION_S)
    for run in (conforming, defective):
        statuses = run.process(pid)["statuses"]
        assert len(run.linked(pid)) >= 20, f"{len(run.linked(pid))} linked samples, too few to judge: {statuses}"
        assert all(s.trace_id[:8] == b"\x7c" * 8 and s.span_id[0] == 0x5e for s in run.linked(pid))
    assert not [s for s in conforming.linked(pid) if torn(s)], "a stopped thread gave a torn pair"
    assert [s for s in defective.linked(pid) if torn(s)], "no torn pair from reads 1 ms apart"


@pytest.mark.parametrize("defect", ["reads-running-thread", "any-signature"])
def test_the_samplers_defects_are_the_ptrace_readers(cli, defect):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        r = subprocess.run([str(cli), "agent", "--pid", str(sleeper.pid), "--reader", "bpf", "--duration", "1",
                            "--reader-defect", defect], capture_output=True, text=True, timeout=30)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert r.returncode != 0 and "--reader ptrace" in r.stderr and defect in r.stderr, r.stderr


# ---- Elastic v1 ---------------------------------------------------------------------------------------------

ELASTIC_ARGS = ["--threads", "2", "--spans", "2", "--span-ms", "15", "--busy-percent", "10"]
SPEC = ("--personality", "spec", "--flush-interval", "200")


@contextlib.contextmanager
def elastic_fixture(tmp_path) -> Iterator[subprocess.Popen]:
    """Elastic's reference APM agent (correlation enabled by the registration: the default, auto)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    journal = tmp_path / "journal.jsonl"
    env = dict(os.environ, TRACECORR_FIXTURE_JOURNAL=str(journal), TMPDIR=str(tmp_path))
    proc = subprocess.Popen([str(need(fixture_program(HOST_ARCH))), *ELASTIC_ARGS], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT_S
        while not read_journal(journal, "ready"):
            assert proc.poll() is None and time.monotonic() < deadline, "the fixture never got ready"
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def messages_read(journal: Path, sent: int) -> list[dict]:
    """The datagrams the fixture read, once it read `sent` of them (or WAIT_S passed)."""
    deadline = time.monotonic() + WAIT_S
    while len(read_journal(journal, "message")) < sent and time.monotonic() < deadline:
        time.sleep(0.05)
    return read_journal(journal, "message")


def elastic_run(cli, tmp_path, *defects: str) -> tuple[dict, list[dict]]:
    with elastic_fixture(tmp_path) as proc:
        run = run_agent(cli, proc.pid, *defects, extra=SPEC)
        entry = run.process(proc.pid)
        messages = messages_read(tmp_path / "journal.jsonl", entry["messages_sent"] + entry["registrations_sent"])
    assert run.code == 0, run.log
    assert entry["correlated"] > 0 and entry["messages_sent"] > 0, entry
    return entry, messages


def test_no_registration_sends_correlations_without_registering(cli, tmp_path):
    """MSG-01: the registration comes before any correlation."""
    entry, messages = elastic_run(cli, tmp_path / "conforming")
    assert entry["registrations_sent"] == 1 and messages[0]["kind"] == "registration", messages[:3]
    entry, messages = elastic_run(cli, tmp_path / "defective", "no-registration")
    kinds = [m["kind"] for m in messages]
    assert entry["registrations_sent"] == 0 and "registration" not in kinds, kinds[:5]
    assert "correlation" in kinds, "no correlation was read"


def test_wrong_counts_says_one_sample_more_per_correlation(cli, tmp_path):
    """MSG-08: a correlation's count is the number of samples it covers."""
    entry, messages = elastic_run(cli, tmp_path / "conforming")
    correlations = [m for m in messages if m["kind"] == "correlation"]
    assert len(correlations) == entry["messages_sent"], (len(correlations), entry["messages_sent"])
    assert sum(m["count"] for m in correlations) == entry["samples_sent"]
    entry, messages = elastic_run(cli, tmp_path / "defective", "wrong-counts")
    correlations = [m for m in messages if m["kind"] == "correlation"]
    assert len(correlations) == entry["messages_sent"], (len(correlations), entry["messages_sent"])
    assert sum(m["count"] for m in correlations) == entry["samples_sent"] + entry["messages_sent"]


# ---- the process context (OTEP 4719), read by the engine for every protocol --------------------------------

CONTEXT_PRELOAD = package_fixture_program("otel_process_context", "libotel-ctx-preload.so", HOST_ARCH)


def test_one_mapping_name_misses_a_memfd_publication(cli, tmp_path):
    """PCTXR-01: Elastic's reference holding its records, an OTel SDK's process context preloaded beside it.
    Without CONFIG_ANON_VMA_NAME (this machine) its mapping is /memfd:OTEL_CTX, which the defect never looks
    for: the conforming reader exports the context's resource, the defective one the pid alone."""
    journal = tmp_path / "journal.jsonl"
    env = dict(os.environ, TRACECORR_FIXTURE_JOURNAL=str(journal), TMPDIR=str(tmp_path),
               LD_PRELOAD=str(need(CONTEXT_PRELOAD)), OTEL_SERVICE_NAME="checkout")
    proc = subprocess.Popen([str(need(fixture_program(HOST_ARCH))), "--hold", "--threads", "2"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT_S
        while len(read_journal(journal, "record")) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "the fixture published no records"
            time.sleep(0.05)
        names = [line.split()[-1] for line in open(f"/proc/{proc.pid}/maps") if "OTEL_CTX" in line]
        conforming = run_agent(cli, proc.pid)
        defective = run_agent(cli, proc.pid, "one-mapping-name")
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT_S)
    if any(n.startswith("[anon_shmem:") for n in names):
        pytest.skip(f"this kernel names the context {names}: the defect finds it (no hazard here)")
    assert names, "the preload published no process context"
    assert any(s.resource.get("service.name") == "checkout" for s in conforming.of(proc.pid)), "resource not read"
    assert defective.of(proc.pid), "nothing exported"
    assert all(s.resource == {"process.pid": proc.pid} for s in defective.of(proc.pid)), "a memfd context was read"


# ---- the switch itself --------------------------------------------------------------------------------------

def test_help_lists_every_defect_with_its_rule(cli):
    r = subprocess.run([str(cli), "agent", "--help"], capture_output=True, text=True, timeout=30)
    assert "for conformance kill matrices: make the reference reader break one reader requirement" in \
        r.stdout.lower().replace("\n", " "), r.stdout
    for name, rule in [("ignores-valid", "TCTXR-08"), ("ignores-valid", "TLS-08"), ("ignores-trace-present", "TLS-09"),
                       ("never-refreshes-key-map", "TCTXR-10"), ("keeps-out-of-map", "TCTXR-11"),
                       ("first-duplicate-wins", "TCTXR-12"), ("reads-any-schema", "TCTXR-03"),
                       ("static-tls-only", "TCTXR-05"), ("unbounded-record", "TCTXR-16"),
                       ("never-looks-again", "TCTXR-02"),
                       ("reads-running-thread", "TCTXR-06"),
                       ("no-registration", "MSG-01"), ("wrong-counts", "MSG-08"), ("one-mapping-name", "PCTXR-01"),
                       ("any-signature", "PCTXR-02"), ("ignores-seqlock", "PCTXR-03")]:
        line = next((l for l in r.stdout.splitlines() if l.strip().startswith(name + " [")), "")
        assert rule in line, (name, rule, line)


def test_an_unknown_defect_is_refused(cli):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        r = subprocess.run([str(cli), "agent", "--pid", str(sleeper.pid), "--reader", "ptrace", "--duration", "1",
                            "--reader-defect", "ignores-everything"], capture_output=True, text=True, timeout=30)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert r.returncode != 0 and "ignores-everything" in r.stderr, r.stderr
