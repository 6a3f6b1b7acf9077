"""OTEP 4719 writers on arm64 under qemu-user: `tracecorr conform --protocol
otel-process-context -- qemu-aarch64 -L /usr/aarch64-linux-gnu <writer> ARGS`
judges the arm64 reference and kills the arm64 mutants wherever qemu-user lets
a rule be seen, and elsewhere says it cannot see it, never passing it.

No gdbstub: this protocol needs no thread pointers. qemu-user maps a 64-bit
guest at guest address = host address, so the host's /proc/PID/maps and
/proc/PID/mem read the guest's context, and the mapping watch's hardware
watchpoints trap the host stores qemu makes for the guest's (PCTX-07..09 are
judged as natively). What qemu-user 7.2 (Debian 12) hides:

- madvise is a no-op: no "dc" flag, and a forked child inherits the mapping
  whatever the guest asked (PCTX-11);
- prctl(PR_SET_VMA) is answered by qemu (EINVAL), never passed to the host:
  the watch, which sees the host's system calls, sees no naming call
  (PCTX-13, PCTX-14).

Those rules must be skipped with a reason naming qemu-user, on the reference
and on their own mutants alike. They are judged on arm64 by
test_arm64_system.py: the arm64 tracecorr runs natively on a real arm64
kernel (qemu-system-aarch64), where the mapping watch sees the naming calls
and the forks, and the reference must pass them and each of their mutants
fail its own. Helpers: test_conform_pctx_mutants.py.
"""
from __future__ import annotations

import time

import pytest

import conform_support as cs
from test_conform_pctx_mutants import (FORK, JOBS, PROTOCOL, WRITER_RULES, mutants_document, problems, program,
                                       run_all)

ARCH = "arm64"
# The rules qemu-user cannot show, and the words of the reason that says so.
HIDDEN_BY_QEMU = {
    "PCTX-11": "qemu-user, which ignores madvise(MADV_DONTFORK)",
    "PCTX-13": "qemu-user, which does not pass prctl(PR_SET_VMA) on to the host",
    "PCTX-14": "qemu-user, which does not pass prctl(PR_SET_VMA) on to the host",
}

DOCUMENT = mutants_document(ARCH) if cs.QEMU else None
MUTANTS = DOCUMENT["mutants"] if DOCUMENT else []
pytestmark = [pytest.mark.slow, pytest.mark.matrix, pytest.mark.qemu, pytest.mark.root,
              pytest.mark.skipif(not MUTANTS, reason=cs.missing_reason(
                  f"qemu-aarch64, tracecorr or the {ARCH} otel_process_context fixtures under {cs.BUILD}"))]


def under_qemu(arch_program, args: list[str]) -> list[str]:
    return [cs.QEMU, "-L", cs.AARCH64_SYSROOT, str(arch_program), *args]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{"reference": full run, <mutant>: --strict --only <its rule>}."""
    out = tmp_path_factory.mktemp("conform-pctx-arm64")
    started = time.monotonic()
    jobs = {"reference": (under_qemu(program(ARCH), [*DOCUMENT["reference_args"], *FORK]), None, False)}
    for m in MUTANTS:
        jobs[m["name"]] = (under_qemu(program(ARCH, m["name"]), m["args"]), [m["requirement"]], True)
    results = run_all(jobs, out)
    cs.KILL_MATRIX.time(f"{ARCH} {PROTOCOL} runs under qemu-user ({len(jobs)}, {JOBS} at a time)",
                        time.monotonic() - started)
    return results


def test_qemu_hides_only_rules_the_writer_has():
    assert set(HIDDEN_BY_QEMU) <= set(WRITER_RULES)


def test_reference_passes_what_qemu_shows_and_skips_the_rest(runs):
    run = runs["reference"]
    expected = {rule: "skip" for rule in HIDDEN_BY_QEMU}
    assert not problems(run, expected), "\n".join(problems(run, expected)) + "\n" + run.explain()
    for rule, words in HIDDEN_BY_QEMU.items():
        assert words in run.result(rule)["reason"], run.explain(rule)
    assert run.returncode == cs.EXIT_OK, run.explain()
    # The watch followed qemu's stores: the updates were seen, in order.
    assert "updates each zeroed the timestamp" in run.result("PCTX-08")["reason"], run.explain("PCTX-08")


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m["name"] for m in MUTANTS])
def test_mutant_fails_its_own_rule_or_qemu_says_it_cannot_see_it(runs, mutant):
    run, requirement = runs[mutant["name"]], mutant["requirement"]
    assert list(run.verdicts()) == [requirement], run.explain()
    if requirement in HIDDEN_BY_QEMU:
        result = run.result(requirement)
        assert result["verdict"] == "skip", run.explain(requirement)
        assert HIDDEN_BY_QEMU[requirement] in result["reason"], run.explain(requirement)
        # A run that judged nothing is no pass (issue 25): the gate says why, exit 3.
        assert run.returncode == cs.EXIT_ENVIRONMENT, run.explain(requirement)
        assert run.report["gate"]["unjudged"], run.explain(requirement)
        return
    cs.assert_mutant_caught(ARCH, mutant, run)
