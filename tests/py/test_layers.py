"""The build shows the layers, and the layers hold: every symbol a concern's
library takes from another tracecorr library comes from one it declares
(directly or through its declared dependencies) in simulator/CMakeLists.txt.

A library that calls into one it did not declare still links today (the CLI
links everything), so only this test notices the layering going wrong, e.g.
a reader calling the conform engine.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from build_products import BUILD, REPO, need

CMAKE = REPO / "simulator" / "CMakeLists.txt"
PROTOCOLS = REPO / "simulator" / "protocols"
NM = shutil.which("nm")

# Engine libraries allowed to link a protocol package: none. (Kept as a set
# that fails when stale, for a package move in progress.)
NOT_YET_NEUTRAL: set[str] = set()


SUITES = REPO / "probes"


def protocol_names() -> list[str]:
    return sorted(d.name for d in PROTOCOLS.iterdir() if (d / "CMakeLists.txt").exists())


def package_cmake_files() -> list[Path]:
    return [folder / p / "CMakeLists.txt" for p in protocol_names() for folder in (PROTOCOLS, SUITES)
            if (folder / p / "CMakeLists.txt").exists()]


def package_libraries() -> dict[str, Path]:
    """Each protocol package's libraries, as its CMake files declare them (its codecs and rules, and
    whichever of a host agent, an inspector and a conformance suite it brings), and where the build
    puts each."""
    libraries = {}
    for p in protocol_names():
        for folder, out in ((PROTOCOLS / p, BUILD / "simulator" / "protocols" / p), (SUITES / p, BUILD / "probes" / p)):
            cmake = folder / "CMakeLists.txt"
            if cmake.exists():
                for name in re.findall(r"add_library\((tracecorr_\w+)", cmake.read_text()):
                    libraries[name] = out / f"lib{name}.a"
    return libraries


def protocol_packages() -> list[str]:
    return sorted(package_libraries())


def library_path(name: str) -> Path:
    return package_libraries().get(name, BUILD / "simulator" / f"lib{name}.a")


def declared_dependencies() -> dict[str, set[str]]:
    """tracecorr_X -> the tracecorr_* libraries its target_link_libraries names."""
    text = CMAKE.read_text() + "".join(f.read_text() for f in package_cmake_files())
    deps: dict[str, set[str]] = {}
    for m in re.finditer(r"target_link_libraries\((tracecorr_\w+)\s+([^)]*)\)", text):
        deps.setdefault(m.group(1), set()).update(re.findall(r"\btracecorr_\w+", m.group(2)))
    for m in re.finditer(r"tracecorr_concern\((\w+) ", text):
        deps.setdefault("tracecorr_" + m.group(1), set())
    return deps


def closure(deps: dict[str, set[str]], name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        for d in deps.get(todo.pop(), set()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def symbols(archive: Path, flag: str) -> set[str]:
    out = subprocess.run([NM, "-C", flag, str(archive)], capture_output=True, text=True, check=True).stdout
    if flag == "-u":
        return {line.strip()[2:].strip() for line in out.splitlines()
                if line.strip().startswith("U ") and "tracecorr::" in line}
    return {line.split(" ", 2)[2] for line in out.splitlines() if re.match(r"^[0-9a-f]+ [TDBRVW] ", line)}


@pytest.mark.skipif(NM is None, reason="nm (binutils) not installed")
def test_every_library_uses_only_what_it_declares():
    deps = declared_dependencies()
    concerns = sorted(n for n in deps if library_path(n).exists() or n == "tracecorr_base")
    assert "tracecorr_base" in concerns and len(concerns) >= 10, f"concern libraries not found in {CMAKE}: {concerns}"
    assert set(protocol_packages()) <= set(concerns), f"protocol packages not built: {protocol_packages()}"
    defined = {n: symbols(need(library_path(n)), "--defined-only") for n in concerns}
    problems = []
    for name in concerns:
        allowed = closure(deps, name) | {name}
        for symbol in sorted(symbols(library_path(name), "-u")):
            owners = [other for other in concerns if symbol in defined[other]]
            if owners and not set(owners) & allowed:
                problems.append(f"{name} uses {symbol} from {', '.join(owners)}, which it does not declare")
    assert not problems, "\n".join(problems[:20])


def test_the_base_depends_on_no_other_concern():
    deps = declared_dependencies()
    assert closure(deps, "tracecorr_base") == set(), deps["tracecorr_base"]
    # Readers sit below the conform engine, never above it.
    for reader in ("tracecorr_sock", "tracecorr_elf", "tracecorr_discovery", "tracecorr_tls", "tracecorr_threadptr",
                   "tracecorr_otlp", "tracecorr_process_context"):
        assert "tracecorr_conform" not in closure(deps, reader), reader


def test_the_engine_links_no_protocol_package():
    """A protocol package may depend on the engine, never the reverse."""
    deps = declared_dependencies()
    packages = set(protocol_packages())
    registries = {p + "_registry" for p in packages}
    assert packages, f"no protocol package under {PROTOCOLS}"
    engine = [n for n in deps if n not in packages and n not in registries]
    linking = {n for n in engine if (closure(deps, n) - {n}) & (packages | registries)}
    assert linking <= NOT_YET_NEUTRAL, f"engine libraries that took a protocol dependency: {sorted(linking - NOT_YET_NEUTRAL)}"
    assert NOT_YET_NEUTRAL <= linking, (
        f"no longer linking a protocol package, remove from NOT_YET_NEUTRAL: {sorted(NOT_YET_NEUTRAL - linking)}")
