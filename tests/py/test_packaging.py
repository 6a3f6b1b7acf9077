"""What the Debian packages and the wheel are made of (cmake/Package.cmake,
scripts/package.sh), checked on the build's own install tree: the layout
the packages install, the stripped CLI and its debug link, the fixtures of
every protocol (their DWARF gone, their symbols kept), the man pages of every
subcommand, the bash completion, and the wheel made from the same module.

The packages themselves, installed on a clean Debian root, are
tests/install/test_deb_in_clean_root.sh's (minutes: it downloads a root).
"""
from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from build_products import BUILD, HOST_ARCH, TRACECORR, need

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
MAX_CLI_BYTES = 20 * 1024 * 1024
# Each protocol's fixtures folder (relative to fixtures/<arch>/) and program.
FIXTURE_FOLDERS = {"": "tracecorr-fixture", "otel_process_context": "otel-ctx-writer",
                   "otel_thread_context": "otel-tctx-writer"}


def _sections(path: Path) -> set[str]:
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\]\s+(\.\S+)", out))


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def _subcommands() -> list[str]:
    out = subprocess.run([str(need(TRACECORR)), "--help"], capture_output=True, text=True, check=True).stdout
    return re.findall(r"^  ([a-z][a-z0-9-]*)  ", out.split("Subcommands:", 1)[1], re.M)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The packages' files as `cmake --install` lays them out, under <tmp>/usr: tracecorr's and
    python3-tracecorr's (tracecorr-dbgsym's are the split debug files, read where they are made)."""
    need(BUILD / "dist" / "bin" / "tracecorr")
    root = tmp_path_factory.mktemp("install")
    for component in ("cli", "python"):
        r = subprocess.run(["cmake", "--install", str(BUILD), "--component", component, "--prefix",
                            str(root / "usr")], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return root / "usr"


def test_cli_is_stripped_with_a_debug_link(installed):
    cli = installed / "bin" / "tracecorr"
    assert cli.stat().st_size <= MAX_CLI_BYTES, cli.stat().st_size
    sections = _sections(cli)
    assert ".debug_info" not in sections and ".gnu_debuglink" in sections, sections
    # The debug file keeps what the build had: its DWARF (a main-job build has none:
    # scripts/setup.sh) and its symbol table.
    debug = _sections(BUILD / "dist" / "debug" / "bin" / "tracecorr.debug")
    built = _sections(TRACECORR)
    assert ".symtab" in debug
    assert (".debug_info" in debug) == (".debug_info" in built), (built, debug)
    r = subprocess.run([str(cli), "--version"], capture_output=True, text=True)
    version = re.search(r"project\(tracecorr VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
    assert r.stdout.strip() == f"tracecorr {version}"


def test_every_protocols_fixtures_installed_without_dwarf(installed):
    fixtures = installed / "lib" / "tracecorr" / "fixtures"
    for folder, program in FIXTURE_FOLDERS.items():
        built = BUILD / "fixtures" / HOST_ARCH / folder
        mutants = json.loads((built / "mutants" / "mutants.json").read_text())["mutants"]
        for m in mutants:
            assert (fixtures / folder / "mutants" / m["name"] / program).exists(), (folder, m["name"])
        assert (fixtures / folder / "mutants" / "mutants.json").exists()
    assert (fixtures / "reference" / "tracecorr-fixture").exists()
    assert (fixtures / "otel_process_context" / "reference" / "otel-ctx-writer").exists()
    models = json.loads((fixtures / "otel_thread_context" / "reference" / "models.json").read_text())["models"]
    for model in models:
        assert (fixtures / "otel_thread_context" / "reference" / model / "otel-tctx-writer").exists(), model
    elves = [p for p in fixtures.rglob("*") if p.is_file() and _is_elf(p)]
    assert elves
    for path in elves:
        sections = _sections(path)
        assert not any(s.startswith(".debug_") for s in sections), path
        assert str(BUILD) not in path.read_bytes().decode("latin-1"), f"{path} names the build tree"
    # Symbols stay: the unexported-symbol mutant keeps its local symbol in .symtab.
    hidden = fixtures / "otel_thread_context" / "mutants" / "symbol-not-exported" / "libotel-tctx-writer.so"
    assert ".symtab" in _sections(hidden)


def test_no_installed_file_names_the_build_tree(installed):
    for path in installed.rglob("*"):
        if path.is_symlink():
            assert str(BUILD) not in os.readlink(path) and str(REPO) not in os.readlink(path), path
        elif path.is_file():
            text = path.read_bytes().decode("latin-1")
            assert str(BUILD) not in text, f"{path} names {BUILD}"


def test_bpf_objects_installed(installed):
    objects = sorted(p.name for p in (installed / "lib" / "tracecorr" / "bpf").glob("*.bpf.o"))
    assert "sampler.bpf.o" in objects, objects


def test_man_page_for_every_subcommand(installed):
    man = installed / "share" / "man" / "man1"
    pages = {"tracecorr": None, **{f"tracecorr-{sub}": sub for sub in _subcommands()}}
    assert sorted(p.name for p in man.glob("*.1.gz")) == sorted(f"{page}.1.gz" for page in pages)
    for page, sub in pages.items():
        roff = gzip.decompress((man / f"{page}.1.gz").read_bytes()).decode()
        assert f'.TH {page.upper()} "1"' in roff, page
        assert str(BUILD) not in roff and str(REPO) not in roff, page
        if sub:
            help_text = subprocess.run([str(TRACECORR), sub, "--help"], capture_output=True, text=True).stdout
            for option in re.findall(r"^\s+(--[a-z][a-z0-9-]*)", help_text, re.M):
                assert option.replace("-", r"\-") in roff or option in roff, (page, option)


def _complete(words: list[str]) -> list[str]:
    script = (f"source {REPO / 'packaging' / 'bash-completion' / 'tracecorr'}\n"
              f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
              "_tracecorr; printf '%s\\n' \"${COMPREPLY[@]}\"")
    env = dict(os.environ, PATH=f"{TRACECORR.parent}:{os.environ['PATH']}")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if line]


def test_bash_completion_reads_the_cli():
    need(TRACECORR)
    assert _complete(["tracecorr", "con"]) == ["conform"]
    assert sorted(_complete(["tracecorr", ""])) == sorted(_subcommands())
    assert "--junit" in _complete(["tracecorr", "conform", "--ju"])
    assert "--version" in _complete(["tracecorr", "--v"])
    assert _complete(["tracecorr", "inspect", "--js"]) == ["--json"]
    # After --: the agent's command line, a command first.
    assert "bash" in _complete(["tracecorr", "conform", "--", "bas"])


def test_python_component_registers_the_plugin(installed):
    site = installed / "lib" / "python3" / "dist-packages"
    (dist_info,) = site.glob("tracecorr-*.dist-info")
    assert "tracecorr = tracecorr.pytest_plugin" in (dist_info / "entry_points.txt").read_text()
    module = list((site / "tracecorr").glob("_tracecorr*.so"))
    assert len(module) == 1 and ".debug_info" not in _sections(module[0])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    r = subprocess.run([SYSTEM_PYTHON, "-c", "import tracecorr, importlib.metadata as md; print(tracecorr.__file__); "
                        "print([e.value for e in md.entry_points(group='pytest11') if e.name == 'tracecorr'])"],
                       cwd="/tmp", capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(site / "tracecorr" / "__init__.py"), "['tracecorr.pytest_plugin']"]


def test_wheel_from_the_built_module(tmp_path):
    """The wheel scripts/package.sh makes: the stripped module of the build, no compiler run."""
    suffix = subprocess.run([SYSTEM_PYTHON, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    module = need(BUILD / "dist" / "python" / f"_tracecorr{suffix}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TRACECORR_PREBUILT_EXTENSION=str(module), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_BREAK_SYSTEM_PACKAGES="1")
    r = subprocess.run([SYSTEM_PYTHON, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--wheel-dir",
                        str(tmp_path / "wheels"), str(REPO)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = (tmp_path / "wheels").glob("tracecorr-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "tracecorr = tracecorr.pytest_plugin" in z.read(entry_points).decode()
        (so,) = [n for n in names if n.startswith("tracecorr/_tracecorr") and n.endswith(".so")]
        assert z.getinfo(so).file_size == module.stat().st_size
        assert "tracecorr/pytest_plugin.py" in names and "tracecorr/_tracecorr/__init__.pyi" in names
    r = subprocess.run([SYSTEM_PYTHON, "-m", "pip", "install", "--no-deps", "--prefix", str(tmp_path / "prefix"),
                        str(wheel)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (package,) = (tmp_path / "prefix").rglob("tracecorr/__init__.py")
    env["PYTHONPATH"] = str(package.parent.parent)
    r = subprocess.run([SYSTEM_PYTHON, "-m", "pytest", "--help"], cwd="/tmp", env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--tracecorr-cmd" in r.stdout
