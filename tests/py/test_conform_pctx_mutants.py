"""`tracecorr conform --protocol otel-process-context` judges OTEP 4719 writers:
the x86-64 reference passes every writer rule (PCTX-01..18), every mutant
fails the one it breaks, and each reference variant (a legal other choice) is
judged as the OTEP allows it.

Fixtures: <build>/fixtures/x86_64/otel_process_context/{reference,mutants/<name>}/otel-ctx-writer
and mutants.json beside them: each mutant's complete `args`, `reference_args`
(every rule exercised) and `reference_variants`. The reference also forks a
child 200 ms in (--fork-after-ms), so PCTX-11 rests on a fork as well as on
the smaps flag.

Each mutant runs with `--strict --only <its requirement>`: a MUST or SHOULD
violation is then verdict "fail" with exit 1 (one SHOULD mutant is also run
without --strict, where it warns and exits 0). All runs start up front,
TRACECORR_CONFORM_JOBS (default 4: a run's target mostly sleeps and its reader
mostly waits) at a time; the kill matrix is printed at
the end of the session (conftest.py). arm64 under qemu-user:
test_conform_pctx_arm64.py, which shares this module's helpers.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

import conform_support as cs
from build_products import package_fixture_program

PACKAGE = "otel_process_context"
PROGRAM = "otel-ctx-writer"
PROTOCOL = "otel-process-context"
ARCH = "x86_64"
JOBS = int(os.environ.get("TRACECORR_CONFORM_JOBS", "4"))
FORK = ["--fork-after-ms", "200"]
WRITER_RULES = [r["id"] for r in json.loads((cs.REPO / "spec" / f"{PROTOCOL}.json").read_text())["requirements"]
                if r["role"] == "writer"]
# The SHOULD mutant also run without --strict.
LENIENT_SHOULD_MUTANT = "no-dontfork"


def mutants_document(arch: str) -> dict | None:
    """The build's mutants.json for `arch`, or None when it (or tracecorr) is not built."""
    path = cs.fixture_dir(arch) / PACKAGE / "mutants" / "mutants.json"
    if not path.exists() or not cs.TRACECORR.exists():
        return None
    return json.loads(path.read_text())


def program(arch: str, mutant: str | None = None) -> Path:
    return package_fixture_program(PACKAGE, PROGRAM, arch, mutant)


def variant_args(document: dict, name: str) -> list[str]:
    return next(v["args"] for v in document["reference_variants"] if v["name"] == name)


def run_all(jobs: dict[str, tuple[list[str], list[str] | None, bool]], out: Path) -> dict[str, cs.ConformRun]:
    """{name: (command, only, strict)} -> {name: run}, JOBS at a time (conform_support.run_pool)."""
    return cs.run_pool({name: {"command": command, "only": only, "strict": strict, "protocol": PROTOCOL}
                        for name, (command, only, strict) in jobs.items()}, out, JOBS)


def problems(run: cs.ConformRun, expected: dict[str, str] | None = None) -> list[str]:
    """What is wrong with a run of a conforming writer: every writer rule must
    pass on evidence, except those `expected` gives another verdict."""
    expected = expected or {}
    if run.report is None:
        return [f"no report (exit {run.returncode}): {run.stderr[-2000:]}"]
    verdicts = run.verdicts()
    out = []
    if sorted(verdicts) != sorted(WRITER_RULES):
        out.append(f"judged {sorted(verdicts)}, not the writer rules")
    for r in run.report["results"]:
        want = expected.get(r["id"], "pass")
        if r["verdict"] != want:
            out.append(f"{r['id']} {r['verdict']} (expected {want}): {r['reason']}")
        elif want == "pass" and r.get("evidence_count", 0) < 1:
            out.append(f"{r['id']} passed on no evidence: {r['reason']}")
    return out


def count_in(reason: str, pattern: str) -> int:
    found = re.search(pattern, reason)
    assert found, f"{pattern!r} not in {reason!r}"
    return int(found.group(1))


