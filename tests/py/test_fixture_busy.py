"""The bundled writers take their default busy share from TRACECORR_FIXTURE_BUSY_PERCENT
(fixtures/common/fixture_busy.h): conform_support.WRITER_ENV lowers it to 5 % for the
conform runs, whose ptrace sessions stop threads by the wall clock. A value the
fixture ignored would spend the CI's CPU unseen; one it misread would burn the
wrong share. Both fixtures that burn (Elastic's reference, OTEP 4947's writer)
are checked: the share they burn follows the variable, and a bad value is refused.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from build_products import HOST_ARCH, fixture_program, need, package_fixture_program

pytestmark = pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the x86-64 fixtures are the main build's")

VARIABLE = "TRACECORR_FIXTURE_BUSY_PERCENT"
RUN_S = 2
WRITERS = {
    "elastic-reference": lambda: fixture_program("x86_64"),
    "otel-tctx-writer": lambda: package_fixture_program("otel_thread_context", "tlsdesc/otel-tctx-writer", "x86_64"),
}


def cpu_seconds(program, busy: str) -> float:
    """The CPU one writer thread's spans took in RUN_S seconds, its default busy share set to `busy`."""
    before = os.times()
    run = subprocess.run([str(need(program())), "--threads", "1", "--duration", str(RUN_S)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, VARIABLE: busy})
    after = os.times()
    assert run.returncode == 0, run.stderr[-2000:]
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_the_default_busy_share_follows_the_variable(writer):
    """Measured in one run, as a ratio: 100 % burns every span throughout, 0 % sleeps through them."""
    burning = cpu_seconds(WRITERS[writer], "100")
    sleeping = cpu_seconds(WRITERS[writer], "0")
    assert burning > 4 * sleeping, f"{writer}: {burning:.2f} CPU-s at 100 %, {sleeping:.2f} at 0 %"


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("value", ["x", "101", "-5", "5%"])
def test_a_bad_value_is_refused_by_name(writer, value):
    run = subprocess.run([str(need(WRITERS[writer]())), "--threads", "1", "--duration", "1"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, VARIABLE: value})
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert VARIABLE in run.stderr and f"'{value}'" in run.stderr, run.stderr[-2000:]
