"""`tracecorr conform --profiler`: the reader side judged (issue 27).

tracecorr plays the application: a stage of writers (OTEP 4947 in every TLS model built, the in-place
style, dynamic TLS, a process under another schema; Elastic's reference agent) journals what each thread
published when, the profiler under test samples the host and exports OTLP profiles to tracecorr, and each
reader requirement is judged from the journals and the samples.

The profiler here is tracecorr's own host agent, the reference reader: it must pass everything the stage
shows. Then the kill matrix: the same agent with one reader defect switched on (`--reader-defect`) must
fail the requirement the defect breaks, in a run limited to it (`--only`).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from build_products import HOST_ARCH, REPO, TRACECORR, need

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr
from tracecorr.profiles import HAVE_PROFILES

pytestmark = [pytest.mark.root, pytest.mark.host_wide,  # the agent samples (and sends to) every agent on the host
              pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the BPF sampler runs natively on x86-64 here"),
              pytest.mark.skipif(not HAVE_PROFILES, reason="built without OTLP profiles (libgrpc++-dev)")]

RUN_TIMEOUT_S = 240
LEVELS = {r["id"]: r["level"]
          for registry in json.loads(subprocess.run([str(TRACECORR), "list", "--json"], capture_output=True, text=True,
                                                    check=False).stdout or "[]")
          for r in registry["requirements"]}
# The reference reader: every process on the host, BPF, often enough that each stage member is sampled soon.
AGENT = [str(TRACECORR), "agent", "--all", "--reader", "bpf", "--frequency", "199", "--quiet"]
EXIT_FAIL = 1


def conform_profiler(tmp_path, agent_args: list[str], only: list[str] | None = None, protocol: str = "grpc",
                     strict: bool = False) -> dict:
    report = tmp_path / "report.json"
    args = [str(need(TRACECORR)), "conform", "--profiler", "--profiler-protocol", protocol, "--json", str(report),
            "--quiet"]
    if only:
        args += ["--only", ",".join(only)]
    if strict:
        args.append("--strict")
    run = subprocess.run(args + ["--"] + AGENT + agent_args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert report.exists(), run.stdout + run.stderr
    result = json.loads(report.read_text())
    result["exit"] = run.returncode
    result["output"] = run.stdout + run.stderr
    return result


def verdicts(result: dict) -> dict[str, dict]:
    return {r["id"]: r for r in result["results"]}


def explain(result: dict) -> str:
    lines = [f'{r["id"]}: {r["verdict"]}: {r["reason"]}' for r in result["results"]]
    return "\n".join(lines + result.get("notes", []))


# What the stage shows today, each judged from its hazard; the rest are skipped (a permission, a
# documentation rule) or not yet shown by any stage member, and say so.
JUDGED_ON_THE_STAGE = ["TCTXR-01", "TCTXR-03", "TCTXR-04", "TCTXR-05", "TCTXR-06", "TCTXR-07", "TCTXR-08", "TCTXR-09",
                       "TCTXR-10", "TCTXR-11", "TCTXR-12", "TCTXR-14", "TCTXR-16", "PCTXR-01", "PCTXR-02", "PCTXR-03",
                       "PCTXR-04", "PCTXR-05", "TLS-08", "TLS-09", "MSG-01", "MSG-08"]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> dict:
    return conform_profiler(tmp_path_factory.mktemp("reference"), [])


def test_the_reference_reader_passes_the_gate(reference_run):
    v = verdicts(reference_run)
    failed = [i for i, r in v.items() if r["verdict"] in ("fail", "warn", "error")]
    assert not failed, explain(reference_run)
    assert reference_run["exit"] == 0, explain(reference_run)
    # What is skipped says why: a permission, a documentation rule, a hazard no stage member shows yet.
    for r in v.values():
        if r["verdict"] == "skip":
            assert r["reason"], r


@pytest.mark.parametrize("requirement", JUDGED_ON_THE_STAGE)
def test_the_reference_reader_passes_what_the_stage_shows(reference_run, requirement):
    r = verdicts(reference_run)[requirement]
    assert r["verdict"] == "pass", explain(reference_run)


def test_every_stage_member_is_named_with_what_it_showed(reference_run):
    members = [n for n in reference_run["notes"] if n.startswith("stage member ")]
    assert any("otel-thread-context/musl-dlopen" in n for n in members), members
    assert any("otel-thread-context/nodejs-schema" in n for n in members), members
    assert any("otel-process-context/damaged-signature" in n for n in members), members
    assert all("could not launch" not in n for n in members), members
    assert reference_run["counters"]["profile_samples"] > 0


# The kill matrix: one reader defect each, the requirement it breaks (a SHOULD judged --strict).
KILLS = [
    ("ignores-valid", "TCTXR-08"),
    ("ignores-valid", "TLS-08"),
    ("ignores-trace-present", "TLS-09"),
    ("never-refreshes-key-map", "TCTXR-10"),
    ("keeps-out-of-map", "TCTXR-11"),
    ("first-duplicate-wins", "TCTXR-12"),
    ("reads-any-schema", "TCTXR-03"),
    ("static-tls-only", "TCTXR-05"),
    ("wrong-counts", "MSG-08"),
    ("no-registration", "MSG-01"),
    ("ignores-seqlock", "PCTXR-03"),
    ("ignores-seqlock", "PCTXR-04"),
]
# Not in the matrix: any-signature (PCTXR-02) is the ptrace reader's defect (the BPF sampler checks the header's
# identity in the kernel and refuses it), and a ptrace reader over --all stops every process of the shared host;
# one-mapping-name (PCTXR-01): every mapping here is /memfd:OTEL_CTX (no CONFIG_ANON_VMA_NAME), so a reader of
# [anon_shmem:OTEL_CTX] only reads no member, which is inconclusive, not failed.


@pytest.mark.parametrize("defect,requirement", KILLS, ids=[f"{d}-{r}" for d, r in KILLS])
def test_a_reader_defect_fails_its_own_requirement(tmp_path, defect, requirement):
    strict = LEVELS[requirement] == "SHOULD"
    result = conform_profiler(tmp_path, ["--reader-defect", defect], only=[requirement], strict=strict)
    assert verdicts(result)[requirement]["verdict"] == "fail", explain(result)
    assert result["exit"] == EXIT_FAIL, explain(result)
