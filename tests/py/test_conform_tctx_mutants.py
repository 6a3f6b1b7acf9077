"""`tracecorr conform --protocol otel-thread-context` judges OTEP 4947 writers:
the x86-64 reference passes (or skips, with its reason) every writer rule
(TCTX-01..28) in every TLS model it is built in, glibc and musl, and every
mutant fails the one rule it breaks.

Fixtures: <build>/fixtures/x86_64/otel_thread_context/reference/<model>/otel-tctx-writer
(reference/models.json lists the models built), mutants/<name>/otel-tctx-writer
and mutants.json beside them: each mutant's complete `args` and the
`reference_args` that exercise every rule (spans, appends, a key added 200 ms in).
The dlopen model also runs under GLIBC_TUNABLES=glibc.rtld.optional_static_tls=0
(its variable in dynamic TLS, reached through each thread's DTV), and the
reference once more with --style in-place (TCTX-23 is judged only on a writer
that updates in place).

Each mutant runs with `--only <its requirement>` (and `--strict` for a SHOULD):
its verdict must be "fail" with exit 1. All runs start up front,
TRACECORR_CONFORM_JOBS (default 2) at a time; the kill matrix is printed at
the end of the session (conftest.py).

arm64: tests/py/test_arm64_thread_context.py runs the same references and the
watched rules' mutants on a real arm64 kernel (qemu-system-aarch64): the
suite's readers (the ptrace sampler, the published-record watch) need the
thread pointers a qemu-user guest keeps to itself. The ELF rules' mutants
(TCTX-01..05) are killed under qemu-user (tests/py/test_conform_tctx_arm64.py).
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

import conform_support as cs
from build_products import fixture_dir

PACKAGE = "otel_thread_context"
PROGRAM = "otel-tctx-writer"
PROTOCOL = "otel-thread-context"
ARCH = "x86_64"
JOBS = int(os.environ.get("TRACECORR_CONFORM_JOBS", "2"))
WRITER_RULES = [r["id"] for r in json.loads((cs.REPO / "spec" / f"{PROTOCOL}.json").read_text())["requirements"]
                if r["role"] == "writer"]
PCTX_WRITER_RULES = [r["id"] for r in json.loads((cs.REPO / "spec" / "otel-process-context.json").read_text())["requirements"]
                     if r["role"] == "writer"]
# The MAY rules: a freedom, never a verdict against the writer (always skipped, with the reason).
FREEDOMS = {"TCTX-09", "TCTX-18", "TCTX-22", "TCTX-26"}
# Skipped on a reference run, and why (the words the reason carries).
# TCTX-14 and TCTX-27 pass: the writer exports its spans to the session's
# OTLP receiver (OTEL_EXPORTER_OTLP_ENDPOINT), and the records are judged
# against their flags and end times.
SKIPPED_WHY = {
    "TCTX-23": "no in-place update seen",  # a pointer-swap writer (--style in-place: its own run)
}
# ... and on the in-place run, where the pointer never moves.
SKIPPED_IN_PLACE = {**{k: v for k, v in SKIPPED_WHY.items() if k != "TCTX-23"}, "TCTX-21": "no pointer swap seen"}
# In an executable the linker relaxes every access: no relocation to judge.
EXECUTABLE_MODELS = {"exe-initial-exec", "exe-local-exec", "static-pie", "musl-static-pie"}
DYNAMIC_TLS = {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=0"}


def built(path: Path) -> bool:
    return path.exists() and cs.TRACECORR.exists()


def mutants_document(arch: str = ARCH) -> dict | None:
    path = fixture_dir(arch) / PACKAGE / "mutants" / "mutants.json"
    return json.loads(path.read_text()) if built(path) else None


def models(arch: str = ARCH) -> list[str]:
    path = fixture_dir(arch) / PACKAGE / "reference" / "models.json"
    return json.loads(path.read_text())["models"] if built(path) else []


def program(model: str | None = None, mutant: str | None = None, arch: str = ARCH) -> Path:
    d = fixture_dir(arch) / PACKAGE
    return (d / "mutants" / mutant if mutant else d / "reference" / model) / PROGRAM


def run_all(jobs: dict[str, dict], out: Path) -> dict[str, cs.ConformRun]:
    """{name: {command, only, strict, env, protocol}} -> {name: run}, JOBS at a time
    (conform_support.run_pool); no "protocol": this one."""
    return cs.run_pool({name: {"protocol": PROTOCOL, **job} for name, job in jobs.items()}, out, JOBS)


def problems(run: cs.ConformRun, model: str, skipped: dict[str, str] | None = None,
             only: list[str] | None = None) -> list[str]:
    """What is wrong with a run of the conforming writer: every writer rule
    passes on evidence, or is skipped for its stated reason. `only`: the
    requirements the run was to judge, and the results looked at (a run that
    judged other protocols too, or judged some rules alone)."""
    if run.report is None:
        return [f"no report (exit {run.returncode}): {run.stderr[-2000:]}"]
    results = [r for r in run.report["results"] if only is None or r["id"] in only]
    verdicts = {r["id"]: r["verdict"] for r in results}
    out = []
    if sorted(verdicts) != sorted(WRITER_RULES if only is None else only):
        out.append(f"judged {sorted(verdicts)}, not the writer rules")
    for r in results:
        rid, verdict, reason = r["id"], r["verdict"], r["reason"]
        if rid in FREEDOMS:
            want_skip, why = True, "(MAY)"
        elif rid in (SKIPPED_WHY if skipped is None else skipped):
            want_skip, why = True, (SKIPPED_WHY if skipped is None else skipped)[rid]
        elif rid in {"TCTX-04", "TCTX-05"} and model in EXECUTABLE_MODELS:
            want_skip, why = True, ""
        else:
            want_skip, why = False, ""
        if want_skip:
            if verdict != "skip" or why not in reason:
                out.append(f"{rid} {verdict} (expected skip: {why}): {reason}")
        elif rid == "TCTX-05" and model in {"general-dynamic", "lib-initial-exec", "musl-general-dynamic"}:
            if verdict != "warn":  # a legacy dialect: allowed, warned about
                out.append(f"{rid} {verdict} (expected warn): {reason}")
        elif verdict != "pass":
            out.append(f"{rid} {verdict} (expected pass): {reason}")
        elif r.get("evidence_count", 0) < 1:
            out.append(f"{rid} passed on no evidence: {reason}")
    return out


DOCUMENT = mutants_document()
MUTANTS = DOCUMENT["mutants"] if DOCUMENT else []
MODELS = models()
REFERENCE_RUNS = [*MODELS, *(["tlsdesc-dlopen:dynamic-tls"] if "tlsdesc-dlopen" in MODELS else [])]
JOURNALS: dict[str, Path] = {}  # run name -> the journal its writer kept
pytestmark = [pytest.mark.slow, pytest.mark.matrix, pytest.mark.root,
              pytest.mark.skipif(not MUTANTS or not MODELS, reason=cs.missing_reason(
                  f"tracecorr or the {ARCH} {PACKAGE} fixtures under {cs.BUILD}"))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run this module judges: "model:<model>" (and
    "model:tlsdesc-dlopen:dynamic-tls"), "in-place", "auto", and each mutant by name."""
    out = tmp_path_factory.mktemp("conform-tctx")
    started = time.monotonic()
    # mutants.json appends the late key 1000 ms in: after a loaded machine's
    # discovery (else TCTX-08 and TCTX-10 see one publication only), inside
    # the sampled window.
    reference_args = DOCUMENT["reference_args"]
    jobs: dict[str, dict] = {}
    for name in REFERENCE_RUNS:
        model = name.split(":")[0]
        jobs[f"model:{name}"] = {"command": [str(program(model)), *reference_args], "only": None, "strict": False,
                                 "env": DYNAMIC_TLS if name.endswith(":dynamic-tls") else None}
    jobs["in-place"] = {"command": [str(program("tlsdesc")), *reference_args, "--style", "in-place"],
                        "only": None, "strict": False}
    # --protocol auto (conform's default): the writer also publishes a process context; both are judged.
    jobs["auto"] = {"command": [str(program("tlsdesc")), *reference_args], "only": None, "strict": False,
                    "protocol": None}
    # The Rust-style library writer, its workers starting one by one after the
    # watch began (as an SDK's do with their tracers): the published-record
    # watch must follow them (it once watched only the threads present 100 ms
    # in, and saw "0 pointer swaps, 0 valid flips" on such a writer).
    if "rust-cdylib" in MODELS:
        JOURNALS["rust-late-threads"] = out / "rust-late-threads.jsonl"
        jobs["rust-late-threads"] = {"command": [str(program("rust-cdylib")), *reference_args, "--threads", "3",
                                                 "--thread-start-ms", "400"],
                                     "only": None, "strict": False,
                                     "env": {"TRACECORR_FIXTURE_JOURNAL": str(JOURNALS["rust-late-threads"])}}
    # A thread pool in dynamic TLS: the threads exist from the start and get
    # their block of the writer's TLS at their first span, 400 ms apart (the
    # watch once gave up on a thread without its block: "no watch ran").
    if "tlsdesc-dlopen" in MODELS:
        JOURNALS["dynamic-tls-pool"] = out / "dynamic-tls-pool.jsonl"
        jobs["dynamic-tls-pool"] = {"command": [str(program("tlsdesc-dlopen")), *reference_args, "--threads", "3",
                                                "--thread-start-ms", "400", "--pool"],
                                    "only": None, "strict": False,
                                    "env": {**DYNAMIC_TLS, "TRACECORR_FIXTURE_JOURNAL": str(JOURNALS["dynamic-tls-pool"])}}
    for m in MUTANTS:
        jobs[m["name"]] = {"command": [str(program(mutant=m["name"])), *m["args"]],
                           "only": [m["requirement"]],
                           "strict": cs.mutant_strict(m),
                           "extra_args": cs.mutant_options(m["requirement"])}
    results = run_all(jobs, out)
    cs.KILL_MATRIX.time(f"{ARCH} {PROTOCOL} runs ({len(jobs)}, {JOBS} at a time)", time.monotonic() - started)
    return results


