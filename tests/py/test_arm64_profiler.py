"""Profiler mode on a real arm64 kernel (issue 27): the reference reader,
`tracecorr agent --all --reader bpf` built for arm64, against the arm64 stage
of OTEP 4947 writers, in every TLS model built for arm64 (the readers'
architecture-dependent part: TPIDR_EL0, arm64's TLS block layout, its TLS
descriptors, dynamic TLS through the DTV), judged by `tracecorr conform
--profiler` in the same guest.

The arm64 build has no gRPC (its sysroot has none): the profiler exports
OTLP/HTTP to the intake on the guest's loopback. The guest is booted once for
every arm64 VM module (arm64_vm.shared_boot).

Inputs: the arm64 tracecorr (scripts/arm64/build-tracecorr.sh) and
TRACECORR_BUILD's fixtures/arm64 (the native build cross-builds them).
"""
from __future__ import annotations

import json

import pytest

import arm64_vm
from arm64_vm import arm64_guest, missing_payload

# pytest --shard keeps the modules that share the guest in one process, in shard 1.
SHARD_GROUP = "arm64-vm"
SHARD_ALONE = True
pytestmark = [pytest.mark.slow, pytest.mark.qemu]

PROTOCOL = "otel-thread-context"
# The stage's seconds at most (it ends once every member has its samples: 15 s on an idle host): in a
# CI beside three other pytest processes the emulated profiler had exported nothing after 40 s.
MAX_STAGE_S = 120
# The profiler's rate: an emulated CPU runs the BPF program of each sample too; at 199 Hz, on a host
# busy with stress-ng, the emulated agent got nothing exported in 120 s. The stage is made for 19 Hz up.
FREQUENCY_HZ = 49
# The stage's writers below the intake (conform) and the profiler: on two emulated CPUs they starved the
# intake, and every export of the profiler timed out (5 s), on a host busy with stress-ng.
STAGE_NICE = 10
# Launching the emulated stage, the stage, the judging: this module's share of the guest's time limit.
GUEST_BUDGET_S = 400
# What the stage shows on arm64 that depends on the architecture: the variable found in executables and
# libraries (TCTXR-04: arm64's ELF), each TLS model read (TCTXR-05: TPIDR_EL0, arm64's TLS block, its
# descriptors, the DTV), records read only while their thread is stopped (TCTXR-06: in the interrupt).
ARCHITECTURE_RULES = ["TCTXR-04", "TCTXR-05", "TCTXR-06"]


def fixtures_dir():
    return arm64_vm.elastic_fixture_dir().parent


def profiler_job() -> arm64_guest.ProfilerJob:
    return arm64_guest.ProfilerJob(
        "profiler", arm64_vm.arm64_tracecorr(),
        ["agent", "--all", "--reader", "bpf", "--frequency", str(FREQUENCY_HZ)], PROTOCOL,
        fixtures=fixtures_dir(), options=["--max-stage", str(MAX_STAGE_S), "--stage-nice", str(STAGE_NICE)])


arm64_vm.register_jobs(__name__, arm64_vm.ModuleJobs(lambda: [profiler_job()], GUEST_BUDGET_S))


@pytest.fixture(scope="module")
def run(arm64_vm_run):
    problems = missing_payload(elastic_fixture=False)
    if not (fixtures_dir() / "otel_thread_context/reference/models.json").is_file():
        problems.append(f"{fixtures_dir()} has no OTEP 4947 models: run scripts/setup.sh --tests")
    if problems:
        pytest.skip("; ".join(problems))
    return arm64_vm.conform_run(arm64_vm_run, profiler_job())


def explain(run) -> str:
    return f"exit {run.returncode}\n{run.stdout[-4000:]}"


def test_the_reference_reader_fails_nothing_on_the_arm64_stage(run):
    """Nothing failed (what the emulated guest could not show is inconclusive, never a verdict)."""
    assert run.report is not None, explain(run)
    failed = [r["id"] + ": " + r["reason"] for r in run.report["results"] if r["verdict"] in ("fail", "warn")]
    assert not failed, "\n".join(failed) + "\n" + explain(run)
    assert run.returncode in (0, 3), explain(run)


def test_every_arm64_model_is_a_stage_member_and_is_read(run):
    """Each TLS model built for arm64 had its member on the stage, and the profiler's samples of it came in."""
    notes = [n for n in run.report["notes"] if n.startswith("stage member otel-thread-context/")]
    models = json.loads((fixtures_dir() / "otel_thread_context/reference/models.json").read_text())
    for model in models["models"]:
        member = [n for n in notes if n.startswith(f"stage member otel-thread-context/{model} ")]
        assert member, f"no stage member for {model}: {notes}"
        assert " 0 samples taken in" not in member[0], member[0]


@pytest.mark.parametrize("requirement", ARCHITECTURE_RULES)
def test_the_architecture_rules_are_judged_and_pass(run, requirement):
    verdict = {r["id"]: r for r in run.report["results"]}[requirement]
    assert verdict["verdict"] == "pass", f"{requirement}: {verdict['verdict']}: {verdict['reason']}"
