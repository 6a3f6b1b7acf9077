"""Where the build products are, for every Python test: one home for the build
directory, the registry and the fixture programs.

$TRACECORR_BUILD (default: build/ in this repository) holds bin/tracecorr,
fixtures/<arch>/reference/ and fixtures/<arch>/mutants/<name>/ (Elastic v1's,
each with its tracecorr-fixture), fixtures/<arch>/<package>/reference/ and
.../mutants/<name>/ (every later protocol package's), tests/tracecorr_unit_tests
and testdata/.

A test that needs a product calls need(path) (or missing(what)): locally the
test is skipped, naming what is missing. Under CI (CI set, and not "false" or
"0") it fails instead: a CI run that skips for want of something it should
have built passes while proving nothing. Module-level skips use
missing_reason(what) for their reason, which conftest.py turns into failures
under CI the same way.
"""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("TRACECORR_BUILD", str(REPO / "build")))
TRACECORR = BUILD / "bin" / "tracecorr"
REGISTRY = json.loads((REPO / "spec" / "elastic-v1.json").read_text())
HOST_ARCH = {"x86_64": "x86_64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())

# Every skip for a missing build product starts with this; conftest.py keys on it.
MISSING_PREFIX = "missing build product: "


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing_reason(what: str) -> str:
    return f"{MISSING_PREFIX}{what} (build it, or set TRACECORR_BUILD to a build directory that has it)"


def missing(what: str):
    """Skips the running test, or fails it under CI."""
    reason = missing_reason(what)
    if in_ci():
        pytest.fail("CI: " + reason, pytrace=False)
    pytest.skip(reason)


def need(path: Path) -> Path:
    """`path` if it exists; otherwise missing(path)."""
    if not Path(path).exists():
        missing(str(path))
    return Path(path)


def fixture_dir(arch: str) -> Path:
    return BUILD / "fixtures" / arch


def fixture_program(arch: str, mutant: str | None = None) -> Path:
    """The reference fixture of `arch`, or the named mutant's (not checked: see need)."""
    d = fixture_dir(arch)
    return (d / "reference" if mutant is None else d / "mutants" / mutant) / "tracecorr-fixture"


def package_fixture_program(package: str, program: str, arch: str, mutant: str | None = None) -> Path:
    """`program` of a protocol package's fixtures (fixtures/<package>/fixtures.cmake),
    which keep their outputs in <build>/fixtures/<arch>/<package>/: the reference,
    or the named mutant's (not checked: see need)."""
    d = fixture_dir(arch) / package
    return (d / "reference" if mutant is None else d / "mutants" / mutant) / program