def test_a_mutant_for_every_breakable_writer_rule():
    """Each writer rule a writer can break has a mutant (some several: a
    failure and a warning, or another writer's way), and each mutant breaks one."""
    assert {m["requirement"] for m in MUTANTS} == set(WRITER_RULES) - FREEDOMS
    assert len({m["name"] for m in MUTANTS}) == len(MUTANTS)
    for m in MUTANTS:
        assert program(mutant=m["name"]).exists(), m["name"]


@pytest.mark.parametrize("name", REFERENCE_RUNS)
def test_reference_passes_every_writer_rule(runs, name):
    run = runs[f"model:{name}"]
    model = name.split(":")[0]
    found = problems(run, model)
    assert not found, "\n".join(found) + "\n" + run.explain()
    assert run.returncode == cs.EXIT_OK, run.explain()


def test_dynamic_tls_is_read_through_the_dtv(runs):
    """Under optional_static_tls=0 glibc puts the dlopened library's TLS out
    of static TLS: the variable is reached through each thread's DTV."""
    if "tlsdesc-dlopen" not in MODELS:
        pytest.skip("the tlsdesc-dlopen model is not built")
    run = runs["model:tlsdesc-dlopen:dynamic-tls"]
    assert run.verdict("TCTX-12") == "pass", run.explain("TCTX-12")


