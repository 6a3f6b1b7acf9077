"""The build shows the layers, and the layers hold: every symbol a concern's
library takes from another tracecorr library comes from one it declares
(directly or through its declared dependencies) in simulator/CMakeLists.txt.

A library that calls into one it did not declare still links today (the CLI
links everything), so only this test notices the layering going wrong, e.g.
a reader calling the conform engine.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from build_products import BUILD, REPO, need

CMAKE = REPO / "simulator" / "CMakeLists.txt"
BPF_CMAKE = REPO / "bpf" / "CMakeLists.txt"
# The interface target that is the whole of tracecorr, every package included
# (simulator/CMakeLists.txt adds them in a loop this test does not read).
WHOLE = "tracecorr"
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
    if name == "tracecorr_bpf":
        return BUILD / "bpf" / f"lib{name}.a"
    return package_libraries().get(name, BUILD / "simulator" / f"lib{name}.a")


def declared_dependencies() -> dict[str, set[str]]:
    """tracecorr_X -> the tracecorr_* libraries its target_link_libraries names."""
    text = CMAKE.read_text() + BPF_CMAKE.read_text() + "".join(f.read_text() for f in package_cmake_files())
    deps: dict[str, set[str]] = {}
    for m in re.finditer(r"target_link_libraries\((tracecorr(?:_\w+)?)\s+([^)]*)\)", text):
        deps.setdefault(m.group(1), set()).update(re.findall(r"\btracecorr(?:_\w+)?\b", m.group(2)))
    for m in re.finditer(r"tracecorr_concern\((\w+) ", text):
        deps.setdefault("tracecorr_" + m.group(1), set())
    return deps


def programs() -> set[str]:
    """Executables (the CLI): they link the whole, as they should."""
    text = CMAKE.read_text() + BPF_CMAKE.read_text()
    return set(re.findall(r"add_executable\((tracecorr\w*)", text))


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
                   "tracecorr_otlp", "tracecorr_process_context", "tracecorr_inspect"):
        assert "tracecorr_conform" not in closure(deps, reader), reader


def test_the_rooms_of_the_conformance_engine_are_layered():
    """Watchers need no run and no report; the run needs no report; reports need the run's result model, never the
    other way round (issue 26: watch/, conform/, report/)."""
    deps = declared_dependencies()
    assert {"tracecorr_watch", "tracecorr_conform", "tracecorr_report"} <= set(deps), sorted(deps)
    assert not {"tracecorr_conform", "tracecorr_report"} & closure(deps, "tracecorr_watch"), deps["tracecorr_watch"]
    assert "tracecorr_report" not in closure(deps, "tracecorr_conform"), deps["tracecorr_conform"]
    assert {"tracecorr_conform", "tracecorr_watch"} <= closure(deps, "tracecorr_report"), deps["tracecorr_report"]


def test_the_engine_links_no_protocol_package():
    """A protocol package may depend on the engine, never the reverse."""
    deps = declared_dependencies()
    packages = set(protocol_packages())
    registries = {p + "_registry" for p in packages}
    assert packages, f"no protocol package under {PROTOCOLS}"
    engine = [n for n in deps if n not in packages | registries | programs() | {WHOLE}]
    linking = {n for n in engine if (closure(deps, n) - {n}) & (packages | registries | {WHOLE})}
    assert linking <= NOT_YET_NEUTRAL, f"engine libraries that took a protocol dependency: {sorted(linking - NOT_YET_NEUTRAL)}"
    assert NOT_YET_NEUTRAL <= linking, (
        f"no longer linking a protocol package, remove from NOT_YET_NEUTRAL: {sorted(NOT_YET_NEUTRAL - linking)}")


SPECS = REPO / "spec"
TESTS = REPO / "tests"
ENGINE_TEST_BINARY = BUILD / "tests" / "tracecorr_unit_tests"


def engine_test_sources() -> list[Path]:
    """The engine's unit tests, their data and the helpers they share: never a package's."""
    return sorted([*(TESTS / "unit").glob("*.cpp"), *(TESTS / "unit" / "data").iterdir(), *(TESTS / "support").iterdir()])


def package_spellings(package: str) -> set[str]:
    """How engine test code would name a package: its folder, headers, namespace and
    protocol id, and the library symbols its registry (spec/<id>.json) defines."""
    protocol_id = package.replace("_", "-")
    names = {f'"{package}/', f"{package}_layout.h", f"{package}::", f"tracecorr_{package}", protocol_id}
    registry = SPECS / f"{protocol_id}.json"
    if registry.exists():
        library = json.loads(registry.read_text()).get("library", {})
        names |= {library[k] for k in ("process_storage_symbol", "tls_symbol") if k in library}
    return names


def test_the_engine_tests_use_no_protocol_package():
    """The engine's unit tests test the engine on their own records, libraries and
    requirements (tests/support/test_record.h, test_protocol.cpp); a package's
    tests live in tests/unit/<package>/, in their own binary."""
    problems = []
    for package in protocol_names():
        spellings = package_spellings(package)
        for source in engine_test_sources():
            if source.name == "build_products.py":  # the Python tests' build paths, not the engine tests'
                continue
            text = source.read_text(errors="replace")
            problems += [f"{source.relative_to(REPO)} names {s!r}" for s in sorted(spellings) if s in text]
    assert not problems, "\n".join(problems)


@pytest.mark.skipif(NM is None, reason="nm (binutils) not installed")
def test_the_engine_test_binary_links_no_protocol_package():
    binary = need(ENGINE_TEST_BINARY)
    out = subprocess.run([NM, "-C", "--defined-only", str(binary)], capture_output=True, text=True, check=True).stdout
    linked = {p for p in protocol_names() if f"tracecorr::{p}::" in out}
    assert not linked, f"{binary.name} links protocol packages: {sorted(linked)}"
    # The check sees a package where there is one: in that package's own test binary.
    for package in protocol_names():
        own = BUILD / "tests" / f"tracecorr_{package}_unit_tests"
        if own.exists():
            symbols_of_own = subprocess.run([NM, "-C", "--defined-only", str(own)], capture_output=True, text=True,
                                            check=True).stdout
            assert f"tracecorr::{package}::" in symbols_of_own, own


# ---- names: nothing outside a protocol's package folders names the protocol's things -------------------------------
# Engine files: the engine's C++ and BPF, the engine's Python modules and bindings, the shared test
# support, and the engine's own unit tests. (Each protocol's package folders are everything else.)
ENGINE_NAME_SCOPES = (
    ("simulator/include", "**/*"), ("simulator/src", "**/*"), ("simulator/cli", "**/*"), ("bpf", "**/*"),
    ("python/tracecorr", "*.py"), ("python/src", "*.cpp"), ("python/src", "*.hpp"), ("tests/support", "**/*"),
    ("tests/unit", "*.cpp"), ("tests/unit", "*.hpp"),
)

# Engine unit tests still built on a protocol's fixtures while they are being rewritten on another
# branch. Each must still name its protocol (the test fails when one no longer does), so the set is
# emptied when that branch is merged.
KNOWN_UNTIL_MERGED: set[str] = set()


def common_prefix(names: list[str]) -> str:
    """The names' common prefix up to its last '_' ('' when that is too short to be distinctive)."""
    if len(names) < 2:
        return ""
    prefix = names[0]
    for name in names[1:]:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    prefix = prefix[:prefix.rfind("_") + 1]
    return prefix if len(prefix) >= 8 else ""


