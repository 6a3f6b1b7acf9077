"""The process context (OTEP 4719) in `tracecorr inspect`, `Target.inspect()`, `tracecorr list`
and `tracecorr conform`, against a live writer: the reader tests' writer
(tests/unit/data/process_context_writer.c), driven line by line on its stdin."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from build_products import BUILD, REPO, TRACECORR, need

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr

WRITER = BUILD / "testdata" / "process_context_writer"
REGISTRY = json.loads((REPO / "spec" / "otel-process-context.json").read_text())
WAIT_S = 30


class Writer:
    """The test writer as a child process; commands go to its stdin, answers come back on its stdout."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([str(need(WRITER)), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def command(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


def inspect_cli(pid: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(need(TRACECORR)), "inspect", str(pid), *extra], capture_output=True, text=True,
                          timeout=WAIT_S)


def attributes(section: list) -> dict:
    return {a["key"]: (a["type"], a["value"]) for a in section}


def test_inspect_shows_a_live_writers_context_next_to_elastic():
    with Writer() as writer:
        answer = writer.command("publish checkout")
        assert answer.startswith("published 0x"), answer
        address = answer.split()[1]
        out = inspect_cli(writer.pid, "--json")
        assert out.returncode == 0, out.stderr
        document = json.loads(out.stdout)
        assert document["elastic-v1"]["library"] is None  # no Elastic agent in this process
        context = document["otel-process-context"]
        assert context["pid"] == writer.pid
        assert len(context["mappings"]) == 1
        mapping = context["mappings"][0]
        assert int(mapping["address"], 16) == int(address, 16)
        assert mapping["name"].startswith("/memfd:OTEL_CTX") or mapping["name"].startswith("[anon_shmem:OTEL_CTX]")
        assert mapping["perms"] == "rw-p" and mapping["dont_fork"] is True
        header = mapping["header"]
        assert header["signature"] == "OTEL_CTX" and header["version"] == 2
        assert header["monotonic_published_at_ns"] > 0 and header["age_ns"] >= 0
        assert mapping["read"] == {"consistent": True, "retry_count": 0, "retries": [], "stage": None, "error": None}
        payload = mapping["payload"]
        assert attributes(payload["resource"]) == {"service.name": ("string", "checkout"),
                                                   "process.pid": ("string", str(writer.pid))}
        assert attributes(payload["attributes"]) == {"threadlocal.schema_version": ("string", "tls_v1")}
        assert payload["threadlocal_keys"] == {"resource": [], "attributes": ["threadlocal.schema_version"]}
        assert context["findings"] == []

        human = inspect_cli(writer.pid)
        assert human.returncode == 0, human.stderr
        for part in ("OTEL_CTX", "version 2", "consistent after 0 retries", "service.name", '"checkout"',
                     "threadlocal.schema_version", "findings\n  none"):
            assert part in human.stdout, (part, human.stdout)


def test_target_inspect_follows_an_update():
    with Writer() as writer:
        assert writer.command("publish before").startswith("published")
        target = tracecorr.Target.attach(writer.pid, protocol="otel-process-context")
        try:
            first = target.process_context()
            [again] = target.inspect()["mappings"]  # a Target of this protocol inspects just it
            assert again["payload"] == first["mappings"][0]["payload"]
            [mapping] = first["mappings"]
            assert attributes(mapping["payload"]["resource"])["service.name"] == ("string", "before")
            assert writer.command("update after").startswith("updated")
            [updated] = target.process_context()["mappings"]
            assert attributes(updated["payload"]["resource"])["service.name"] == ("string", "after")
            # The OTEP's update: a new timestamp, later than the one it replaced.
            assert updated["header"]["monotonic_published_at_ns"] > mapping["header"]["monotonic_published_at_ns"]
        finally:
            target.close()
        assert writer.proc.poll() is None  # attached targets are left alone


def test_inspect_names_the_rule_a_writer_breaks():
    with Writer("--no-dontfork") as writer:
        assert writer.command("publish checkout").startswith("published")
        out = inspect_cli(writer.pid, "--json")
        assert out.returncode == 0, out.stderr  # findings do not change the exit status
        findings = json.loads(out.stdout)["otel-process-context"]["findings"]
        assert [(f["requirement"], f["level"]) for f in findings] == [("PCTX-11", "SHOULD")], findings
        assert "MADV_DONTFORK" in findings[0]["message"]
        human = inspect_cli(writer.pid)
        assert "PCTX-11  SHOULD" in human.stdout, human.stdout


def test_a_timestamp_being_written_is_reported_not_waited_for():
    with Writer() as writer:
        assert writer.command("publish checkout").startswith("published")
        assert writer.command("zero") == "zeroed"
        out = inspect_cli(writer.pid, "--json")
        assert out.returncode == 0, out.stderr
        [mapping] = json.loads(out.stdout)["otel-process-context"]["mappings"]
        read = mapping["read"]
        assert read["consistent"] is False and read["stage"] == "retries"
        assert read["retry_count"] == 16 and {r["reason"] for r in read["retries"]} == {"timestamp-zero"}
        assert "was 0 in all 17 reads" in read["error"]
        assert mapping["payload"] is None


def test_list_shows_the_registry_and_the_probe_of_each_writer_rule():
    out = subprocess.run([str(need(TRACECORR)), "list", "--json", "--protocol", "otel-process-context"],
                         capture_output=True, text=True, check=True, timeout=WAIT_S).stdout
    listed = json.loads(out)
    probes = {r["id"]: r.pop("probe") for r in listed["requirements"]}
    launches = {r["id"]: r.pop("sessions") for r in listed["requirements"]}
    assert launches["PCTX-13"] == ["watched"] and launches["PCTX-10"] == ["watched", "read"]
    # Every rule has its probe: a writer rule's in probes/otel_process_context/, a reader rule's in its reader/
    # folder (profiler mode, tests/py/test_conform_profiler.py).
    assert all(probes.values()), probes
    assert {i for i, p in probes.items() if "/reader/" in p} == {r["id"] for r in REGISTRY["requirements"]
                                                                 if r["role"] == "reader"}
    assert listed == REGISTRY
    text = subprocess.run([str(TRACECORR), "list", "--protocol", "otel-process-context"], capture_output=True,
                          text=True, check=True, timeout=WAIT_S).stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in text[1:]}
    assert set(rows) == {r["id"] for r in REGISTRY["requirements"]}
    assert rows["PCTX-11"][1:3] == ["SHOULD", "writer"] and rows["PCTXR-03"][1:3] == ["MUST", "reader"]
    # Every protocol at once: a title line each, and every compiled-in registry.
    everything = subprocess.run([str(TRACECORR), "list", "--json"], capture_output=True, text=True, check=True,
                                timeout=WAIT_S).stdout
    compiled_in = {json.loads((REPO / "spec" / f"{p.id}.json").read_text())["protocol"] for p in tracecorr.protocols()}
    assert {"elastic-profiling-correlation", "opentelemetry-process-context"} <= compiled_in
    assert {r["protocol"] for r in json.loads(everything)} == compiled_in

    # A command that publishes no process context: nothing to judge, nothing passes without evidence,
    # and the gate says so (exit 3: no pass on nothing, issue 25).
    run = subprocess.run([str(TRACECORR), "conform", "--protocol", "otel-process-context", "--only", "PCTX-01", "--",
                          "sleep", "30"], capture_output=True, text=True, timeout=WAIT_S * 6)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "published nothing" in run.stdout and "no mapping named" in run.stdout
    assert "not judged: nothing was judged" in run.stdout
