"""A build of the OTel packages alone (TRACECORR_PROTOCOLS without elastic_v1) builds its CLI, and its
`tracecorr agent` samples an OTEP 4947 writer: the host agent is the engine's, not Elastic's (issue 26).

Two halves, neither a second compile of the engine (a whole CLI from cold is minutes of a CI's two CPUs):
- the link: the main build links the engine's commands with every package but Elastic's
  (bin/tracecorr-without-elastic_v1, simulator/CMakeLists.txt), from the same objects as `tracecorr`; a
  reference to Elastic code anywhere in the engine or the OTel packages fails that link, and this test
  runs the program;
- the configuration: a build of that list is configured beside the main one and ninja plans its CLI
  (`ninja -n`): every source it needs exists and no rule names an Elastic target.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from build_products import BUILD, HOST_ARCH, REPO, need
from fixture_process import WAIT_S
from thread_context_writer import held_writer

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the writer's x86-64 fixtures are the main build's")]

OTEL_ONLY = ["otel_process_context", "otel_thread_context", "otel_nodejs_thread_context"]
SUBSET_BUILD = BUILD.parent / (BUILD.name + "-protocol-subset")
CONFIGURE_TIMEOUT_S = 600
DURATION_S = 2


@pytest.fixture(scope="module")
def otel_only_cli():
    return need(BUILD / "bin" / "tracecorr-without-elastic_v1")


def test_a_build_of_the_otel_packages_alone_configures_and_plans_its_cli():
    configured = subprocess.run(
        ["cmake", "-S", str(REPO), "-B", str(SUBSET_BUILD), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
         f"-DPython3_EXECUTABLE={os.environ.get('PYTHON', '/usr/bin/python3')}",
         "-DTRACECORR_PROTOCOLS=" + ";".join(OTEL_ONLY), "-DTRACECORR_ARM64_FIXTURES=OFF"],
        capture_output=True, text=True, timeout=CONFIGURE_TIMEOUT_S)
    assert configured.returncode == 0, configured.stdout[-4000:] + configured.stderr[-4000:]
    cache = (SUBSET_BUILD / "CMakeCache.txt").read_text()
    assert "TRACECORR_PROTOCOLS:STRING=" + ";".join(OTEL_ONLY) in cache
    # Every command its CLI needs (a dry run would stop at the globs' check, which always runs), and each
    # source of the repository a compile names exists.
    planned = subprocess.run(["ninja", "-C", str(SUBSET_BUILD), "-t", "commands", "tracecorr_cli"],
                             capture_output=True, text=True, timeout=CONFIGURE_TIMEOUT_S)
    assert planned.returncode == 0, planned.stdout[-4000:] + planned.stderr[-4000:]
    assert "elastic_v1" not in planned.stdout, [l for l in planned.stdout.splitlines() if "elastic_v1" in l][:5]
    sources = [line.split(" -c ")[-1].split()[0] for line in planned.stdout.splitlines() if " -c " in line]
    in_repo = [Path(src) for src in sources if not Path(src).is_relative_to(SUBSET_BUILD)]  # not generated
    assert in_repo and not [src for src in in_repo if not src.exists()]
    assert "tracecorr_cli_commands" in planned.stdout  # the engine's commands, as the main build compiles them


def test_the_cli_without_elastic_registers_the_otel_packages_alone(otel_only_cli):
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