def distinctive_names(package: str) -> dict[str, re.Pattern]:
    """What names protocol `package` and nothing else, from its registry (spec/<id>.json) and its package
    name: description -> pattern. A protocol's *name* ("Elastic v1", spec/elastic-v1.md, a path into its
    folders) may appear anywhere; these may not."""
    registry = json.loads((REPO / "spec" / f"{package.replace('_', '-')}.json").read_text())
    library = registry.get("library", {})
    layouts = registry.get("layouts", {})
    symbols = sorted({library[k] for k in ("process_storage_symbol", "tls_symbol") if k in library} |
                     {v["symbol"] for v in layouts.values() if isinstance(v, dict) and "symbol" in v})
    env_vars = sorted(v["env"] for v in registry.get("config", {}).values() if isinstance(v, dict) and "env" in v)
    names: dict[str, re.Pattern] = {}
    for text in symbols + env_vars + [registry.get("attribute", {}).get("name", "")]:
        if text:
            names[text] = re.compile(re.escape(text))
    # The families the registry's names belong to (its symbols' and its variables' shared prefix).
    for family in (common_prefix(symbols), common_prefix(env_vars)):
        if family:
            names[family + "*"] = re.compile(r"\b" + re.escape(family) + r"\w")
    # The library's file name: the literal start of the basename its pattern matches.
    if "name_regex" in library:
        stem = re.match(r"[\w-]*", library["name_regex"].rsplit("/", 1)[-1]).group(0)
        if len(stem) >= 4:
            names[f"library {stem}*"] = re.compile(re.escape(stem))
    # Record types: each published layout (one with a symbol) by its C++ type name, e.g. tls_record -> TlsRecord*.
    for layout, value in layouts.items():
        if isinstance(value, dict) and "symbol" in value:
            type_name = "".join(part.capitalize() for part in layout.split("_"))
            names[type_name + "*"] = re.compile(r"\b" + type_name + r"\w*")
    # Its code: the C++ namespace and headers, the Python subpackage and bindings.
    names[f"{package}:: / namespace {package}"] = re.compile(rf"\b{package}::|\bnamespace (tracecorr::)?{package}\b")
    names[f'"{package}/..." include'] = re.compile(rf'["<]{package}/')
    names[f"tracecorr.{package} (Python)"] = re.compile(rf"\.{package}\b|\bimport {package}\b")
    return names