def test_in_place_writer_passes_every_writer_rule(runs):
    run = runs["in-place"]
    found = problems(run, "tlsdesc", SKIPPED_IN_PLACE)
    assert not found, "\n".join(found) + "\n" + run.explain()


def test_auto_detection_judges_both_otel_contexts(runs):
    """The writer publishes its key map in a process context (OTEP 4719): a
    target publishing both OTel contexts. --protocol auto judges both, in one
    run and one report, and both pass (issue 25)."""
    run = runs["auto"]
    assert run.report is not None, run.explain()
    sections = {p["id"]: p for p in run.report["protocols"]}
    assert set(sections) == {"otel-process-context", PROTOCOL}, run.report["protocols"]
    assert all(p["status"] == "judged" and not p["named"] for p in sections.values()), sections
    by_protocol: dict[str, list[str]] = {}
    for r in run.report["results"]:
        by_protocol.setdefault(r["protocol"], []).append(r["id"])
    assert sorted(by_protocol[PROTOCOL]) == sorted(WRITER_RULES), run.explain()
    assert sorted(by_protocol["otel-process-context"]) == sorted(PCTX_WRITER_RULES), run.explain()
    found = problems(run, "tlsdesc", only=WRITER_RULES)
    assert not found, "\n".join(found) + "\n" + run.explain()
    bad = [f"{r['id']} {r['verdict']}: {r['reason']}" for r in run.report["results"]
           if r["protocol"] == "otel-process-context" and r["verdict"] in ("fail", "warn", "error")]
    assert not bad, "\n".join(bad)
    assert any(n.startswith("protocols chosen by --protocol auto: otel-process-context") for n in run.report["notes"]), \
        run.report["notes"]
    assert run.returncode == cs.EXIT_OK, run.explain()


