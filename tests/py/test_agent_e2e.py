"""`tracecorr agent` end to end against the reference fixture.

The fixture exports OTLP/HTTP JSON to an in-test receiver and journals what it
published; the agent samples it (BPF, or ptrace) and writes a JSON summary of
what it sent. The test holds the two against each other:

  * every exported transaction's elastic.profiler_stack_trace_ids equals, as a
    multiset, what the agent says it sent for that transaction (both
    personalities);
  * every trace id, transaction id and span id the sampler read belongs to a
    span the fixture exported;
  * the ptrace reader reads the same records as the BPF reader (the --hold
    fixture's fixed ids, as journaled);
  * without privilege, `agent` fails clearly and suggests --reader ptrace;
  * a fixture that also publishes an OTel process context (an SDK preloaded
    beside it) has each sample attributed to the resource it published then.

Build outputs come from $TRACECORR_BUILD (default: build/ in this repository):
<build>/bin/tracecorr and <build>/fixtures/x86_64/reference/tracecorr-fixture.
"""
import collections
import json
import os
import signal
import subprocess
import time

import pytest

from fixture_process import read_journal
from json_otlp_receiver import JsonOtlpReceiver

from build_products import HOST_ARCH as ARCH, REGISTRY, TRACECORR, fixture_program, need, package_fixture_program

pytestmark = pytest.mark.root
FIXTURE = fixture_program(ARCH)
# An OTel SDK's process context (OTEP 4719) for any program: fixtures/otel_process_context/preload/.
CONTEXT_PRELOAD = package_fixture_program("otel_process_context", "libotel-ctx-preload.so", ARCH)
ATTRIBUTE = REGISTRY["attribute"]["name"]
ENABLED_ENV = REGISTRY["config"]["enabled"]["env"]
TLS = {f["name"]: f for f in REGISTRY["layouts"]["tls_record"]["fields"]}
TLS_SIZE = REGISTRY["layouts"]["tls_record"]["size"]
WAIT_S = 20.0  # bound on waiting for an event; a missed event fails, it never slows a pass


@pytest.fixture(scope="module")
def tracecorr():
    return need(TRACECORR)