def engine_files() -> list[Path]:
    files = set()
    for folder, pattern in ENGINE_NAME_SCOPES:
        files |= {f for f in (REPO / folder).glob(pattern) if f.is_file() and "__pycache__" not in f.parts}
    return sorted(files)


def name_hits(path: Path, names: dict[str, re.Pattern]) -> list[tuple[str, int, str]]:
    """(file, line, what) for each name a line of `path` spells."""
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        return []
    return [(str(path.relative_to(REPO)), n, what) for n, line in enumerate(lines, 1)
            for what, pattern in names.items() if pattern.search(line)]


def package_files(package: str) -> list[Path]:
    """Protocol `package`'s own files: its registry and every folder named after it."""
    folders = [f for f in REPO.glob(f"*/**/{package}") if f.is_dir() and BUILD not in f.parents and f != BUILD]
    files = [REPO / "spec" / f"{package.replace('_', '-')}.json"]
    return files + sorted(f for folder in folders for f in folder.rglob("*") if f.is_file())


def test_no_file_outside_a_package_names_its_protocol():
    """The engine names no protocol's symbols, attribute, variables, record types or code: a protocol lives in its
    package folders (simulator/protocols/<p>/, probes/<p>/, python/src/<p>/, python/tracecorr/<p>/, ...)."""
    packages = protocol_names()
    assert packages, f"no protocol package under {PROTOCOLS}"
    files = engine_files()
    assert any(f.name == "protocol.hpp" for f in files) and any(f.name == "__init__.py" for f in files), files[:5]
    problems, still_known = [], set()
    for package in packages:
        names = distinctive_names(package)
        # Every name is spelled somewhere in the package itself, or its pattern would prove nothing.
        spelled = {what for f in package_files(package) for _, _, what in name_hits(f, names)}
        assert spelled == set(names), f"{package}: its own files never spell {sorted(set(names) - spelled)}"
        for f in files:
            hits = name_hits(f, names)
            relative = str(f.relative_to(REPO))
            if relative in KNOWN_UNTIL_MERGED:
                still_known |= {relative} if hits else set()
            else:
                problems += [f"{file}:{line}: {what}" for file, line, what in hits]
    assert not problems, "engine files that name a protocol's things:\n" + "\n".join(problems)
    assert KNOWN_UNTIL_MERGED <= still_known, (
        f"no longer name a protocol, remove from KNOWN_UNTIL_MERGED: {sorted(KNOWN_UNTIL_MERGED - still_known)}")