def worker_tids(journal: Path) -> dict[int, set[int]]:
    """pid -> the tids of its workers, from a writer's journal. Both sessions'
    processes write to it, at once when the sessions overlap: each thread
    event names its own process."""
    tids: dict[int, set[int]] = {}
    for line in journal.read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "thread":
            tids.setdefault(event["pid"], set()).add(event["tid"])
    return tids


def assert_every_worker_watched(run: cs.ConformRun, model: str, journal: Path) -> None:
    """The run of a conforming writer passes, and the watch saw each of the
    watched process's workers swap its pointer at least kMinWatchedChanges (8) times."""
    found = problems(run, model)
    assert not found, "\n".join(found) + "\n" + run.explain()
    reason = next(r["reason"] for r in run.report["results"] if r["id"] == "TCTX-24")
    counts = {int(tid): (int(swaps), int(flips)) for tid, swaps, flips in re.findall(r"(\d+) (\d+)/(\d+)", reason)}
    workers = [tids for tids in worker_tids(journal).values() if tids & set(counts)]
    assert len(workers) == 1, f"no process whose workers the watch counted: {reason}"
    for tid in sorted(workers[0]):
        swaps, flips = counts.get(tid, (0, 0))
        assert swaps + flips >= 8, f"worker {tid}: {swaps} swap(s), {flips} flip(s) watched: {reason}"


def test_published_record_watch_follows_workers_that_start_late(runs):
    """The Rust-style writer (rust-cdylib: TLSDESC, the variable at the start of
    .tbss after std's initialised thread-locals, xchg stores) whose 3 workers
    start 400 ms apart, after the watch began."""
    if "rust-cdylib" not in MODELS:
        pytest.skip("the rust-cdylib model is not built (no rustc)")
    assert_every_worker_watched(runs["rust-late-threads"], "rust-cdylib", JOURNALS["rust-late-threads"])


def test_published_record_watch_waits_for_a_pool_threads_tls_block(runs):
    """A pool's threads in dynamic TLS have no block of the writer's module
    until their first span (400 ms apart): each is asked again until it has one."""
    if "tlsdesc-dlopen" not in MODELS:
        pytest.skip("the tlsdesc-dlopen model is not built")
    assert_every_worker_watched(runs["dynamic-tls-pool"], "tlsdesc-dlopen", JOURNALS["dynamic-tls-pool"])


@pytest.mark.parametrize("mutant", [pytest.param(m, id=m["name"]) for m in MUTANTS])
def test_mutant_fails_its_own_rule(runs, mutant):
    run = runs[mutant["name"]]
    cs.assert_mutant_caught(ARCH, mutant, run)
    assert list(run.verdicts()) == [mutant["requirement"]], run.explain()
