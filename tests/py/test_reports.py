"""Reports parsed by real parsers: JUnit XML with xml.etree, JSON against
spec/report-schema-v2.json with jsonschema (draft 2020-12).

The sample reports come from the GoogleTest `ReportSamples.Write`, which writes
them into the directory named by TRACECORR_REPORT_SAMPLE_DIR, with the registry
of the engine tests' own protocol they judge by (tests/support/test_protocol.cpp:
areas LOAD, SLOT, WIRE, NAME, OPTS, PEER). The engine's unit-test
binary is found through TRACECORR_UNIT_TESTS (its path) or TRACECORR_BUILD_DIR,
else the newest build*/tests/tracecorr_unit_tests under the repository.
"""
import copy
import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from build_products import missing

REPO = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO / "spec" / "report-schema-v2.json"


def unit_test_binary() -> Path | None:
    if os.environ.get("TRACECORR_UNIT_TESTS"):
        return Path(os.environ["TRACECORR_UNIT_TESTS"])
    if os.environ.get("TRACECORR_BUILD_DIR"):
        return Path(os.environ["TRACECORR_BUILD_DIR"]) / "tests" / "tracecorr_unit_tests"
    candidates = [p for p in REPO.glob("build*/tests/tracecorr_unit_tests") if os.access(p, os.X_OK)]
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> Path:
    binary = unit_test_binary()
    if binary is None or not binary.exists():
        missing("tracecorr_unit_tests (or set TRACECORR_UNIT_TESTS)")
    out = tmp_path_factory.mktemp("reports")
    env = dict(os.environ, TRACECORR_REPORT_SAMPLE_DIR=str(out))
    run = subprocess.run([str(binary), "--gtest_filter=ReportSamples.Write"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[  PASSED  ] 1 test" in run.stdout, "ReportSamples.Write did not run: " + run.stdout
    return out


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def registry_ids(samples):
    return {r["id"] for r in json.loads((samples / "registry.json").read_text())["requirements"]}


NAMES = ["plain", "expectations", "empty", "sectioned", "skipped"]


@pytest.mark.parametrize("name", NAMES)
def test_json_report_validates_against_schema(samples, validator, name):
    report = json.loads((samples / f"{name}.json").read_text(encoding="utf-8"))
    errors = sorted(validator.iter_errors(report), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    assert report["schema"] == "tracecorr-report/2"


def test_json_report_ids_come_from_the_registry(samples, registry_ids):
    report = json.loads((samples / "plain.json").read_text())
    assert {r["id"] for r in report["results"]} <= registry_ids
    assert [r["verdict"] for r in report["results"]] == ["pass", "error", "warn", "fail", "skip"]


def test_json_report_summary_and_gate_agree_with_results(samples):
    # "empty" and "skipped" judged nothing: no pass on nothing (exit 3, with the reason).
    for name, exit_code in [("plain", 1), ("expectations", 1), ("empty", 3), ("sectioned", 1), ("skipped", 3)]:
        report = json.loads((samples / f"{name}.json").read_text())
        assert report["gate"]["exit_code"] == exit_code, name
        assert report["gate"]["passed"] == (exit_code == 0)
        assert bool(report["gate"]["unjudged"]) == (name in ("empty", "skipped")), name
    report = json.loads((samples / "expectations.json").read_text())
    by_id = {r["id"]: r for r in report["results"]}
    assert by_id["NAME-02"]["expectation"] == {"status": "xfail", "reason": 'agent <sends> a "string"'}
    assert by_id["NAME-02"]["gate_failure"] is False
    assert by_id["LOAD-01"]["expectation"]["status"] == "xpass"
    assert by_id["LOAD-01"]["gate_failure"] is True
    assert report["summary"]["expected_failures"] == 1
    assert report["summary"]["stale_expectations"] == 1


def test_every_result_names_its_protocol_and_each_protocol_has_a_section(samples):
    report = json.loads((samples / "sectioned.json").read_text())
    ids = [p["id"] for p in report["protocols"]]
    assert ids == ["tracecorr-test", "other-protocol"]
    assert {r["protocol"] for r in report["results"]} == {"tracecorr-test"}
    assert [p["status"] for p in report["protocols"]] == ["judged", "not-applicable"]
    assert report["protocols"][1]["not_applicable"].startswith("schema other_v1_dev")
    assert report["protocol"] == "tracecorr-test,other-protocol"
    skipped = json.loads((samples / "skipped.json").read_text())
    assert skipped["only"] == ["LOAD", "OPTS-02"]
    assert skipped["gate"]["unjudged"][0].startswith("nothing was judged: 5 skipped of 5 requirements")


def test_junit_says_nothing_was_judged(samples):
    for name in ("empty", "skipped"):
        root = ET.parse(samples / f"{name}.xml").getroot()
        gate = root.find("./testsuite[@name='gate']")
        assert gate is not None, name
        errors = gate.findall("testcase/error")
        assert errors and errors[0].get("message").startswith("nothing was judged"), name
    assert ET.parse(samples / "plain.xml").getroot().find("./testsuite[@name='gate']") is None


def test_schema_rejects_what_it_should(samples, validator):
    """The schema is not vacuous: breaking a valid report makes it fail."""
    good = json.loads((samples / "plain.json").read_text())
    breakages = [
        lambda r: r.__setitem__("schema", "tracecorr-report/1"),
        lambda r: r["results"][0].pop("protocol"),
        lambda r: r["protocols"][0].__setitem__("status", "maybe"),
        lambda r: r["gate"].pop("unjudged"),
        lambda r: r["results"][0].__setitem__("verdict", "maybe"),
        lambda r: r["results"][0].__setitem__("id", "attr-2"),
        lambda r: r["results"][3]["evidence"][1].__setitem__("bytes_hex", "0g"),
        lambda r: r["summary"].pop("failed"),
        lambda r: r["gate"].__setitem__("exit_code", 2),
        lambda r: r.__setitem__("unexpected", 1),
    ]
    for i, breakage in enumerate(breakages):
        bad = copy.deepcopy(good)
        breakage(bad)
        assert not validator.is_valid(bad), f"breakage {i} still validates"


@pytest.mark.parametrize("name", NAMES)
def test_junit_report_is_well_formed_xml(samples, name):
    root = ET.parse(samples / f"{name}.xml").getroot()
    assert root.tag == "testsuites"
    cases = root.findall("./testsuite/testcase")
    assert int(root.get("tests")) == len(cases)
    for suite in root.findall("testsuite"):
        assert int(suite.get("tests")) == len(suite.findall("testcase"))
        assert int(suite.get("failures")) == len(suite.findall("testcase/failure"))
        assert int(suite.get("errors")) == len(suite.findall("testcase/error"))
        assert int(suite.get("skipped")) == len(suite.findall("testcase/skipped"))


def test_junit_groups_by_area_in_registry_order(samples):
    root = ET.parse(samples / "plain.xml").getroot()
    assert [s.get("name") for s in root.findall("testsuite")] == ["LOAD", "SLOT", "WIRE", "NAME", "OPTS"]
    case = root.find("./testsuite[@name='NAME']/testcase")
    assert case.get("name").startswith("NAME-02: The type of")
    props = {p.get("name"): p.get("value") for p in case.findall("properties/property")}
    assert props["level"] == "MUST" and props["verdict"] == "fail"
    failure = case.find("failure")
    assert failure.get("message").startswith("test.stack_ids is a string")
    # Hostile evidence survives as visible text, not as markup or raw control bytes.
    assert '<tag attr="x">&amp;' in failure.text
    assert "\\x1b[31m red \\xff\\xfe" in failure.text
    assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", failure.text)


def test_junit_expectations_become_skipped_and_failure(samples):
    root = ET.parse(samples / "expectations.xml").getroot()
    name = root.find("./testsuite[@name='NAME']/testcase")
    assert name.find("skipped").get("message") == 'expected failure: agent <sends> a "string"'
    load = root.find("./testsuite[@name='LOAD']/testcase")
    assert "stale expectation" in load.find("failure").get("message")


def test_console_report_summary_line(samples):
    text = (samples / "plain.txt").read_text(encoding="utf-8")
    assert re.search(r"^1 passed, 1 failed, 1 warnings, 1 skipped, 1 errors$", text, re.M)
    assert "\x1b" not in text  # written to a file: no colours
