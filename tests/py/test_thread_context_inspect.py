"""The OTel thread context (OTEP 4947) in `tracecorr inspect`, against the reference writer
(fixtures/otel_thread_context) in the TLS access models a profiler meets, and its mutants.

What each thread published comes from the writer's journal (`record` events under --hold: the ids, flags
and attributes as the driver meant them), so the test checks tracecorr's reading against the writer's own
word, not against tracecorr's decoder."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from build_products import HOST_ARCH, REPO, TRACECORR, need, package_fixture_program
from fixture_process import WAIT_S, FixtureProcess

PACKAGE = "otel_thread_context"
PROGRAM = "otel-tctx-writer"
PROTOCOL = "otel-thread-context"
REGISTRY = json.loads((REPO / "spec" / "otel-thread-context.json").read_text())
SYMBOL = REGISTRY["tls_variable"]["symbol"]
VALUE_MAX = REGISTRY["layouts"]["attribute_entry"]["fields"][2]["max_length"]
HOLD = ["--threads", "2", "--hold", "--append"]
FIRST_LINE = re.compile(r"otel-tctx-writer pid=(\d+) model=([a-z0-9-]+) .*")
MUTANTS = {m["name"]: m for m in json.loads((REPO / "fixtures" / PACKAGE / "mutants" / "mutants.json").read_text())["mutants"]}

pytestmark = pytest.mark.skipif(HOST_ARCH != "x86_64", reason="runs the x86-64 writers natively")

# model -> (how its threads' variable is reached, the access model tracecorr reads it by, its C library's
# programs' extra environment). glibc's dlopen model is forced out of static TLS: the DTV walk.
MODELS = {
    "tlsdesc": ("static-offset", "tlsdesc-static", {}),
    "tlsdesc-dlopen": ("dtv", "tlsdesc-dynamic", {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=0"}),
    "general-dynamic": ("dtv", "general-dynamic", {}),
    "lib-initial-exec": ("static-offset", "initial-exec", {}),
    "exe-initial-exec": ("static-offset", "local-exec", {}),
    "exe-local-exec": ("static-offset", "local-exec", {}),
    "static-pie": ("static-offset", "local-exec", {}),
    "musl-tlsdesc": ("static-offset", "tlsdesc-static", {}),
    "musl-dlopen": ("dtv", "tlsdesc-dynamic", {}),
    "rust-cdylib": ("static-offset", "tlsdesc-static", {}),
}


class HeldWriter(FixtureProcess):
    """The writer with every worker holding its first span's record (--hold)."""

    def __init__(self, program, journal, args, env=None):
        super().__init__([str(program), *args], journal, dict(os.environ, **(env or {})))
        line = self.read_line()
        m = FIRST_LINE.fullmatch(line)
        assert m, f"unexpected first stdout line {line!r}"
        self.pid = int(m.group(1))
        self.wait_journal("ready", 1)

    def published(self) -> dict:
        """tid -> the journal's `record` event: what the thread's span meant."""
        return {r["tid"]: r for r in self.journal("record")}


@pytest.fixture
def writer(tmp_path):
    started = []

    def start(program, args=HOLD, env=None):
        w = HeldWriter(program, tmp_path / f"journal-{len(started)}.jsonl", args, env)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


def inspect_cli(pid: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(need(TRACECORR)), "inspect", str(pid), *extra], capture_output=True, text=True,
                          timeout=WAIT_S)


def thread_context(pid: int) -> dict:
    out = inspect_cli(pid, "--json")
    document = json.loads(out.stdout)
    return document[PROTOCOL]


def model_program(model: str):
    return need(package_fixture_program(PACKAGE, PROGRAM, HOST_ARCH).parent / model / PROGRAM)


def shortened(value: str) -> str:
    """A value as the writer stores it: cut to 255 bytes at a character boundary."""
    data = value.encode()[:VALUE_MAX]
    return data.decode("utf-8", errors="ignore")


