"""OTEP 4947's ELF rules on arm64 under qemu-user: `tracecorr conform
--protocol otel-thread-context --gdbstub ... -- qemu-aarch64 -L
/usr/aarch64-linux-gnu -g PORT <writer> ARGS` kills the arm64 mutants of
TCTX-01..05 and passes the arm64 reference on those rules.

Those rules are judged from the writer's ELF (its .dynsym, the variable's type
and size, the TLS relocations arm64's linker made for it) and from the process
context that announces the thread context: nothing a real arm64 kernel shows
and qemu-user hides. Read by the host's tracecorr, they cost a few CPU-seconds
each; the guest (test_arm64_thread_context.py) spent 145 s of its emulated CPUs
on the same five mutants, the CI's long pole. The guest keeps the rules only it
can show: the records read through each thread's TPIDR_EL0, and the stores the
watchpoints stop.

The thread pointers the suite's sampled session asks for come from qemu's
gdbstub (`--gdbstub`), as for Elastic v1's arm64 runs (test_conform_arm64.py).
"""
from __future__ import annotations

import time

import pytest

import conform_support as cs
from test_conform_tctx_mutants import JOBS, PROTOCOL, mutants_document, models, program, run_all

ARCH = "arm64"
# The writer rules read from the ELF and the process context alone (see the module's docstring).
ELF_RULES = ["TCTX-01", "TCTX-02", "TCTX-03", "TCTX-04", "TCTX-05"]
REFERENCE_MODEL = "tlsdesc"

DOCUMENT = mutants_document(ARCH) if cs.QEMU else None
MUTANTS = ([m for m in DOCUMENT["mutants"] if m["requirement"] in ELF_RULES and m.get("writer") != "rust"]
           if DOCUMENT else [])
pytestmark = [pytest.mark.slow, pytest.mark.matrix, pytest.mark.qemu, pytest.mark.root,
              pytest.mark.skipif(not MUTANTS or REFERENCE_MODEL not in models(ARCH), reason=cs.missing_reason(
                  f"qemu-aarch64, tracecorr or the {ARCH} otel_thread_context fixtures under {cs.BUILD}"))]


def job(arch_program, args: list[str], only: list[str], strict: bool, options: list[str]) -> dict:
    command, gdbstub = cs.arch_command(ARCH, arch_program)
    return {"command": [*command, *args], "only": only, "strict": strict, "gdbstub": gdbstub, "extra_args": options}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{"reference": --only the ELF rules, <mutant>: --only its rule}, each under qemu-user."""
    out = tmp_path_factory.mktemp("conform-tctx-arm64")
    started = time.monotonic()
    jobs = {"reference": job(program(REFERENCE_MODEL, arch=ARCH), DOCUMENT["reference_args"], ELF_RULES, False, [])}
    for m in MUTANTS:
        jobs[m["name"]] = job(program(mutant=m["name"], arch=ARCH), m["args"], [m["requirement"]], cs.mutant_strict(m),
                              cs.mutant_options(m["requirement"]))
    results = run_all(jobs, out)
    cs.KILL_MATRIX.time(f"{ARCH} {PROTOCOL} ELF runs under qemu-user ({len(jobs)}, {JOBS} at a time)",
                        time.monotonic() - started)
    return results


def test_every_elf_rule_has_its_arm64_mutant():
    """Without this, a mutant missing from the arm64 build would leave its rule unkilled on arm64, silently."""
    assert sorted(m["requirement"] for m in MUTANTS) == ELF_RULES


def test_reference_passes_the_elf_rules(runs):
    run = runs["reference"]
    assert run.verdicts() == {rule: "pass" for rule in ELF_RULES}, run.explain()
    assert run.returncode == cs.EXIT_OK, run.explain()
    assert "R_AARCH64_TLSDESC" in run.result("TCTX-04")["reason"], run.explain("TCTX-04")


@pytest.mark.parametrize("mutant", [pytest.param(m, id=m["name"]) for m in MUTANTS])
def test_mutant_fails_its_own_rule(runs, mutant):
    run = runs[mutant["name"]]
    assert list(run.verdicts()) == [mutant["requirement"]], run.explain()
    cs.assert_mutant_caught(ARCH, mutant, run)
