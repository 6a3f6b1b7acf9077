"""Launch mode through a container made as wrapper scripts make one (issue 29,
Deliver 5): `unshare --mount --pid --fork`, a few `mount`s, then
`exec chroot ROOT AGENT`. The container's root shows the host's /usr and the
build directory but has a /tmp of its own, so a path tracecorr makes on the
host is not the agent's. The reference of each protocol passes its full suite:

- Elastic v1: the socket directory tracecorr hands the agent is made in the
  agent's own root too (through /proc/PID/root, at the agent's exec, before
  it runs), and the report says where;
- OTEP 4719 and OTEP 4947: the process context and the thread-context
  variable are read through the container's root, the spans arrive on the
  host's loopback (the container shares the network namespace);
- OTEP 4719's mapping watch follows the agent into the container
  (`unshare --fork` forks it, without exec, into a pid namespace where it is
  pid 1): the mutants of the rules only the watch decides fail there too.

Nothing the run launched is left running (each fixture carries a tag).
"""
from __future__ import annotations

import json

import pytest

import conform_support as cs
import launch_support as ls
from build_products import package_fixture_program
from test_conform_pctx_mutants import problems as process_context_problems
from test_conform_tctx_mutants import problems as thread_context_problems

ELASTIC = cs.fixture_program("x86_64")
PROCESS_CONTEXT = package_fixture_program("otel_process_context", "otel-ctx-writer", "x86_64")
THREAD_CONTEXT = package_fixture_program("otel_thread_context", "otel-tctx-writer", "x86_64").parent / "tlsdesc" / "otel-tctx-writer"


def reference_args(package: str) -> list[str]:
    return json.loads((cs.fixture_dir("x86_64") / package / "mutants" / "mutants.json").read_text())["reference_args"]


pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(not (cs.TRACECORR.exists() and ELASTIC.exists() and PROCESS_CONTEXT.exists()
                                      and THREAD_CONTEXT.exists()),
                                 reason=cs.missing_reason(f"tracecorr or the x86_64 references under {cs.BUILD}"))]


def run_in_container(argv: list[str], protocol: str, tmp_path) -> cs.ConformRun:
    root = ls.make_root(tmp_path / "root")
    return cs.run_conform(ls.container_command(root, argv), out_dir=tmp_path / "out", protocol=protocol,
                          retry_inconclusive=cs.INCONCLUSIVE_RETRIES)


def test_elastic_reference_passes_in_a_container(tmp_path):
    tag = ls.unique_tag("container-elastic")
    run = run_in_container([str(ELASTIC), "--service-name", tag], "elastic-v1", tmp_path)
    assert not ls.left_running(tag), "the run left processes of the container running"
    problems = cs.judgement_problems(run)
    assert not problems, "\n".join(problems) + "\n" + run.explain()
    made = [n for n in run.report["notes"] if "made in the root of pid" in n]
    assert made and "whose root is not tracecorr's (a container), at its exec" in made[0], run.report["notes"]


def test_process_context_reference_passes_in_a_container(tmp_path):
    tag = ls.unique_tag("container-pctx")
    args = reference_args("otel_process_context")
    run = run_in_container([str(PROCESS_CONTEXT), *args, "--service-name", tag, "--fork-after-ms", "200"],
                           "otel-process-context", tmp_path)
    assert not ls.left_running(tag), "the run left processes of the container running"
    found = process_context_problems(run)
    assert not found, "\n".join(found) + "\n" + run.explain()
    assert run.returncode == cs.EXIT_OK, run.explain()


# The rules the mapping watch decides, by store (PCTX-07), by system call
# (PCTX-13) and by fork (PCTX-11: the writer forks inside the container).
WATCHED_MUTANTS = ["timestamp-first", "no-prctl-on-publish", "no-dontfork"]


@pytest.mark.parametrize("name", WATCHED_MUTANTS)
def test_process_context_mutant_fails_its_rule_in_a_container(name, tmp_path):
    mutants = json.loads((cs.fixture_dir("x86_64") / "otel_process_context" / "mutants" / "mutants.json").read_text())
    mutant = next(m for m in mutants["mutants"] if m["name"] == name)
    requirement = mutant["requirement"]
    tag = ls.unique_tag(f"container-{name}")
    program = package_fixture_program("otel_process_context", "otel-ctx-writer", "x86_64", name)
    root = ls.make_root(tmp_path / "root")
    run = cs.run_conform(ls.container_command(root, [str(program), *mutant["args"], "--service-name", tag]),
                         only=[requirement], strict=True, out_dir=tmp_path / "out", protocol="otel-process-context",
                         retry_inconclusive=cs.INCONCLUSIVE_RETRIES)
    assert not ls.left_running(tag), "the run left processes of the container running"
    assert run.report, run.explain()
    assert run.verdict(requirement) == cs.expected_violation_verdict(requirement, strict=True), run.explain(requirement)
    assert run.returncode == cs.EXIT_FAILURE, run.explain(requirement)


def test_thread_context_reference_passes_in_a_container(tmp_path):
    tag = ls.unique_tag("container-tctx")
    args = reference_args("otel_thread_context")
    run = run_in_container([str(THREAD_CONTEXT), *args, "--service-name", tag], "otel-thread-context", tmp_path)
    assert not ls.left_running(tag), "the run left processes of the container running"
    found = thread_context_problems(run, "tlsdesc")
    assert not found, "\n".join(found) + "\n" + run.explain()
    assert run.returncode == cs.EXIT_OK, run.explain()