DOCUMENT = mutants_document(ARCH)
MUTANTS = DOCUMENT["mutants"] if DOCUMENT else []
pytestmark = [pytest.mark.slow, pytest.mark.matrix, pytest.mark.root,
              pytest.mark.skipif(not MUTANTS, reason=cs.missing_reason(
                  f"tracecorr or the {ARCH} {PACKAGE} fixtures under {cs.BUILD}"))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run this module judges: "reference", "variant:<name>",
    "lenient", and each mutant by name."""
    out = tmp_path_factory.mktemp("conform-pctx")
    started = time.monotonic()
    jobs = {"reference": ([str(program(ARCH)), *DOCUMENT["reference_args"], *FORK], None, False)}
    for v in DOCUMENT["reference_variants"]:
        jobs[f"variant:{v['name']}"] = ([str(program(ARCH)), *v["args"], *FORK], None, False)
    lenient = next(m for m in MUTANTS if m["name"] == LENIENT_SHOULD_MUTANT)
    jobs["lenient"] = ([str(program(ARCH, lenient["name"])), *lenient["args"]], [lenient["requirement"]], False)
    for m in MUTANTS:
        jobs[m["name"]] = ([str(program(ARCH, m["name"])), *m["args"]], [m["requirement"]], True)
    results = run_all(jobs, out)
    cs.KILL_MATRIX.time(f"{ARCH} {PROTOCOL} runs ({len(jobs)}, {JOBS} at a time)", time.monotonic() - started)
    return results


def test_one_mutant_per_writer_rule():
    assert sorted(m["requirement"] for m in MUTANTS) == WRITER_RULES
    for m in MUTANTS:
        assert program(ARCH, m["name"]).exists(), m["name"]


def test_reference_passes_every_writer_rule(runs):
    run = runs["reference"]
    assert run.returncode == cs.EXIT_OK, run.explain()
    assert not problems(run), "\n".join(problems(run)) + "\n" + run.explain()
    # PCTX-11 rests on the flag and the child forked 200 ms in.
    assert "1 forks seen, no child inherited it" in run.result("PCTX-11")["reason"], run.explain("PCTX-11")
    # The updates were watched and each was named.
    assert count_in(run.result("PCTX-14")["reason"], r"(\d+) updates each re-issued") >= 2, run.explain("PCTX-14")


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m["name"] for m in MUTANTS])
def test_mutant_fails_its_own_rule(runs, mutant):
    run = runs[mutant["name"]]
    cs.assert_mutant_caught(ARCH, mutant, run)
    assert list(run.verdicts()) == [mutant["requirement"]], run.explain()
    assert run.result(mutant["requirement"])["gate_failure"] is True


def test_session_waits_for_a_late_publishers_first_update(runs):
    """A writer that publishes late and first updates 3 s later, from a worker
    thread: the watched session outlasts its 2.5 s window until the update
    (watch::UpdateWait), so PCTX-08, 09 and 14 are judged on it, and the
    report says how long the session watched and why it stopped."""
    run = runs["variant:late-worker-updates"]
    for requirement in ("PCTX-08", "PCTX-09", "PCTX-14"):
        assert run.verdict(requirement) == "pass", run.explain(requirement)
    waited = [n for n in run.report.get("notes", []) if "watched the process context for" in n]
    assert waited and "the writer updated" in waited[0], run.report.get("notes")
    assert int(re.search(r"for (\d+) ms", waited[0]).group(1)) > 2500, waited[0]


def test_should_violation_warns_without_strict(runs):
    run = runs["lenient"]
    requirement = next(m["requirement"] for m in MUTANTS if m["name"] == LENIENT_SHOULD_MUTANT)
    assert cs.LEVELS[requirement] == "SHOULD"
    assert run.verdict(requirement) == "warn", run.explain(requirement)
    assert run.returncode == cs.EXIT_OK, run.explain(requirement)


@pytest.mark.parametrize("name", ["payload-after-header", "memfd-without-noexec-seal", "late-worker-updates"])
def test_conforming_variant_passes_every_writer_rule(runs, name):
    run = runs[f"variant:{name}"]
    assert run.returncode == cs.EXIT_OK, run.explain()
    assert not problems(run), "\n".join(problems(run)) + "\n" + run.explain()


def test_version_1_warns_and_passes_the_rest(runs):
    run = runs["variant:version-1"]
    assert not problems(run, {"PCTX-03": "warn"}), "\n".join(problems(run, {"PCTX-03": "warn"})) + "\n" + run.explain()
    assert "version 1 is for development" in run.result("PCTX-03")["reason"], run.explain("PCTX-03")
    assert run.returncode == cs.EXIT_OK, run.explain()


def test_torture_reads_are_never_torn(runs):
    """A writer updating as fast as it can: the read session's seqlock reads
    see many timestamps and never two payloads under one."""
    run = runs["variant:torture"]
    result = run.result("PCTX-10")
    assert result["verdict"] == "pass", run.explain("PCTX-10")
    reason = result["reason"]
    assert "none torn" in reason, reason
    assert count_in(reason, r"(\d+) consistent reads of") >= 1000, reason
    assert count_in(reason, r"\((\d+) timestamps;") >= 100, reason
    assert count_in(reason, r"(\d+) changed during the copy") + count_in(reason, r"(\d+) mid-update") > 0, (
        "a writer updating this fast makes some reads start over: " + reason)


def test_torture_is_judged_like_the_reference(runs):
    run = runs["variant:torture"]
    assert not problems(run), "\n".join(problems(run)) + "\n" + run.explain()


def test_anonymous_mapping_without_anon_vma_names(runs):
    """--no-memfd: an anonymous mapping is discoverable only by the name prctl
    gives it. On a kernel without CONFIG_ANON_VMA_NAME the writer cannot name
    it, so it publishes nothing (the OTEP: no reader could find it), and
    conform says so under PCTX-01 rather than passing anything: published
    nothing judges nothing, and the gate errs on it (exit 3, issue 25)."""
    run = runs["variant:anonymous-mapping"]
    if anon_vma_names_supported():
        assert not problems(run), "\n".join(problems(run)) + "\n" + run.explain()
        return
    result = run.result("PCTX-01")
    assert result["verdict"] == "skip" and "published nothing" in result["reason"], run.explain("PCTX-01")
    # The writer withdraws the header it could not name: by the deadline there is none anywhere.
    assert "no mapping named [anon_shmem:OTEL_CTX], [anon:OTEL_CTX] or /memfd:OTEL_CTX appeared" in result["reason"], \
        run.explain("PCTX-01")
    assert run.returncode == cs.EXIT_ENVIRONMENT, run.explain()
    assert run.report["gate"]["unjudged"], run.explain()
    # Nothing was found, so nothing else can pass.
    assert not [r for r in run.report["results"] if r["verdict"] == "pass"], run.explain()


def anon_vma_names_supported() -> bool:
    """Whether this kernel names anonymous mappings (CONFIG_ANON_VMA_NAME):
    prctl(PR_SET_VMA) on a private anonymous page, asked through Python's libc."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    first_byte = ctypes.c_char.from_buffer(page)
    pr_set_vma, pr_set_vma_anon_name = 0x53564D41, 0
    ok = libc.prctl(pr_set_vma, pr_set_vma_anon_name, ctypes.c_ulong(ctypes.addressof(first_byte)),
                    ctypes.c_ulong(mmap.PAGESIZE), ctypes.c_char_p(b"tracecorr-probe")) == 0
    del first_byte  # the buffer's export, before the mapping can close
    page.close()
    return ok