@pytest.fixture(scope="module")
def bpf_works(tracecorr):
    r = subprocess.run([str(tracecorr), "doctor", "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(r.stdout)
    if not report["verdicts"]["bpf_sampler"]["works"]:
        pytest.skip("BPF sampler unavailable here: " + report["verdicts"]["bpf_sampler"]["summary"])
    return True


class Fixture:
    def __init__(self, tmp_path, args, env=None):
        self.receiver = JsonOtlpReceiver()
        self.journal = tmp_path / "journal.jsonl"
        e = dict(os.environ)
        e.update({"OTEL_EXPORTER_OTLP_ENDPOINT": self.receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200",
                  "TRACECORR_FIXTURE_JOURNAL": str(self.journal), "TMPDIR": str(tmp_path)})
        e.update(env or {})
        self.proc = subprocess.Popen([str(need(FIXTURE))] + args, env=e, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.wait_for("ready")

    @property
    def pid(self):
        return self.proc.pid

    def events(self, kind=None):
        return read_journal(self.journal, kind)

    def wait_for(self, kind):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.events(kind):
                return
            assert self.proc.poll() is None, f"fixture exited: {self.proc.stderr.read()}"
            time.sleep(0.05)
        pytest.fail(f"the fixture journaled no '{kind}' within {WAIT_S} s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.receiver.close()


def run_agent(tracecorr, tmp_path, pid, *args, name="agent"):
    out = tmp_path / f"{name}.json"
    r = subprocess.run([str(tracecorr), "agent", "--pid", str(pid), "--json", str(out)] + list(args),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"agent failed ({r.returncode}):\n{r.stderr}"
    summary = json.loads(out.read_text())
    (process,) = [p for p in summary["processes"] if p["pid"] == pid]
    return summary, process, r.stderr


def attribute_ids(span):
    for a in span.get("attributes", []):
        if a["key"] == ATTRIBUTE:
            return [v["stringValue"] for v in a["value"]["arrayValue"]["values"]]
    return []


def is_transaction(span):
    return not span.get("parentSpanId")


@pytest.mark.parametrize("personality", ["spec", "ebpf-profiler"])
def test_exported_stack_trace_ids_are_what_the_agent_sent(tracecorr, bpf_works, tmp_path, personality):
    # The eBPF profiler never registers, so the fixture must not wait for a
    # registration (CONF-02): correlation explicitly enabled. The spec
    # personality runs against the default (auto), which its registration enables.
    env = {ENABLED_ENV: "true"} if personality == "ebpf-profiler" else {}
    fx = Fixture(tmp_path, ["--threads", "2", "--spans", "2", "--span-ms", "15"], env)
    try:
        summary, proc, log = run_agent(tracecorr, tmp_path, fx.pid, "--duration", "4", "--personality", personality,
                                       "--flush-interval", "200")
        # Every transaction sampled during the agent's run ends within
        # milliseconds; give deferral (1 s) and the exporter time to ship them.
        time.sleep(3.0)
    finally:
        fx.stop()

    assert summary["personality"] == personality and summary["reader"] == "bpf"
    assert proc["state"].startswith("sampling"), proc["state"]
    assert proc["correlated"] > 0 and proc["samples_sent"] > 0, log
    messages = [m for m in fx.events("message")]
    kinds = [m["kind"] for m in messages]
    if personality == "spec":
        assert proc["registrations_sent"] == 1
        assert kinds[0] == "registration", "MSG-01: registration comes first"
        assert kinds.count("registration") == 1
    else:
        assert proc["registrations_sent"] == 0 and "registration" not in kinds
        assert proc["messages_sent"] == proc["samples_sent"], "one message per sample"
        assert all(m["count"] == 1 for m in messages if m["kind"] == "correlation")
    # What the fixture received is what the agent counted as sent.
    received = sum(m["count"] for m in messages if m["kind"] == "correlation")
    assert received == proc["samples_sent"]
    assert proc["samples_sent"] + proc["samples_lost"] + proc["samples_unsendable"] == proc["correlated"]

    spans = fx.receiver.spans
    exported = {(s["traceId"].lower(), s["spanId"].lower()): s for s in spans}
    transactions = {k: s for k, s in exported.items() if is_transaction(s)}
    assert transactions, "the fixture exported no transaction"
    sent = {(t["trace_id"], t["transaction_id"]): collections.Counter(t["stack_trace_ids"])
            for t in proc["transactions"]}

    # Every exported transaction carries exactly what the agent sent for it.
    # In auto mode (spec run) transactions that ended before the registration
    # was applied are exported at once, undeferred (CONF-02): a correlation
    # the agent sent for one of those arrives after it left, so they are only
    # held to "nothing more than was sent".
    immediate = {(e["trace_id"], e["span_id"]) for e in fx.events("export") if e.get("reason") == "immediate"}
    if personality == "ebpf-profiler":
        assert not any(k in immediate for k in transactions), "enabled=true defers every transaction"
    compared = 0
    for key, span in transactions.items():
        expected = sent.get(key, collections.Counter())
        if key in immediate:
            assert not (collections.Counter(attribute_ids(span)) - expected)
            continue
        got = collections.Counter(attribute_ids(span))
        assert got == +expected, f"transaction {key}: attribute {dict(got)} != sent {dict(expected)}"
        compared += bool(expected)
    assert compared > 0, "no exported transaction received a correlation"

    # Every id the sampler read belongs to an exported span: the transaction
    # itself, and each span that was active when sampled.
    for t in proc["transactions"]:
        key = (t["trace_id"], t["transaction_id"])
        assert key in transactions, f"the sampler read transaction {key}, which the fixture never exported"
        for span_id in t["span_ids"]:
            assert (t["trace_id"], span_id) in exported, f"span {span_id} of trace {t['trace_id']} never exported"


def expected_record_hex(ev):
    rec = bytearray(TLS_SIZE)
    minor = TLS["layout_minor_version"]
    rec[minor["offset"]:minor["offset"] + minor["size"]] = int(ev["minor"]).to_bytes(minor["size"], "little")
    rec[TLS["valid"]["offset"]] = ev["valid"]
    rec[TLS["trace_present"]["offset"]] = ev["trace_present"]
    rec[TLS["trace_flags"]["offset"]] = ev["trace_flags"]
    for name in ("trace_id", "span_id", "transaction_id"):
        f = TLS[name]
        rec[f["offset"]:f["offset"] + f["size"]] = bytes.fromhex(ev[name])
    return rec.hex()


def test_ptrace_reader_reads_the_same_records_as_bpf(tracecorr, bpf_works, tmp_path):
    threads = 3
    fx = Fixture(tmp_path, ["--hold", "--threads", str(threads)])
    try:
        _, by_bpf, _ = run_agent(tracecorr, tmp_path, fx.pid, "--duration", "2", "--reader", "bpf", name="bpf")
        _, by_ptrace, _ = run_agent(tracecorr, tmp_path, fx.pid, "--duration", "2", "--reader", "ptrace",
                                    "--frequency", "20", name="ptrace")
        last = {}
        for ev in fx.events("record"):
            last[ev["tid"]] = ev
    finally:
        fx.stop()
    expected = {expected_record_hex(ev) for ev in last.values()}
    assert len(expected) == threads
    # The --hold ids are predictable: trace 15 x ab + n, transaction 7 x cd + n.
    for n in range(1, threads + 1):
        assert any(h[10:42] == "ab" * 15 + f"{n:02x}" and h[58:74] == "cd" * 7 + f"{n:02x}" for h in expected)
    bpf_records = {r["hex"] for r in by_bpf["records"]}
    ptrace_records = {r["hex"] for r in by_ptrace["records"]}
    assert bpf_records == expected
    assert ptrace_records == expected
    # Both attribute the samples to the same transactions.
    assert {(t["trace_id"], t["transaction_id"]) for t in by_bpf["transactions"]} == \
           {(t["trace_id"], t["transaction_id"]) for t in by_ptrace["transactions"]}
    # ptrace stops every thread, including those without a record: reported as such, not as errors.
    assert by_ptrace["not_correlated"].get("no_record", 0) > 0
    assert "record_pointer_null" not in by_ptrace["errors"]


def test_records_being_updated_or_without_trace_are_never_correlated(tracecorr, bpf_works, tmp_path):
    # Short transactions with a cleared record between them: some samples see
    # trace_present 0 (TLS-09). Whatever the sampler read that was not a
    # correlatable record must not have been sent.
    fx = Fixture(tmp_path, ["--threads", "2", "--spans", "1", "--span-ms", "1"])
    try:
        summary, proc, _ = run_agent(tracecorr, tmp_path, fx.pid, "--duration", "3", "--flush-interval", "200")
    finally:
        fx.stop()
    not_correlated = sum(proc["not_correlated"].values()) + sum(proc["errors"].values())
    assert proc["samples"] == proc["correlated"] + not_correlated
    assert "process_context" not in proc, "the fixture alone publishes no OTel process context"
    sent = sum(t["samples_sent"] for t in proc["transactions"])
    assert sent == proc["samples_sent"] <= proc["correlated"]
    for t in proc["transactions"]:
        assert t["samples_read"] >= t["samples_sent"]


def test_agent_without_privilege_suggests_ptrace(tracecorr, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop privilege")
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    r = subprocess.run(drop + [str(tracecorr), "agent", "--pid", str(os.getpid()), "--duration", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    assert "--reader ptrace" in r.stderr
    assert "privilege" in r.stderr or "CAP_BPF" in r.stderr or "Operation not permitted" in r.stderr
    d = subprocess.run(drop + [str(tracecorr), "doctor", "--json"], capture_output=True, text=True, timeout=60)
    assert d.returncode == 3
    report = json.loads(d.stdout)
    assert report["verdicts"]["bpf_sampler"]["works"] is False
    assert "NOT" in report["verdicts"]["bpf_sampler"]["summary"]


def test_doctor_exit_code_matches_its_bpf_verdict(tracecorr):
    r = subprocess.run([str(tracecorr), "doctor", "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(r.stdout)
    names = {c["name"] for c in report["checks"]}
    assert {"privilege", "btf", "perf_event", "ptrace", "max_dgram_qlen", "bpf_stats"} <= names
    assert r.returncode == (0 if report["verdicts"]["bpf_sampler"]["works"] else 3)


def test_agent_rejects_a_missing_process_and_bad_arguments(tracecorr):
    r = subprocess.run([str(tracecorr), "agent", "--pid", "999999999", "--duration", "1"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 3 and "no such process" in r.stderr
    r = subprocess.run([str(tracecorr), "agent", "--duration", "1"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2


# The spec personality's delivery to agents that poll (20 and 100 ms, reading until the queue is
# empty or only what it holds), late and dropped counts against the agent's journal, and --all
# ending on time: test_agent_delivery.py.


def test_ebpf_profiler_personality_keeps_that_profilers_losses_and_says_whose_they_are(tracecorr, bpf_works,
                                                                                         tmp_path):
    fx = Fixture(tmp_path, ["--threads", "4", "--socket-poll-ms", "100"], {ENABLED_ENV: "true"})
    try:
        _, proc, _ = run_agent(tracecorr, tmp_path, fx.pid, "--duration", "2", "--frequency", "1000",
                               "--personality", "ebpf-profiler")
    finally:
        fx.stop()
    eagain = proc["delivery"]["dropped"]["eagain"]
    assert eagain["samples"] == proc["samples_lost"] > 0, "one message per sample into a 10-datagram queue loses"
    assert "that profiler" in proc["delivery"]["dropped_causes"]["eagain"]
    assert proc["messages_sent"] == proc["samples_sent"]


def test_agent_rejects_a_flush_interval_that_contradicts_samples_delay(tracecorr):
    r = subprocess.run([str(tracecorr), "agent", "--pid", str(os.getpid()), "--flush-interval", "1000",
                        "--samples-delay-ms", "1000", "--duration", "1"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "not below --samples-delay-ms" in r.stderr, r.stderr


def test_agent_says_plainly_when_a_named_process_publishes_nothing_it_can_read(tracecorr):
    """A process without the agent library: not a silent success (exit 1, and why)."""
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        r = subprocess.run([str(tracecorr), "agent", "--pid", str(sleeper.pid), "--reader", "ptrace", "--duration", "1"],
                           capture_output=True, text=True, timeout=30)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert r.returncode == 1, r.stderr
    # The protocols looked for, by name (issue 25): not only Elastic's library.
    assert (f"nothing sampled: pid {sleeper.pid}: publishes none of the protocols tracecorr agent samples "
            "(elastic-v1: no library defining") in r.stderr, r.stderr
    assert "otel-thread-context" in r.stderr and "process context" in r.stderr, r.stderr


@pytest.mark.host_wide
def test_agent_all_finds_agents_started_later_and_retires_those_that_exit(tracecorr, bpf_works, tmp_path):
    """--all: agents that start while the host agent runs are found (the
    rescan), and one that exits is retired, not sampled or sent to again."""
    out = tmp_path / "all.json"
    agent = subprocess.Popen([str(tracecorr), "agent", "--all", "--duration", "7", "--json", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    fixtures = []
    try:
        time.sleep(1.0)  # the host agent is running before either agent process exists
        for name in ("staying", "leaving"):
            (tmp_path / name).mkdir()
            fixtures.append(Fixture(tmp_path / name, ["--threads", "2"], {ENABLED_ENV: "true"}))
        staying, leaving = fixtures
        time.sleep(3.0)
        leaving.stop()
        _, stderr = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
        for fx in fixtures:
            fx.stop()
    assert agent.returncode == 0, stderr
    processes = {p["pid"]: p for p in json.loads(out.read_text())["processes"]}
    assert staying.pid in processes and leaving.pid in processes, f"not discovered: {sorted(processes)}\n{stderr}"
    assert processes[staying.pid]["correlated"] > 0 and not processes[staying.pid]["exited"]
    assert processes[leaving.pid]["exited"], processes[leaving.pid]
    assert processes[leaving.pid]["correlated"] > 0, "sampled while it ran"


def journal_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("reader", ["bpf", "ptrace"])
def test_agent_says_which_resource_each_sample_belongs_to(tracecorr, bpf_works, tmp_path, reader):
    """The fixture runs with an OTel SDK's process context beside it (the
    preloaded writer, updating every 200 ms). The sampler reads the context's
    header with every sample; the summary counts samples per resource and per
    publication, every publication it names is one the SDK journaled, and
    samples taken mid-update are counted as such, never attributed."""
    sdk_journal = tmp_path / "sdk.jsonl"
    fx = Fixture(tmp_path, ["--threads", "2"],
                 {"LD_PRELOAD": str(need(CONTEXT_PRELOAD)), "OTEL_SERVICE_NAME": "checkout",
                  "OTEL_RESOURCE_ATTRIBUTES": "service.instance.id=i-42,deployment.environment.name=test",
                  "TRACECORR_PCTX_UPDATE_MS": "200", "TRACECORR_PCTX_JOURNAL": str(sdk_journal)})
    try:
        _, proc, log = run_agent(tracecorr, tmp_path, fx.pid, "--duration", "3", "--reader", reader)
    finally:
        fx.stop()
    published = [ev for ev in journal_lines(sdk_journal) if ev["event"] in ("publish", "update")]
    assert published and published[0]["event"] == "publish", "the SDK stand-in did not publish"
    timestamps = {ev["timestamp"] for ev in published}

    assert proc["correlated"] > 0, "correlation goes on as before"
    context = proc["process_context"]
    assert context["header_address"] == published[0]["mapping"]
    assert context["mappings"] == 1
    (resource,) = context["resources"]
    assert resource["service_name"] == "checkout" and resource["service_instance_id"] == "i-42"
    named = [p["published_at_ns"] for p in resource["publications"]]
    assert set(named) <= timestamps, "every publication a sample named is one the SDK published"
    assert len(named) >= 2, "samples were attributed across the SDK's updates"
    assert sum(p["samples"] for p in resource["publications"]) == resource["samples"] == context["resolved"]
    assert context["samples"] == (context["resolved"] + context["being_written"] + context["missed"] +
                                  context["unreadable"] + context["header_unreadable"])
    assert context["unreadable"] == 0 and context["header_unreadable"] == 0 and context["overflow"] == 0
    assert 0 < context["samples"] <= proc["samples"]
    assert "resource service.name=checkout service.instance.id=i-42" in log
    # The SDK dropped its context when the fixture exited.
    assert journal_lines(sdk_journal)[-1]["event"] == "drop"
