"""A build of the OTel packages alone (TRACECORR_PROTOCOLS without elastic_v1) builds its CLI, and its
`tracecorr agent` samples an OTEP 4947 writer: the host agent is the engine's, not Elastic's (issue 26).

The build is configured beside the main one ($TRACECORR_BUILD-protocol-subset, through ccache: mostly cache
hits after the main build) and only its CLI is built; the writer is the main build's reference fixture (the
fixtures do not depend on which packages the CLI links). Slow: a configure and a link of its own.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from build_products import BUILD, HOST_ARCH, REPO
from fixture_process import WAIT_S
from thread_context_writer import held_writer

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the writer's x86-64 fixtures are the main build's")]

OTEL_ONLY = ["otel_process_context", "otel_thread_context", "otel_nodejs_thread_context"]
# Beside the main build, at the same depth: the compiler sees the same relative paths, so ccache (base_dir)
# serves the engine's objects the main build made.
SUBSET_BUILD = BUILD.parent / (BUILD.name + "-protocol-subset")
BUILD_TIMEOUT_S = 3600  # a cold cache on a loaded 2-CPU machine
DURATION_S = 2


def configure_and_build() -> None:
    launcher = ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] \
        if shutil.which("ccache") else []
    subprocess.run(["cmake", "-S", str(REPO), "-B", str(SUBSET_BUILD), "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DPython3_EXECUTABLE={os.environ.get('PYTHON', '/usr/bin/python3')}",
                    "-DTRACECORR_PROTOCOLS=" + ";".join(OTEL_ONLY), "-DTRACECORR_ARM64_FIXTURES=OFF",
                    *launcher], check=True, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    built = subprocess.run(["nice", "-n", "10", "ninja", "-C", str(SUBSET_BUILD), "tracecorr_cli"],
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]


@pytest.fixture(scope="module")
def otel_only_cli():
    try:
        configure_and_build()
    except subprocess.CalledProcessError as e:
        pytest.fail(f"configuring without elastic_v1 failed:\n{e.stdout[-4000:]}\n{e.stderr[-4000:]}")
    return SUBSET_BUILD / "bin" / "tracecorr"


def test_the_otel_only_cli_links_no_elastic_package(otel_only_cli):
    cache = (SUBSET_BUILD / "CMakeCache.txt").read_text()
    assert "TRACECORR_PROTOCOLS:STRING=" + ";".join(OTEL_ONLY) in cache
    listed = subprocess.run([str(otel_only_cli), "list", "--json"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    registries = [r["protocol"] for r in json.loads(listed.stdout)]
    assert sorted(registries) == ["opentelemetry-nodejs-thread-context", "opentelemetry-process-context",
                                  "opentelemetry-thread-context"], registries
    # Elastic's options come with its hook: without the package, the command has none of them.
    help_text = subprocess.run([str(otel_only_cli), "agent", "--help"], capture_output=True, text=True, timeout=60)
    assert "--pid" in help_text.stdout and "--samples-delay-ms" not in help_text.stdout, help_text.stdout


def test_the_otel_only_agent_samples_a_thread_context_writer(otel_only_cli, tmp_path):
    with held_writer("tlsdesc", {}, tmp_path / "journal.jsonl", 1) as (process, published):
        r = subprocess.run([str(otel_only_cli), "agent", "--pid", str(process.proc.pid), "--reader", "ptrace",
                            "--duration", str(DURATION_S), "--json", "-"],
                           capture_output=True, text=True, timeout=DURATION_S + WAIT_S)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert [p["protocol"] for p in summary["processes"]] == ["otel-thread-context"], summary["processes"]
    threads = {t["tid"]: t for t in summary["processes"][0]["threads"]}
    (tid, meant), = published.items()
    record = threads[tid]["records"][0]["record"]
    assert threads[tid]["statuses"] == {"record": threads[tid]["samples"]} and threads[tid]["samples"] > 0
    assert (record["trace_id"], record["span_id"]) == (meant["trace_id"], meant["span_id"])
