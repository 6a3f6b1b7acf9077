"""The CI recipes an agent team copies (docs/ci/: a GitHub Actions job and a
GitLab CI job): each parses, installs tracecorr's package, keeps the reports
its gate writes, and its `tracecorr` command lines, run as written (the
recipe's variables set, AGENT the bundled Elastic reference, an empty
expectations file), judge the reference with exit 0 and leave those reports.

A recipe whose gate names a report it does not keep, or keeps one it does not
write, fails here; so does one whose command lines no longer run.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from build_products import HOST_ARCH, TRACECORR, fixture_program, need
from conform_support import INCONCLUSIVE_RETRIES, inconclusive_results

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "docs" / "ci"
RUN_TIMEOUT_S = 600


def _github(doc: dict) -> tuple[dict, list[str], list[str]]:
    """(variables, shell lines, kept report paths) of the GitHub Actions job."""
    (job,) = doc["jobs"].values()
    assert job["container"]["image"] == "debian:12", "the package is built for Debian 12"
    lines: list[str] = []
    kept: list[str] = []
    for step in job["steps"]:
        if "run" in step:
            lines += _shell_lines(step["run"])
        if step.get("uses", "").startswith("actions/upload-artifact@"):
            assert step.get("if") == "always()", "reports of a failed gate must be kept too"
            kept += step["with"]["path"].split()
    return job["env"], lines, kept


def _gitlab(doc: dict) -> tuple[dict, list[str], list[str]]:
    """(variables, shell lines, kept report paths) of the GitLab CI job."""
    (job,) = doc.values()
    assert job["image"] == "debian:12", "the package is built for Debian 12"
    lines = [line for entry in job["before_script"] + job["script"] for line in _shell_lines(entry)]
    artifacts = job["artifacts"]
    assert artifacts["when"] == "always", "reports of a failed gate must be kept too"
    kept = list(artifacts["paths"])
    assert artifacts["reports"]["junit"] in kept
    return job["variables"], lines, kept


RECIPE_READERS = {"github-actions.yml": _github, "gitlab-ci.yml": _gitlab}


def _shell_lines(script: str) -> list[str]:
    """The commands of a shell script, each continued line joined."""
    text = re.sub(r"\\\n\s*", " ", script)
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _option_value(command: str, option: str) -> str:
    match = re.search(rf"{option} (\S+)", command)
    assert match, f"{option} missing from: {command}"
    return match.group(1)


def test_every_recipe_is_checked():
    assert sorted(p.name for p in RECIPES.glob("*.yml")) == sorted(RECIPE_READERS)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("name", sorted(RECIPE_READERS))
def test_recipe_gates_the_bundled_reference(name, tmp_path):
    tracecorr = need(TRACECORR)
    reference = need(fixture_program(HOST_ARCH))
    variables, lines, kept = RECIPE_READERS[name](yaml.safe_load((RECIPES / name).read_text()))

    # The package is what it installs: a .deb fetched from where the team keeps it.
    installs = [line for line in lines if line.startswith("apt-get install")]
    assert any(re.search(r"\S+\.deb\b", line) for line in installs), lines
    commands = [line for line in lines if line.startswith("tracecorr ")]
    (gate,) = [c for c in commands if c.startswith("tracecorr conform ")]
    assert "-- $AGENT" in gate, "the gate judges the team's agent"
    expect = _option_value(gate, "--expect")
    written = {_option_value(gate, option) for option in ("--junit", "--html", "--json")}
    assert written == set(kept), f"writes {sorted(written)}, keeps {sorted(kept)}"

    (tmp_path / expect).write_text(json.dumps({"version": 1, "expected_failures": []}))
    env = dict(os.environ, **{k: str(v) for k, v in variables.items()})
    env["AGENT"] = str(reference)
    env["PATH"] = f"{tracecorr.parent}:{env['PATH']}"
    for command in commands:
        for attempt in range(INCONCLUSIVE_RETRIES + 1):
            run = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                                 timeout=RUN_TIMEOUT_S)
            report_path = tmp_path / _option_value(gate, "--json")
            if command is not gate or run.returncode == 0 or not report_path.exists() \
                    or not inconclusive_results(json.loads(report_path.read_text())):
                break
        assert run.returncode == 0, f"$ {command}\nexit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"

    suite = ET.parse(tmp_path / _option_value(gate, "--junit")).getroot()
    suites = [suite] if suite.tag == "testsuite" else list(suite.iter("testsuite"))
    assert sum(int(s.get("tests", 0)) for s in suites) > 0, "a gate that judged nothing"
    assert sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites) == 0
    html = (tmp_path / _option_value(gate, "--html")).read_text()
    assert "<html" in html.lower() and "PROC-01" in html
    report = json.loads((tmp_path / _option_value(gate, "--json")).read_text())
    assert any(r["verdict"] == "pass" for r in report["results"])
