"""arm64 end to end under qemu-user: `tracecorr conform` judges the arm64
reference exactly as it judges the x86-64 one, and kills the arm64 mutants by
their own requirements.

Every session relaunches `qemu-aarch64 -L /usr/aarch64-linux-gnu -g PORT
<fixture>`; conform connects to that gdbstub as soon as qemu listens (the
guest waits for it), lets the guest run and reads thread pointers through it
(`--gdbstub 127.0.0.1:PORT`). A run's sessions are sequential and each waits
for its qemu to exit, so one port serves a whole run; parallel runs get
different ports.

What differs by architecture is how the agent's memory is laid out and
reached (ELF dialect and relocations, process storage, the socket, TLS records
read through the thread pointer): the ELF, PROC, SOCK and TLS areas. The
agent's message, attribute and deferral logic is the same C code on both, and
its timing under qemu-user on a busy machine is emulation speed, not the agent:
the x86-64 matrix proves those probes. So by default the arm64 reference is
judged on those areas and the arm64 matrix runs their mutants.

TRACECORR_ARM64_MUTANTS: "arch" (default: the mutants of those areas, less
those NOT_OBSERVABLE_UNDER_QEMU names), "all",
"subset" (one mutant per area plus the timing-judged DEFER ones), or a
comma-separated list of mutant names.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import conform_support as cs

ARCH = "arm64"
JOBS = int(os.environ.get("TRACECORR_CONFORM_JOBS", "2"))
SUBSET = {"traditional-tls", "storage-before-socket", "valid-byte-set-early", "record-published-uninitialised",
          "shared-record", "dynamic-tls", "blocking-socket", "no-length-check", "attr-deduplicated", "no-deferral",
          "ignores-registration-delay", "defers-child-spans", "drops-when-queue-full", "ignores-buffer-size",
          "auto-buffers-before-registration", "ignores-host-id"}
# glibc gives the dlopen'ed library dynamic TLS only with a zero static TLS
# surplus; the dynamic-tls program's own re-exec cannot work under qemu-user
# without binfmt_misc (fixtures/elastic_v1/README.md), so the tunable comes from outside.
MUTANT_ENV = {"dynamic-tls": {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=0"}}
ARCH_AREAS = ("ELF", "PROC", "SOCK", "TLS")
# Mutants no reader can catch under qemu-user, and why. They stay in "all" and
# in explicit lists, where an escape is then expected.
NOT_OBSERVABLE_UNDER_QEMU = {
    "record-filled-after-publishing": "the gap is a few instructions: only the TLS slot watch sees it, and that "
                                      "needs the host's thread pointers (an x86-64 native target)",
}


def in_arch_areas(requirement: str) -> bool:
    return requirement.split("-")[0] in ARCH_AREAS


def selected_mutants() -> list[dict]:
    if cs.QEMU is None or not (cs.fixture_dir(ARCH) / "mutants" / "mutants.json").exists() or not cs.TRACECORR.exists():
        return []
    everything = cs.load_mutants(ARCH)
    choice = os.environ.get("TRACECORR_ARM64_MUTANTS", "arch")
    if choice == "all":
        return everything
    if choice == "arch":
        return [m for m in everything if in_arch_areas(m["requirement"]) and m["name"] not in NOT_OBSERVABLE_UNDER_QEMU]
    names = SUBSET if choice == "subset" else set(choice.split(","))
    return [m for m in everything if m["name"] in names]


MUTANTS = selected_mutants()
pytestmark = [pytest.mark.slow, pytest.mark.matrix, pytest.mark.qemu, pytest.mark.root,
              pytest.mark.skipif(not MUTANTS, reason=cs.missing_reason(f"qemu-aarch64, tracecorr or the {ARCH} fixtures "
                                                                       f"under {cs.BUILD}"))]


def run_mutant(mutant: dict, out_dir) -> cs.ConformRun:
    requirement = mutant["requirement"]
    command, gdbstub = cs.elastic_command(ARCH, mutant["name"])
    return cs.run_conform(command, [requirement], strict=cs.strict_for(requirement), gdbstub=gdbstub,
                          out_dir=out_dir, env=MUTANT_ENV.get(mutant["name"]),
                          extra_args=cs.mutant_options(requirement), retry_inconclusive=cs.INCONCLUSIVE_RETRIES)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("conform-arm64")
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        command, gdbstub = cs.elastic_command(ARCH)
        reference = pool.submit(cs.run_conform, command, list(ARCH_AREAS), gdbstub=gdbstub,
                                out_dir=out / "reference", junit=True, retry_inconclusive=cs.INCONCLUSIVE_RETRIES)
        futures = {m["name"]: pool.submit(run_mutant, m, out / m["name"]) for m in MUTANTS}
        results = {name: f.result() for name, f in futures.items()}
        results["reference"] = reference.result()
    cs.KILL_MATRIX.time(f"{ARCH} mutant runs ({len(MUTANTS)} mutants + reference, {JOBS} at a time)",
                        time.monotonic() - started)
    return results


def test_arm64_reference_verdicts_equal_x86_64(runs, tmp_path_factory):
    arm64 = runs["reference"]
    assert arm64.returncode == cs.EXIT_OK, arm64.explain()
    assert arm64.report["target"]["description"].startswith(cs.QEMU)
    if not cs.fixture_program("x86_64").exists():
        cs.missing("the x86-64 reference")
    x86_64 = cs.reference_run("x86_64", tmp_path_factory.mktemp("conform-x86_64-reference"))
    assert x86_64.returncode == cs.EXIT_OK, x86_64.explain()
    differing = {r: (v, arm64.verdicts().get(r)) for r, v in x86_64.verdicts().items()
                 if in_arch_areas(r) and arm64.verdicts().get(r) != v}
    assert set(arm64.verdicts()) == {r for r in x86_64.verdicts() if in_arch_areas(r)}
    assert not differing, "x86-64 vs arm64 verdicts differ: " + repr(differing) + "\n" + "\n".join(
        arm64.explain(r) for r in differing)


def test_arm64_reference_records_are_read_through_the_gdbstub(runs):
    """The TLS verdicts rest on records actually read from the guest, and
    TLS-04 on watched stores (not on 'nothing observed')."""
    run = runs["reference"]
    for requirement in ("TLS-01", "TLS-02", "TLS-03", "TLS-04", "TLS-05", "TLS-07"):
        assert run.verdict(requirement) == "pass", run.explain(requirement)
    assert "updates watched store by store" in run.result("TLS-04")["reason"]
    assert "R_AARCH64_TLSDESC" in run.result("ELF-04")["reason"]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m["name"] for m in MUTANTS])
def test_arm64_mutant_is_caught_by_its_own_requirement(runs, mutant):
    cs.assert_mutant_caught(ARCH, mutant, runs[mutant["name"]])
