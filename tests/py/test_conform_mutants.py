"""`tracecorr conform` kills every x86-64 mutant by the requirement it breaks,
and passes the reference on each of those requirements.

Each mutant (<build>/fixtures/x86_64/mutants/mutants.json; library variants
are built into the mutants that name them) is run with `--only <its
requirement>`, so only the sessions that requirement's probe reads are
launched. A MUST violation must be verdict "fail" with exit 1; a SHOULD one is
run with --strict and must be "fail" with exit 1 too (without --strict it
warns and exits 0: checked once); the MAY one (CONF-02) must be "warn" and exit
0 (MAYs never fail the gate).

All runs start up front, TRACECORR_CONFORM_JOBS (default 2) at a time: the
probes judge timing from recorded timestamps with slack for a loaded machine,
and a run per core keeps the load at what they are built for. The kill matrix
is printed at the end of the session (conftest.py).
"""
from __future__ import annotations

import json
import os
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor

import pytest

import conform_support as cs

ARCH = "x86_64"
JOBS = int(os.environ.get("TRACECORR_CONFORM_JOBS", "2"))
# The SHOULD mutant also run without --strict: one session, so it is cheap.
LENIENT_SHOULD_MUTANT = "world-writable-socket"


def mutants() -> list[dict]:
    if not (cs.fixture_dir(ARCH) / "mutants" / "mutants.json").exists() or not cs.TRACECORR.exists():
        return []
    return cs.load_mutants(ARCH)


MUTANTS = mutants()
pytestmark = [pytest.mark.slow, pytest.mark.matrix, pytest.mark.root,
              pytest.mark.skipif(not MUTANTS, reason=cs.missing_reason(f"tracecorr or the {ARCH} fixtures under {cs.BUILD}"))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every conform run this module judges, started together on a small pool:
    {"reference": full run, "lenient": non-strict SHOULD run, <mutant>: run}."""
    out = tmp_path_factory.mktemp("conform-mutants")
    started = time.monotonic()
    # Launches per requirement differ (DEFER-05 needs three, ELF one): the
    # longest runs go first so the pool drains evenly.
    launches = cs.launches("elastic-v1")
    ordered = sorted(MUTANTS, key=lambda m: -len(launches[m["requirement"]]))
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        reference = pool.submit(cs.reference_run, ARCH, out / "reference")
        lenient = pool.submit(cs.run_conform, cs.elastic_command(ARCH, LENIENT_SHOULD_MUTANT)[0],
                              [next(m["requirement"] for m in MUTANTS if m["name"] == LENIENT_SHOULD_MUTANT)],
                              out_dir=out / "lenient", retry_inconclusive=cs.INCONCLUSIVE_RETRIES)
        futures = {m["name"]: pool.submit(cs.run_conform, cs.elastic_command(ARCH, m["name"])[0],
                                          [m["requirement"]], strict=cs.strict_for(m["requirement"]),
                                          out_dir=out / m["name"], extra_args=cs.mutant_options(m["requirement"]),
                                          retry_inconclusive=cs.INCONCLUSIVE_RETRIES)
                   for m in ordered}
        results = {name: f.result() for name, f in futures.items()}
        results["reference"] = reference.result()
        results["lenient"] = lenient.result()
    cs.KILL_MATRIX.time(f"{ARCH} mutant runs ({len(MUTANTS)} mutants + reference, {JOBS} at a time)",
                        time.monotonic() - started)
    return results


def test_mutants_json_is_consistent():
    """Every mutant names a known requirement, names are unique, and every
    library variant is built into some mutant (so none goes unjudged)."""
    document = json.loads((cs.fixture_dir(ARCH) / "mutants" / "mutants.json").read_text())
    names = [m["name"] for m in document["mutants"]]
    assert len(names) == len(set(names))
    for m in document["mutants"]:
        assert m["requirement"] in cs.LEVELS, m
        assert cs.fixture_program(ARCH, m["name"]).exists(), m["name"]
    used = {m["library"] for m in document["mutants"] if "library" in m}
    assert used == set(document["library_variants"])
    assert "TLS-07" == next(m["requirement"] for m in document["mutants"] if m["name"] == "dynamic-tls")


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m["name"] for m in MUTANTS])
def test_mutant_is_caught_by_its_own_requirement(runs, mutant):
    requirement, run = mutant["requirement"], runs[mutant["name"]]
    cs.assert_mutant_caught(ARCH, mutant, run)
    expected = cs.expected_violation_verdict(requirement, cs.strict_for(requirement))
    assert run.result(requirement)["gate_failure"] == (expected == "fail")
    # The repeat command reproduces this run's judgement, --strict included.
    repeat = run.result(requirement)["repeat_command"]
    assert repeat.startswith(f"tracecorr conform --only {requirement}") and ("--strict" in repeat) == cs.strict_for(requirement), repeat
    # --only judges exactly the requirement asked for.
    assert list(run.verdicts()) == [requirement]


def test_should_violation_warns_without_strict(runs):
    requirement = next(m["requirement"] for m in MUTANTS if m["name"] == LENIENT_SHOULD_MUTANT)
    assert cs.LEVELS[requirement] == "SHOULD"
    run = runs["lenient"]
    assert run.verdict(requirement) == "warn", run.explain(requirement)
    assert run.returncode == cs.EXIT_OK, run.explain(requirement)
    assert run.result(requirement)["gate_failure"] is False


def test_reference_passes_every_mutant_requirement(runs):
    run = runs["reference"]
    assert run.returncode == cs.EXIT_OK, run.explain()
    verdicts = run.verdicts()
    wrong = {m["requirement"]: verdicts.get(m["requirement"]) for m in MUTANTS
             if verdicts.get(m["requirement"]) != "pass"}
    assert not wrong, "the reference does not pass requirements its mutants break:\n" + "\n".join(
        run.explain(r) for r in wrong)
    # Nothing else may fail or error either; only the MAY TLS-06 (not claimed) is skipped.
    assert {v for v in verdicts.values()} <= {"pass", "skip"}, run.explain()
    assert [r for r, v in verdicts.items() if v == "skip"] == ["TLS-06"], run.explain()


def test_reference_json_report_validates_against_the_schema(runs):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((cs.REPO / "spec" / "report-schema-v2.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    report = runs["reference"].report
    assert report is not None
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(report), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
    agent_requirements = [r["id"] for r in cs.REGISTRY["requirements"] if r["role"] == "agent"]
    assert [r["id"] for r in report["results"]] == agent_requirements


def test_reference_junit_report_parses(runs):
    run = runs["reference"]
    root = ET.parse(run.junit_path).getroot()
    assert root.tag == "testsuites"
    cases = root.findall("./testsuite/testcase")
    results = run.report["results"]
    assert int(root.get("tests")) == len(cases) == len(results)
    assert int(root.get("failures")) == 0 and int(root.get("errors")) == 0
    assert int(root.get("skipped")) == sum(r["verdict"] == "skip" for r in results)
    by_requirement = {}
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.findall("./properties/property")}
        by_requirement[props["requirement"]] = props["verdict"]
        assert case.find("failure") is None and case.find("error") is None, props
    assert by_requirement == {r["id"]: r["verdict"] for r in results}
