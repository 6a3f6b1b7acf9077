"""`tracecorr conform` as a CI gate sees it: attach mode, the exit codes for
usage and environment errors, and the expectations file's life cycle
(expected failure, stale entry, unknown id, --update-expectations)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

import conform_support as cs

ARCH = "x86_64"
REFERENCE = cs.fixture_program(ARCH)
PADDED = cs.fixture_program(ARCH, "attr-padded-base64")  # breaks ATTR-03 only
CONFIG = cs.REGISTRY["config"]

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(not (cs.TRACECORR.exists() and REFERENCE.exists() and PADDED.exists()),
                                 reason=cs.missing_reason(f"tracecorr or the {ARCH} fixtures under {cs.BUILD}"))]


def conform(*args: str, timeout: float = cs.RUN_TIMEOUT_S, quiet: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(cs.TRACECORR), "conform", *(["--quiet"] if quiet else []), *args],
                          capture_output=True, text=True, timeout=timeout)


# ---- attach mode -------------------------------------------------------------------------------------------

@pytest.fixture
def running_reference(tmp_path):
    """The reference, started the way an agent team would start its own agent
    for attach mode: correlation on, its exports sent to a fixed port."""
    port = cs.free_tcp_port()
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
               **{CONFIG["enabled"]["env"]: "true", CONFIG["socket_dir"]["env"]: str(tmp_path)})
    proc = subprocess.Popen([str(REFERENCE), "--threads", "2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert "socket=" in proc.stdout.readline(), "the reference did not start"
    yield proc.pid, port
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def test_attach_mode_judges_what_needs_no_restart_and_says_why_it_skips_the_rest(running_reference, tmp_path):
    pid, port = running_reference
    report_path = tmp_path / "report.json"
    run = conform("--pid", str(pid), "--otlp-port", str(port), "--json", str(report_path))
    report = json.loads(report_path.read_text())
    verdicts = {r["id"]: r for r in report["results"]}
    assert run.returncode == cs.EXIT_OK, run.stdout[-4000:]
    # Judged live: the library, storage, records (watched store by store), socket, messages, attribute.
    for rid in ("ELF-04", "PROC-01", "TLS-04", "TLS-05", "SOCK-02", "MSG-04", "ATTR-04", "DEFER-01", "HOST-01"):
        assert verdicts[rid]["verdict"] == "pass", verdicts[rid]
    # Not judgeable without watching the start or restarting with other settings: skipped, with the reason.
    assert verdicts["PROC-04"]["verdict"] == "skip" and "attach" in verdicts["PROC-04"]["reason"]
    for rid in ("DEFER-04", "DEFER-06", "CONF-01", "CONF-04", "HOST-02"):
        assert verdicts[rid]["verdict"] == "skip" and "needs a launch" in verdicts[rid]["reason"], verdicts[rid]
    assert os.path.exists(f"/proc/{pid}"), "attach mode must leave the agent running"


def forge_dynsym_section_header(library: Path) -> None:
    """Rewrites, in place, only what the loader never maps: appends a copy of
    .dynsym with every symbol moved by 0x1000 and points the .dynsym section
    header at it. A process that already runs the library does not notice."""
    import struct
    data = library.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        at = shoff + i * shentsize
        sh_type, = struct.unpack_from("<I", data, at + 4)
        if sh_type != 11:  # SHT_DYNSYM
            continue
        offset, size = struct.unpack_from("<QQ", data, at + 24)
        table = bytearray(data[offset:offset + size])
        for sym in range(0, size, 24):
            value, = struct.unpack_from("<Q", table, sym + 8)
            struct.pack_into("<Q", table, sym + 8, value + 0x1000 if value else 0)
        with open(library, "r+b") as f:  # the same inode: a rewrite in place
            f.seek(0, os.SEEK_END)
            new_offset = f.tell()
            f.write(table)
            f.seek(at + 24)
            f.write(struct.pack("<Q", new_offset))
        return
    raise AssertionError("no .dynsym section header")


def test_a_library_rewritten_under_the_running_agent_is_judged_by_what_the_process_loaded(tmp_path):
    """The section headers are not mapped: rewriting them changes nothing in
    the running process, so tracecorr must still find the storage where the
    process keeps it (PROC-01 passes) and say that the file disagrees."""
    directory = tmp_path / "agent"
    directory.mkdir()
    for f in REFERENCE.parent.iterdir():
        (directory / f.name).write_bytes(f.read_bytes())
        (directory / f.name).chmod(0o755)
    port = cs.free_tcp_port()
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
               **{CONFIG["enabled"]["env"]: "true", CONFIG["socket_dir"]["env"]: str(tmp_path)})
    proc = subprocess.Popen([str(directory / REFERENCE.name), "--threads", "2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert "socket=" in proc.stdout.readline(), "the reference did not start"
        (library,) = [f for f in directory.iterdir() if f.suffix == ".so"]
        forge_dynsym_section_header(library)
        report_path = tmp_path / "report.json"
        run = conform("--pid", str(proc.pid), "--otlp-port", str(port), "--only", "ELF,PROC", "--json",
                      str(report_path))
        report = json.loads(report_path.read_text())
        verdicts = {r["id"]: r for r in report["results"]}
        assert verdicts["PROC-01"]["verdict"] == "pass", verdicts["PROC-01"]
        assert verdicts["ELF-02"]["verdict"] == "pass", verdicts["ELF-02"]
        assert any("disagree with the dynamic segment" in n for n in report["notes"]), report["notes"]
        assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
        inspected = subprocess.run([str(cs.TRACECORR), "inspect", "--json", str(proc.pid)],
                                   capture_output=True, text=True, timeout=60)
        assert "disagree with the dynamic segment" in (json.loads(inspected.stdout)["elastic-v1"]["library"]["loader_view_note"] or ""), \
            inspected.stdout[-2000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def start_reference(tmp_path, port, **env):
    journal = tmp_path / "journal.jsonl"
    e = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}", TRACECORR_FIXTURE_JOURNAL=str(journal),
             **{CONFIG["enabled"]["env"]: "true", CONFIG["socket_dir"]["env"]: str(tmp_path)}, **env)
    proc = subprocess.Popen([str(REFERENCE), "--threads", "2"], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert "socket=" in proc.stdout.readline(), "the reference did not start"
    return proc, journal


def journal_events(journal, kind):
    out = []
    for line in journal.read_text().splitlines():
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if ev.get("event") == kind:
            out.append(ev)
    return out


def stop_reference(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def test_attach_mode_leaves_the_agent_with_the_users_registration(tmp_path):
    port = cs.free_tcp_port()
    proc, journal = start_reference(tmp_path, port)
    try:
        report_path = tmp_path / "report.json"
        run = conform("--pid", str(proc.pid), "--otlp-port", str(port), "--only", "MSG-07,HOST-01",
                      "--samples-delay-ms", "750", "--host-id", "tracecorr-user-host", "--json", str(report_path))
        registrations = [ev for ev in journal_events(journal, "message") if ev.get("kind") == "registration"]
    finally:
        stop_reference(proc)
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
    # The scenario's test values (a 2^32-1 ms delay among them) were applied, then the user's.
    assert any(r["samples_delay_ms"] == 0xFFFFFFFF for r in registrations)
    applied = [r for r in registrations if r.get("applied")]
    assert applied[-1]["samples_delay_ms"] == 750 and applied[-1]["host_id"] == "tracecorr-user-host", applied[-1]
    notes = json.loads(report_path.read_text())["notes"]
    assert any("left the agent registered with samples-delay-ms 750" in n for n in notes), notes


def test_observe_only_sends_nothing_and_skips_what_needs_messages(tmp_path):
    port = cs.free_tcp_port()
    proc, journal = start_reference(tmp_path, port)
    try:
        report_path = tmp_path / "report.json"
        run = conform("--pid", str(proc.pid), "--otlp-port", str(port), "--observe-only", "--json", str(report_path))
        messages = journal_events(journal, "message")
    finally:
        stop_reference(proc)
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
    assert messages == [], f"observe-only sent {len(messages)} datagrams"
    verdicts = {r["id"]: r for r in json.loads(report_path.read_text())["results"]}
    for rid in ("ELF-01", "PROC-01", "TLS-04", "SOCK-02"):
        assert verdicts[rid]["verdict"] == "pass", verdicts[rid]
    for rid in ("MSG-04", "ATTR-04", "HOST-01"):
        assert verdicts[rid]["verdict"] == "skip" and "--observe-only" in verdicts[rid]["reason"], verdicts[rid]


def test_attach_mode_with_the_sdks_5_s_batch_delay_says_how_to_start_the_agent_and_fails_no_deferral(tmp_path):
    port = cs.free_tcp_port()
    proc, _ = start_reference(tmp_path, port, OTEL_BSP_SCHEDULE_DELAY="5000")
    try:
        report_path = tmp_path / "report.json"
        run = conform("--pid", str(proc.pid), "--otlp-port", str(port), "--only", "DEFER", "--duration", "8",
                      "--json", str(report_path), quiet=False)
    finally:
        stop_reference(proc)
    report = json.loads(report_path.read_text())
    verdicts = {r["id"]: r for r in report["results"]}
    assert not [r for r in verdicts.values() if r["verdict"] == "fail"], run.stdout[-3000:]
    assert any("OTEL_BSP_SCHEDULE_DELAY" in n and "http/protobuf" in n for n in report["notes"]), report["notes"]
    assert "OTEL_BSP_SCHEDULE_DELAY" in run.stderr


def test_only_takes_areas_and_sends_only_what_they_need(tmp_path):
    journal = tmp_path / "journal.jsonl"
    report_path = tmp_path / "report.json"
    run = subprocess.run([str(cs.TRACECORR), "conform", "--quiet", "--only", "ELF,TLS", "--duration", "1", "--json",
                          str(report_path), "--", str(REFERENCE)], capture_output=True, text=True,
                         timeout=cs.RUN_TIMEOUT_S, env=dict(os.environ, TRACECORR_FIXTURE_JOURNAL=str(journal)))
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
    report = json.loads(report_path.read_text())
    judged = {r["id"] for r in report["results"]}
    agent_ids = {r["id"] for r in cs.REGISTRY["requirements"] if r["role"] == "agent" and r["area"] in ("ELF", "TLS")}
    assert judged == agent_ids
    assert set(k.split(".")[1] for k in report["counters"] if k.startswith("messages_sent.")) == {"enabled"}
    assert report["counters"]["messages_sent.enabled"] == 0
    assert journal_events(journal, "message") == [], "ELF and TLS are judged by watching: nothing to send"


@pytest.mark.parametrize("only,sessions", [
    ("DEFER-04", ["disabled"]),  # judged in the launch with the feature off only
    ("DEFER-06", ["small-queue"]),
    ("CONF-03", ["auto", "own-host-id"]),  # the default, knowing whether auto is supported
    ("MSG-03", ["enabled"]),
])
def test_only_launches_the_sessions_its_requirement_reads(tmp_path, only, sessions):
    """A kill matrix's `--only ID` run launches no target the rule's judge
    does not read: the progress lines name exactly those sessions."""
    run = subprocess.run([str(cs.TRACECORR), "conform", "--only", only, "--", str(REFERENCE)], capture_output=True,
                         text=True, timeout=cs.RUN_TIMEOUT_S)
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:] + run.stderr[-3000:]
    launched = sorted(re.findall(r"session (\S+): launching", run.stderr))
    assert launched == sorted(sessions), run.stderr


def test_only_a_correlation_requirement_sends_no_message_battery(tmp_path):
    journal = tmp_path / "journal.jsonl"
    run = subprocess.run([str(cs.TRACECORR), "conform", "--quiet", "--only", "ATTR-04", "--", str(REFERENCE)],
                         capture_output=True, text=True, timeout=cs.RUN_TIMEOUT_S,
                         env=dict(os.environ, TRACECORR_FIXTURE_JOURNAL=str(journal)))
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
    messages = journal_events(journal, "message")
    assert any(m["kind"] == "correlation" for m in messages)
    assert not [m for m in messages if m["kind"] in ("discarded", "unknown")], "the MSG-04..07 battery was sent"
    assert not [m for m in messages if m["kind"] == "registration" and m["samples_delay_ms"] == 0xFFFFFFFF]


def test_every_report_shows_the_agent_sockets_capacity(tmp_path):
    """A 100 ms poller absorbs about (max_dgram_qlen + 1) datagrams per poll:
    far fewer than a profiler at 1 kHz per CPU sends one per sample."""
    report_path = tmp_path / "report.json"
    run = conform("--only", "ATTR-04", "--json", str(report_path), "--", str(REFERENCE), "--socket-poll-ms", "100")
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
    report = json.loads(report_path.read_text())
    (note,) = [n for n in report["notes"] if n.startswith("agent socket capacity")]
    assert "1000 Hz per CPU" in note and "would lose" in note, note
    assert "agent socket capacity" in run.stdout
    counters = report["counters"]
    qlen = int(Path("/proc/sys/net/unix/max_dgram_qlen").read_text())
    assert 1 <= counters["socket_capacity.burst"] <= 2 * (qlen + 1), counters  # what the queue had room for
    assert counters["socket_capacity.per_second"] <= 3 * (qlen + 1) * 10, counters  # 10 polls a second, bounded
    # A run that sends nothing says so instead.
    run = conform("--only", "ELF-01", "--json", str(report_path), "--", str(REFERENCE))
    notes = json.loads(report_path.read_text())["notes"]
    assert "agent socket capacity: not measured (this run sent the agent nothing)" in notes, notes


# ---- exit codes --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("only", ["NOPE-99", " ", "ELF-01,MSG-99"])
def test_a_filter_naming_no_requirement_is_a_usage_error(only):
    run = conform("--only", only, "--", str(REFERENCE), timeout=30)
    assert run.returncode == cs.EXIT_USAGE, run.stderr
    assert "unknown requirement id" in run.stderr


def test_an_agent_that_cannot_start_is_an_environment_error():
    run = conform("--only", "ELF-01", "--", "/nonexistent/agent", timeout=60)
    assert run.returncode == cs.EXIT_ENVIRONMENT, run.stdout
    assert "cannot execute" in run.stdout


# ---- the expectations file ---------------------------------------------------------------------------------

def write_expectations(path: Path, entries: list[tuple[str, str]]) -> None:
    path.write_text(json.dumps({"version": 1, "expected_failures": [{"id": i, "reason": r} for i, r in entries]}))


def test_expectations_life_cycle(tmp_path):
    expect = tmp_path / "expectations.json"
    # A failure nobody expected fails the gate.
    assert conform("--only", "ATTR-03", "--", str(PADDED)).returncode == cs.EXIT_FAILURE
    # --update-expectations records it...
    run = conform("--only", "ATTR-03", "--expect", str(expect), "--update-expectations", "--", str(PADDED))
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
    assert [e["id"] for e in json.loads(expect.read_text())["expected_failures"]] == ["ATTR-03"]
    # ...after which the same failure is expected and the gate passes.
    report = tmp_path / "expected.json"
    run = conform("--only", "ATTR-03", "--expect", str(expect), "--json", str(report), "--", str(PADDED))
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
    result = json.loads(report.read_text())["results"][0]
    assert result["verdict"] == "fail" and result["expectation"]["status"] == "xfail" and not result["gate_failure"], result
    # Once fixed (the reference), the entry is stale: that fails the gate so the file is cleaned up.
    run = conform("--only", "ATTR-03", "--expect", str(expect), "--", str(REFERENCE))
    assert run.returncode == cs.EXIT_FAILURE, run.stdout[-3000:]
    assert "ATTR-03" in run.stdout


def test_an_expectation_naming_an_unknown_requirement_is_a_usage_error(tmp_path):
    expect = tmp_path / "expectations.json"
    write_expectations(expect, [("ATTR-99", "no such requirement")])
    run = conform("--only", "ELF-01", "--expect", str(expect), "--", str(REFERENCE), timeout=60)
    assert run.returncode == cs.EXIT_USAGE, run.stdout + run.stderr
    assert "ATTR-99" in run.stdout + run.stderr


# ---- tracecorr list ------------------------------------------------------------------------------------------

def test_list_names_the_probe_of_every_requirement_of_both_sides():
    out = subprocess.run([str(cs.TRACECORR), "list", "--json"], capture_output=True, text=True, check=True).stdout
    for registry in json.loads(out):
        if "nodejs" in registry["protocol"]:
            continue  # issue 30: its writer and reader probes are still to come
        for r in registry["requirements"]:
            assert r["probe"] and (cs.REPO / r["probe"]).is_file(), r
            # A reader's duties are judged in profiler mode (conform --profiler), by the package's reader probes.
            assert ("/reader/" in r["probe"]) == (r["role"] in ("profiler", "reader")), r
    out = subprocess.run([str(cs.TRACECORR), "list", "--json", "--protocol", "elastic-v1"], capture_output=True, text=True,
                         check=True).stdout
    listed = json.loads(out)
    # The launches `--only ID` runs: those its judge reads, a subset of the suite's sessions.
    sessions = {r["id"]: r["sessions"] for r in listed["requirements"]}
    assert sessions["DEFER-04"] == ["disabled"] and sessions["MSG-02"] == ["enabled", "small-queue"]
    # DEFER-05's unsampled half compares two frozen queues that differ only in the sampler.
    assert sessions["DEFER-05"] == ["enabled", "disabled", "unsampled", "all-sampled"]
    assert all(sessions[r["id"]] for r in listed["requirements"] if r["role"] == "agent")
    assert all(sessions[r["id"]] == [] for r in listed["requirements"] if r["role"] != "agent")
    # Otherwise the registry itself, unchanged.
    for r in listed["requirements"]:
        del r["probe"], r["sessions"]
    assert listed == cs.REGISTRY
    text = subprocess.run([str(cs.TRACECORR), "list", "--protocol", "elastic-v1"], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    assert text[0].split()[:4] == ["ID", "LEVEL", "ROLE", "PROBE"]
    rows = {line.split()[0]: line.split() for line in text[1:]}
    assert set(rows) == {r["id"] for r in cs.REGISTRY["requirements"]}
    assert rows["MSG-04"][3] == "msg" and rows["ATTR-01"][3] == "attr"
