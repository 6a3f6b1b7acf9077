"""Attach mode to an agent in a container (issue 29): its own mount, PID and
network namespaces, made with `unshare` and `chroot`, no container runtime.

The container's root is a tmpfs holding only what the agent needs: /usr and
/etc bound read-only (Debian's merged /usr: lib, lib64, bin are links into it),
the build tree at its own path (the fixture and its libraries), a /tmp of its
own and its own /proc. Its loopback is its own: the agent exports to
127.0.0.1:PORT of that namespace, where the host's 127.0.0.1 is not.

tracecorr attaches from the host: it reads the agent's library and socket
through /proc/PID/root, and receives its spans inside the agent's network
namespace (a listening socket made there by a thread that entered it). Before
(issue 29): 0 spans, 29 skips, exit 0, and a note telling the user to set the
endpoint the agent already had. For each protocol, the reference passes what
attach mode judges, its spans arrive, and the report names the namespace.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

import conform_support as cs
from build_products import HOST_ARCH, package_fixture_program

ARCH = "x86_64"
ELASTIC = cs.fixture_program(ARCH)
CONFIG = cs.REGISTRY["config"]

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(HOST_ARCH != "x86_64", reason="runs the x86-64 fixtures natively"),
              pytest.mark.skipif(not (cs.TRACECORR.exists() and ELASTIC.exists()),
                                 reason=cs.missing_reason(f"tracecorr or the {ARCH} fixtures under {cs.BUILD}"))]


class Container:
    """`argv` in new mount, PID and network namespaces, chrooted into a
    minimal root (see the module's docstring), with exactly `env`."""

    def __init__(self, root: Path, argv: list[str], env: dict[str, str]):
        root.mkdir()
        build = cs.BUILD.resolve()
        links = " ".join(f"ln -s usr/{d} {root}/{d};" for d in ("lib", "lib64", "bin", "sbin")
                         if Path(f"/{d}").is_symlink())
        script = f"""set -e
ip link set lo up
mount --make-rprivate /
mount -t tmpfs -o mode=755 container-root {root}
for d in usr etc; do mkdir -p {root}/$d; mount --rbind -o ro /$d {root}/$d; done
{links}
mkdir -p {root}{build} {root}/tmp {root}/proc
mount --rbind -o ro {build} {root}{build}
mount -t proc proc {root}/proc
exec chroot {root} /usr/bin/env -i {" ".join(shlex.quote(f"{k}={v}") for k, v in env.items())} {shlex.join(argv)}
"""
        self.proc = subprocess.Popen(["unshare", "--net", "--mount", "--pid", "--fork", "/bin/sh", "-c", script],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)

    def agent_pid(self, timeout: float = 10) -> int:
        """The host PID of the agent: unshare's one child (PID 1 inside)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for task in Path(f"/proc/{self.proc.pid}/task").glob("*/children"):
                children = task.read_text().split()
                if children:
                    return int(children[0])
            time.sleep(0.02)
        raise AssertionError(f"no process in the container: {self.proc.stderr.read() if self.proc.poll() else ''}")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def wait_for(predicate, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def attach(pid: int, port: int, protocol: str, report: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """conform --pid, attached again (the container runs on) while a busy machine leaves the only
    non-passes inconclusive, as run_conform retries a launch (cs.INCONCLUSIVE_RETRIES)."""
    for attempt in range(cs.INCONCLUSIVE_RETRIES + 1):
        report.unlink(missing_ok=True)
        run = subprocess.run([str(cs.TRACECORR), "conform", "--quiet", "--protocol", protocol, "--pid", str(pid),
                              "--otlp-port", str(port), "--json", str(report)], capture_output=True, text=True,
                             timeout=cs.RUN_TIMEOUT_S)
        assert report.exists(), run.stdout[-3000:] + run.stderr[-3000:]
        document = json.loads(report.read_text())
        if not cs.inconclusive_results(document):
            break
    return run, document


def network_namespace(pid: int) -> str:
    """Read while the container runs: once it is stopped, /proc/PID/ns is gone (a zombie has none)."""
    netns = os.readlink(f"/proc/{pid}/ns/net")
    assert netns != os.readlink("/proc/self/ns/net"), "the container shares the host's network namespace"
    return netns


def assert_received_in_its_namespace(document: dict, pid: int, netns: str) -> None:
    assert any(f"pid {pid} has a network namespace of its own ({netns})" in n for n in document["notes"]), document["notes"]
    received = sum(v for k, v in document["counters"].items() if k.startswith("spans_received."))
    assert received > 0, document["counters"]


def failures(document: dict) -> list[str]:
    return [f"{r['id']} {r['verdict']}: {r['reason']}" for r in document["results"] if r["verdict"] in ("fail", "error")]


def test_elastic_reference_in_a_container(tmp_path):
    port = cs.free_tcp_port()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_BSP_SCHEDULE_DELAY": "50",
           CONFIG["enabled"]["env"]: "true", CONFIG["socket_dir"]["env"]: "/tmp"}
    box = Container(tmp_path / "root", [str(ELASTIC.resolve()), "--threads", "2"], env)
    try:
        pid = box.agent_pid()
        netns = network_namespace(pid)
        assert "socket=" in box.proc.stdout.readline(), box.proc.stderr.read()
        # inspect reads the library and the socket through /proc/PID/root too.
        inspected = json.loads(subprocess.run([str(cs.TRACECORR), "inspect", "--json", str(pid)], capture_output=True,
                                              text=True, timeout=60, check=True).stdout)["elastic-v1"]
        assert inspected["socket"]["bound_by_target"] and inspected["socket"]["reachable"], inspected["socket"]
        assert [t for t in inspected["threads"] if t.get("record")], inspected["threads"]
        run, document = attach(pid, port, "elastic-v1", tmp_path / "report.json")
    finally:
        box.stop()
    verdicts = {r["id"]: r for r in document["results"]}
    # Read through /proc/PID/root and the container's own network: library, storage, records, socket, messages, spans.
    for rid in ("ELF-04", "PROC-01", "TLS-04", "SOCK-02", "MSG-04", "ATTR-04", "DEFER-01", "HOST-01"):
        assert verdicts[rid]["verdict"] == "pass", f"{rid} {verdicts[rid]['verdict']}: {verdicts[rid]['reason']}"
    assert not failures(document), failures(document)
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
    assert_received_in_its_namespace(document, pid, netns)


def test_otep_4719_writer_in_a_container(tmp_path):
    program = package_fixture_program("otel_process_context", "otel-ctx-writer", ARCH)
    args = json.loads((program.parent.parent / "mutants" / "mutants.json").read_text())["reference_args"]
    port = cs.free_tcp_port()
    box = Container(tmp_path / "root", [str(program.resolve()), *args], {"PATH": "/usr/bin"})
    try:
        pid = box.agent_pid()
        netns = network_namespace(pid)
        wait_for(lambda: "OTEL_CTX" in Path(f"/proc/{pid}/maps").read_text(), "the process context mapping")
        run, document = attach(pid, port, "otel-process-context", tmp_path / "report.json")
    finally:
        box.stop()
    judged = [r for r in document["results"] if r["verdict"] == "pass"]
    assert len(judged) >= 5, document["results"]
    assert not failures(document), failures(document)
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
    # It exports no spans: only the namespace is named.
    assert any(f"pid {pid} has a network namespace of its own ({netns})" in n for n in document["notes"]), document["notes"]


def test_otep_4947_writer_in_a_container(tmp_path):
    program = package_fixture_program("otel_thread_context", "otel-tctx-writer", ARCH).parent / "tlsdesc" / "otel-tctx-writer"
    args = json.loads((program.parent.parent.parent / "mutants" / "mutants.json").read_text())["reference_args"]
    port = cs.free_tcp_port()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    box = Container(tmp_path / "root", [str(program.resolve()), *args, "--duration", "60"], env)
    try:
        pid = box.agent_pid()
        netns = network_namespace(pid)
        wait_for(lambda: "OTEL_CTX" in Path(f"/proc/{pid}/maps").read_text(), "the process context mapping")
        run, document = attach(pid, port, "otel-thread-context", tmp_path / "report.json")
    finally:
        box.stop()
    verdicts = {r["id"]: r for r in document["results"]}
    # TCTX-14 and 27 are judged against the spans the writer exported: received in its namespace.
    for rid in ("TCTX-01", "TCTX-14"):
        assert verdicts[rid]["verdict"] == "pass", verdicts[rid]
    assert not failures(document), failures(document)
    assert run.returncode == cs.EXIT_OK, run.stdout[-3000:]
    assert_received_in_its_namespace(document, pid, netns)
