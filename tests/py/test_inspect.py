"""`tracecorr inspect` against the reference fixture: what it reports must be
what the fixture journaled it published (storage fields, every thread's ids).

The x86-64 fixture is read with ptrace; the arm64 one runs under
`qemu-aarch64 -g PORT` and its thread pointers come from qemu's gdbstub.

Build outputs are found under $TRACECORR_BUILD (default: build/ in this repository):
<build>/fixtures/<arch>/reference/tracecorr-fixture and <build>/bin/tracecorr.
$TRACECORR_CLI overrides the tracecorr binary.
"""
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from build_products import BUILD, need
import build_products

CLI = Path(os.environ.get("TRACECORR_CLI", BUILD / "bin" / "tracecorr"))
QEMU = shutil.which("qemu-aarch64")
AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"
# Bound for waiting on the fixture's journal; a missed event fails, it does not pass slowly.
WAIT_S = 30.0


def cli():
    return str(need(CLI))


def fixture_program(arch):
    return need(build_products.fixture_program(arch))


def read_journal(path):
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line being written
    return events


def wait_for_ready(journal, proc):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        events = read_journal(journal)
        if any(e["event"] == "ready" for e in events):
            return events
        if proc.poll() is not None:
            pytest.fail(f"fixture exited with {proc.returncode} before it was ready")
        time.sleep(0.05)
    pytest.fail(f"fixture not ready within {WAIT_S} s; journal: {journal.read_text() if journal.exists() else '(none)'}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def addr(value):
    return int(value, 0) if isinstance(value, str) else int(value)


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_against_journal(report, events):
    """The inspection matches what the fixture says it published."""
    library = next(e for e in events if e["event"] == "library")
    storage = next(e for e in events if e["event"] == "storage")
    socket_event = next(e for e in events if e["event"] == "socket")
    assert report["library"]["path"] == library["path"]
    assert report["library"]["name_matches"] is True
    assert report["tls"]["dialect"] == "descriptor"
    assert report["tls"]["model"] == "static-offset", report["tls"]["explanation"]

    st = report["storage"]
    assert st["published"] is True
    assert addr(st["pointer"]) == addr(storage["address"])
    for name in ("minor", "service_name", "service_environment", "socket_file_path"):
        assert st[name] == storage[name], name

    so = report["socket"]
    assert so["path"] == socket_event["path"]
    assert so["is_socket"] and so["datagram"] and so["bound_by_target"] and so["reachable"]
    assert so["target_fd"] == socket_event["fd"]

    # The last record each thread journaled is what it holds now (--hold).
    last_record = {}
    for e in events:
        if e["event"] == "record":
            last_record[e["tid"]] = e
    published = {e["tid"]: e for e in events if e["event"] == "thread"}
    assert published, "the fixture journaled no threads"
    threads = {t["tid"]: t for t in report["threads"]}
    for tid, thread_event in published.items():
        assert tid in threads, f"thread {tid} missing from {sorted(threads)}"
        t = threads[tid]
        assert t["error"] is None, t["error"]
        assert addr(t["record_pointer"]) == addr(thread_event["record_address"])
        expected = last_record[tid]
        got = t["record"]
        for name in ("minor", "valid", "trace_present", "trace_flags", "trace_id", "span_id", "transaction_id"):
            assert got[name] == expected[name], (tid, name)
    # Distinct records, distinct thread pointers.
    pointers = [addr(t["record_pointer"]) for t in report["threads"] if t["record_pointer"] and addr(t["record_pointer"])]
    assert len(pointers) == len(set(pointers))
    assert report["findings"] == [], report["findings"]


def test_inspect_x86_64_reference_matches_its_journal(tmp_path):
    program = fixture_program("x86_64")
    journal = tmp_path / "journal.jsonl"
    env = dict(os.environ, TRACECORR_FIXTURE_JOURNAL=str(journal))
    proc = subprocess.Popen([str(program), "--hold", "--threads", "3"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        events = wait_for_ready(journal, proc)
        out = subprocess.run([cli(), "inspect", str(proc.pid), "--json"], capture_output=True, text=True,
                             timeout=WAIT_S)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)["elastic-v1"]
        assert report["thread_pointer_source"] == "ptrace"
        check_against_journal(report, events)
        # Every thread was resumed: the fixture still runs and answers signals.
        assert proc.poll() is None
        human = subprocess.run([cli(), "inspect", str(proc.pid)], capture_output=True, text=True, timeout=WAIT_S)
        assert human.returncode == 0, human.stderr
        assert "static-offset" in human.stdout and "findings\n  none" in human.stdout
    finally:
        stop(proc)


def test_inspect_arm64_reference_under_qemu_gdbstub(tmp_path):
    if QEMU is None:
        pytest.skip("qemu-aarch64 not installed")
    program = fixture_program("arm64")
    journal = tmp_path / "journal.jsonl"
    port = free_port()
    env = dict(os.environ, TRACECORR_FIXTURE_JOURNAL=str(journal))
    qemu = subprocess.Popen([QEMU, "-L", AARCH64_SYSROOT, "-g", str(port), str(program), "--hold", "--threads", "3"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    inspect = None
    try:
        # qemu serves one debugger connection and holds the guest until it
        # arrives, so inspect is that debugger: it lets the guest run and reads
        # once told (a line on stdin) that the fixture is ready.
        deadline = time.monotonic() + WAIT_S
        while not _listening(port):
            if qemu.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"qemu's gdbstub never listened on {port}: {qemu.stderr.read().decode() if qemu.poll() is not None else ''}")
            time.sleep(0.05)
        inspect = subprocess.Popen([cli(), "inspect", str(qemu.pid), "--json", "--gdbstub", f"127.0.0.1:{port}",
                                    "--resume-until-enter"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        events = wait_for_ready(journal, qemu)
        out, err = inspect.communicate("\n", timeout=WAIT_S)
        assert inspect.returncode == 0, err
        report = json.loads(out)["elastic-v1"]
        assert report["thread_pointer_source"] == f"gdbstub 127.0.0.1:{port}"
        assert report["library"]["machine"] == "aarch64"
        check_against_journal(report, events)
        # The guest runs on after the inspection (detached, nothing delivered).
        assert qemu.poll() is None
        assert not any(e["event"] == "exit" for e in read_journal(journal))
    finally:
        if inspect is not None and inspect.poll() is None:
            inspect.kill()
            inspect.wait()
        stop(qemu)


def test_inspect_of_a_process_without_the_library_exits_1():
    proc = subprocess.Popen(["sleep", "600"])
    try:
        out = subprocess.run([cli(), "inspect", str(proc.pid)], capture_output=True, text=True, timeout=WAIT_S)
        assert out.returncode == 1, out.stderr
        assert "publishes nothing of any protocol" in out.stderr
        assert "elastic-jvmti-linux" in out.stderr and "OTEL_CTX" in out.stderr  # names what it looked for
        j = subprocess.run([cli(), "inspect", str(proc.pid), "--json"], capture_output=True, text=True, timeout=WAIT_S)
        assert j.returncode == 1
        document = json.loads(j.stdout)
        assert document["elastic-v1"]["library"] is None
        assert document["otel-process-context"]["mappings"] == []
    finally:
        proc.kill()
        proc.wait()


def test_inspect_of_a_nonexistent_pid_exits_3():
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    out = subprocess.run([cli(), "inspect", str(pid_max + 1)], capture_output=True, text=True, timeout=WAIT_S)
    assert out.returncode == 3, out.stderr
    assert "gone" in out.stderr


def test_inspect_of_an_exited_process_exits_3():
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: the pid names nothing now
    out = subprocess.run([cli(), "inspect", str(proc.pid)], capture_output=True, text=True, timeout=WAIT_S)
    assert out.returncode == 3, out.stderr


def _listening(port):
    """Is something listening on 127.0.0.1:port? Reads /proc/net/tcp, so the
    check does not take qemu's single gdbstub connection."""
    want = f"0100007F:{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 3 and cols[3] == "0A" and (cols[1] == want or cols[1].endswith(f":{port:04X}")):
                return True
    return False