# ---- meaning: the engine speaks no package's vocabulary --------------------------------------------------------------
# The engine's C++ and BPF (what the issue calls the engine: no "transaction", no requirement ID, no area decided by
# name). A package's words are data it hands the engine (captions, areas, flags on requirements), never engine code.
ENGINE_VOCABULARY_SCOPES = ("simulator/src", "simulator/include", "simulator/cli", "bpf")

# Area names that are also the engine's own words (thread-local storage, the file format): the engine may say "TLS"
# and "ELF" as data (an ELF symbol's type), never a requirement ID of those areas.
ENGINE_TERMS = {"TLS", "ELF"}


def package_vocabulary(package: str) -> dict[str, re.Pattern]:
    """What only protocol `package` means, from its registry (spec/<id>.json): its requirement IDs (AREA-NN), its
    areas used as data (a quoted "AREA"), and its own concepts (the registry's `concepts`, in any spelling of an
    identifier: transaction, SeenTransaction, samples_without_transaction)."""
    registry = json.loads((SPECS / f"{package.replace('_', '-')}.json").read_text())
    words: dict[str, re.Pattern] = {}
    for area in registry["areas"]:
        words[f"requirement ID {area}-NN"] = re.compile(rf"\b{re.escape(area)}-\d\d\b")
        if area not in ENGINE_TERMS:
            words[f'area "{area}"'] = re.compile(rf"""["']{re.escape(area)}["']""")
    for concept in registry.get("concepts", []):
        words[f"concept {concept}"] = re.compile(re.escape(concept), re.IGNORECASE)
    return words


def engine_vocabulary_files() -> list[Path]:
    return sorted(f for folder in ENGINE_VOCABULARY_SCOPES for f in (REPO / folder).rglob("*") if f.is_file())


def vocabulary_hits() -> dict[str, set[str]]:
    """Engine file -> what package vocabulary it spells, for every package."""
    hits: dict[str, set[str]] = {}
    for package in protocol_names():
        words = package_vocabulary(package)
        for f in engine_vocabulary_files():
            for _, _, what in name_hits(f, words):
                hits.setdefault(str(f.relative_to(REPO)), set()).add(f"{package}: {what}")
    return hits


def test_every_package_lists_its_concepts_and_spells_them():
    """Each registry keeps its short list of concepts (possibly empty: a package whose every concept is the engine's),
    and its own files spell each, so the engine check below would see them."""
    for package in protocol_names():
        registry = json.loads((SPECS / f"{package.replace('_', '-')}.json").read_text())
        assert isinstance(registry.get("concepts"), list), f"spec/{package.replace('_', '-')}.json has no concepts list"
        words = {w: p for w, p in package_vocabulary(package).items() if w.startswith("concept ")}
        spelled = {what for f in package_files(package) if f.suffix != ".json" for _, _, what in name_hits(f, words)}
        assert spelled == set(words), f"{package}: its own files never spell {sorted(set(words) - spelled)}"


def test_no_engine_file_speaks_a_package_vocabulary():
    """The engine names no requirement ID, decides nothing by a package's area name and speaks no package's concepts
    (issue 26): what a requirement needs of the engine is data on it (judged_by_sending, timed_by_export)."""
    hits = vocabulary_hits()
    assert engine_vocabulary_files(), ENGINE_VOCABULARY_SCOPES
    problems = [f"{file}: {what}" for file, spelled in sorted(hits.items()) for what in sorted(spelled)]
    assert not problems, "engine files that speak a package's vocabulary:\n" + "\n".join(problems)
