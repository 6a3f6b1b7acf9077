"""The mutant fixtures are built as listed in fixtures/elastic_v1/mutants/mutants.json and
their library variants carry exactly the ELF defect they claim."""
import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from build_products import fixture_dir, fixture_program, need
from test_fixture_reference import (ARCHES, REGISTRY, WORKLOAD, correlation, registration,
                                    wait_open_transaction)
from test_fixture_reference import receiver, run_fixture  # noqa: F401  (pytest fixtures)

MUTANTS = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "elastic_v1" / "mutants" / "mutants.json").read_text())
LIBRARY_ARCH = {"x86_64": "x64", "arm64": "arm64"}
REGISTRY_ARCH = {"x86_64": "x86_64", "arm64": "aarch64"}
READELF = shutil.which("readelf")


def arch_dir(arch):
    need(fixture_program(arch))
    return fixture_dir(arch)


@pytest.mark.parametrize("arch", ARCHES)
def test_every_mutant_is_built(arch):
    d = arch_dir(arch)
    conforming = f"elastic-jvmti-linux-{LIBRARY_ARCH[arch]}.so"
    assert (d / "reference" / conforming).exists()
    for m in MUTANTS["mutants"]:
        assert m["requirement"] in {r["id"] for r in REGISTRY["requirements"]}, m
        mdir = d / "mutants" / m["name"]
        assert (mdir / "tracecorr-fixture").exists(), mdir
        assert (mdir / m.get("library_file", conforming)).exists(), mdir


def symbols(library):
    out = subprocess.run([READELF, "-sW", "--dyn-syms", str(library)], capture_output=True, text=True,
                         check=True).stdout
    table = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[7] in (REGISTRY["library"]["process_storage_symbol"], REGISTRY["library"]["tls_symbol"]):
            table[cols[7]] = (int(cols[2], 0), cols[3], cols[4])
    return table


def relocations(library):
    return subprocess.run([READELF, "-rW", str(library)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("arch", ARCHES)
def test_library_variants_have_their_defect(arch):
    if READELF is None:
        pytest.skip("readelf not installed")
    d = arch_dir(arch)
    lib = f"elastic-jvmti-linux-{LIBRARY_ARCH[arch]}.so"
    storage, tls = REGISTRY["library"]["process_storage_symbol"], REGISTRY["library"]["tls_symbol"]
    size = REGISTRY["library"]["pointer_size"]
    dialect = REGISTRY["library"]["tls_dialects"][REGISTRY_ARCH[arch]]

    reference = d / "reference" / lib
    assert symbols(reference) == {storage: (size, "OBJECT", "GLOBAL"), tls: (size, "TLS", "GLOBAL")}
    relocs = relocations(reference)
    assert dialect["descriptor_relocation"] in relocs
    assert not any(r in relocs for r in dialect["traditional_relocations"])

    assert symbols(d / "mutants" / "storage-symbol-wrong-size" / lib)[storage] == (4, "OBJECT", "GLOBAL")
    assert symbols(d / "mutants" / "tls-not-thread-local" / lib)[tls] == (size, "OBJECT", "GLOBAL")
    traditional = relocations(d / "mutants" / "traditional-tls" / lib)
    assert dialect["descriptor_relocation"] not in traditional
    assert any(r in traditional for r in dialect["traditional_relocations"])


def test_count_zero_crashes_only_the_mutant(run_fixture, receiver):
    """MSG-07: the reference survives count 0; the crash-on-count-zero mutant aborts."""
    for variant, survives in (("reference", True), ("crash-on-count-zero", False)):
        fixture = run_fixture("x86_64", receiver, WORKLOAD, variant=variant)
        fixture.send(registration(100, ""))
        tx = wait_open_transaction(fixture)
        fixture.send(correlation(bytes.fromhex(tx["trace_id"]), bytes.fromhex(tx["span_id"]), bytes(16), 0))
        if survives:
            fixture.wait_for(lambda: [e for e in fixture.events("message") if e["kind"] == "correlation"],
                             "the count-0 correlation")
            assert fixture.stop() == 0
        else:
            fixture.proc.wait(timeout=20)
            assert fixture.proc.returncode == -signal.SIGABRT

