"""Every protocol package has the same shape, so a newcomer who knows one knows them all:

* its suite (probes/<p>/) keeps each probe in a file of its own named for its area,
  `<area>_probe.cpp`, the probe's name() the area (as Elastic's `elf_probe.cpp` is "elf", h2spec's
  one file per spec section), with that area's judges beside it;
* its Python subpackage (python/tracecorr/<p>/) has the same modules: `target.py` (what a process
  under test needs), `agent.py` (the profiler's side) and `messages.py` or `codecs.py` (what it
  encodes or decodes), each re-exported by `__init__.py`;
* its C++ tests live in tests/unit/<p>/, built by that folder's CMakeLists.txt.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "probes"
PYTHON = REPO / "python" / "tracecorr"
UNIT = REPO / "tests" / "unit"

PROBE_NAME = re.compile(r'name\(\) const override \{ return "(\w+)"; \}|SessionProbe\("(\w+)"')
PROBE_CLASS = re.compile(r"class (\w+) final : public (?:conform::)?(?:Probe|SessionProbe)\b")


def suites() -> list[Path]:
    return sorted(d for d in SUITES.iterdir() if (d / "CMakeLists.txt").exists())


def python_packages() -> list[Path]:
    return sorted(d for d in PYTHON.iterdir() if (d / "__init__.py").exists() and not d.name.startswith("_"))


@pytest.mark.parametrize("suite", suites(), ids=lambda d: d.name)
def test_each_probe_is_in_its_areas_file(suite: Path) -> None:
    areas = []
    for source in sorted(suite.glob("*.cpp")):
        text = source.read_text()
        classes = PROBE_CLASS.findall(text)
        names = [a or b for a, b in PROBE_NAME.findall(text)]
        if not classes:
            continue
        assert source.name.endswith("_probe.cpp"), f"{source.relative_to(REPO)} defines probes {classes}: " \
                                                   "each belongs in <area>_probe.cpp"
        area = source.name[: -len("_probe.cpp")]
        assert len(classes) == 1 and names == [area], \
            f"{source.relative_to(REPO)}: one probe, named {area!r} (found classes {classes}, names {names})"
        areas.append(area)
    assert len(areas) >= 2, f"{suite.name}: fewer than two probe files found; the scan is off"


@pytest.mark.parametrize("package", python_packages(), ids=lambda d: d.name)
def test_each_python_package_has_the_same_modules(package: Path) -> None:
    modules = {p.stem for p in package.glob("*.py")}
    missing = {"target", "agent"} - modules
    assert not missing, f"python/tracecorr/{package.name}: no {sorted(missing)}.py"
    assert modules & {"messages", "codecs"}, f"python/tracecorr/{package.name}: no messages.py or codecs.py"
    init = (package / "__init__.py").read_text()
    for module in sorted(modules & {"target", "agent", "messages", "codecs"}):
        assert re.search(rf"from \. import [^\n]*\b{module}\b", init), \
            f"python/tracecorr/{package.name}/__init__.py does not import its {module} module"


def test_each_package_has_its_unit_test_folder() -> None:
    packages = {d.name for d in suites()} | {d.name for d in python_packages()}
    missing = sorted(p for p in packages if not (UNIT / p / "CMakeLists.txt").exists())
    assert not missing, f"no tests/unit/<p>/CMakeLists.txt for {missing}"