def requirements(document: dict) -> dict:
    return {f["requirement"]: f["level"] for f in document["findings"]}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_inspect_reads_every_threads_record_in_each_model(model, writer):
    reached_by, access_model, env = MODELS[model]
    w = writer(model_program(model), env=env)
    published = w.published()
    assert len(published) == 2
    document = thread_context(w.pid)

    variable = document["variable"]
    assert variable["symbol"]["name"] == SYMBOL and variable["symbol"]["type"] == "TLS"
    assert variable["executable"] == model.startswith(("exe-", "static-pie"))
    access = document["access"]
    assert (access["reached_by"], access["model"]) == (reached_by, access_model), access
    if reached_by == "dtv":
        assert access["module_id"] >= 1
    else:
        assert isinstance(access["tp_offset"], int)
    context = document["process_context"]
    assert context["schema_version"] == "tlsdesc_v1_dev" and context["known_schema"]
    assert context["key_map"][:4] == ["http.route", "http.method", "tracecorr.note", "http.status_code"]

    by_tid = {t["tid"]: t for t in document["threads"]}
    journaled_threads = {t["tid"]: t for t in w.journal("thread")}
    for tid, meant in published.items():
        thread = by_tid[tid]
        assert thread["error"] is None, thread
        assert int(thread["variable_address"], 16) == int(journaled_threads[tid]["variable"], 16)
        assert int(thread["record_pointer"], 16) == int(meant["record"], 16)
        record = thread["record"]
        assert (record["trace_id"], record["span_id"], record["trace_flags"], record["valid"]) == \
            (meant["trace_id"], meant["span_id"], meant["trace_flags"], 1)
        assert record["attrs_data_size"] == meant["attrs_data_size"] and record["entries_end"] == "complete"
        assert {a["key"]: a["value"] for a in record["attributes"]} == \
            {key: shortened(value) for key, value in meant["attributes"]}
    # The other threads (the main one) carry no context.
    for tid, thread in by_tid.items():
        if tid not in published:
            assert thread["record"] is None and thread["record_pointer"] in ("0x0", None), thread

    # The reference writer breaks nothing; the legacy models are allowed with a warning.
    expected = {"TCTX-05": "SHOULD"} if model in ("general-dynamic", "lib-initial-exec") else {}
    assert requirements(document) == expected, document["findings"]


def test_inspect_for_people_shows_the_variable_its_model_and_the_records(writer):
    w = writer(model_program("tlsdesc"))
    out = inspect_cli(w.pid)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"variable         {SYMBOL}" in text
    assert "tlsdesc-static (static-offset, glibc)" in text
    for meant in w.published().values():
        assert f"trace {meant['trace_id']} span {meant['span_id']}" in text
    assert 'http.route = "/work/0"' in text and 'http.status_code = "200"' in text
    assert "findings\n  none" in text


def test_a_process_without_the_protocol_is_not_found_by_it(writer):
    # Elastic's fixture programs are no thread-context writers; nor is this Python process.
    document = thread_context(os.getpid())
    assert document["variable"] is None and document["threads"] == [] and document["findings"] == []


# Each mutant, run with its own arguments, shows the one requirement it breaks (those one look can judge).
JUDGED_BY_ONE_LOOK = ["symbol-not-exported", "symbol-not-tls", "symbol-size-16", "local-dynamic", "general-dynamic",
                      "no-schema-version", "key-map-as-string", "key-outside-map", "size-big-endian", "valid-2",
                      "only-trace-id", "entry-overruns-size", "utf8-cut", "misaligned-record", "oversized-record",
                      "keys-in-resource"]
# What a mutant breaks besides its own requirement, by the same fault: the key map goes into the resource with the
# schema version (TCTX-07 with TCTX-06).
COMPANIONS = {"keys-in-resource": {"TCTX-07"}}


@pytest.mark.parametrize("name", JUDGED_BY_ONE_LOOK)
def test_each_mutant_shows_its_requirement(name, writer):
    mutant = MUTANTS[name]
    assert "--hold" in mutant["args"]
    w = writer(need(package_fixture_program(PACKAGE, PROGRAM, HOST_ARCH, name)), args=mutant["args"])
    document = thread_context(w.pid)
    found = requirements(document)
    assert mutant["requirement"] in found, document["findings"]
    # Nothing else of the writer's is blamed (TCTX-20 comes with a size past what one record may be).
    others = set(found) - {mutant["requirement"], "TCTX-20"} - COMPANIONS.get(name, set())
    assert not others, document["findings"]
