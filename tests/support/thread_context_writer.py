"""The OTEP 4947 reference writer (fixtures/otel_thread_context) as the
sampler and agent tests run it: in one TLS model, every worker holding one
published record (`--hold`), its journal read back.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterator

import pytest

from build_products import BUILD, HOST_ARCH, need, package_fixture_program
from fixture_process import FixtureProcess

PACKAGE = "otel_thread_context"
PROGRAM = "otel-tctx-writer"
DYNAMIC_TLS = {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=0"}


def models_built() -> set[str]:
    listing = need(BUILD / "fixtures" / HOST_ARCH / PACKAGE / "reference" / "models.json")
    return set(json.loads(listing.read_text())["models"])


@contextlib.contextmanager
def held_writer(model: str, env: dict[str, str], journal: Path,
                threads: int) -> Iterator[tuple[FixtureProcess, dict[int, dict]]]:
    """The writer in `model` (skipped when not built) with `threads` workers,
    each holding its record: yields the process and the journal's record
    events by tid; stops the process group on the way out."""
    if model not in models_built():
        pytest.skip(f"{model} was not built (fixtures/otel_thread_context/README.md, Models)")
    program = need(package_fixture_program(PACKAGE, PROGRAM, HOST_ARCH).parent / model / PROGRAM)
    # Burning throughout: the BPF sampler samples on cpu-clock, so only a running thread is read.
    process = FixtureProcess([str(program), "--threads", str(threads), "--hold", "--busy-percent", "100"], journal,
                             dict(os.environ, **env))
    try:
        process.read_line()  # its first line: the process started
        process.wait_journal("ready", 1)
        yield process, {e["tid"]: e for e in process.wait_journal("record", threads)}
    finally:
        process.stop()
