"""What the arm64 VM tests share: the arm64 payload and where it comes from,
one guest boot for all of them (tests/arm64/arm64_guest.py), and the guest's
result sections read back as the conform tests know them.

One boot: each VM test module registers its jobs when it is imported
(register_jobs), and the first test that asks for the guest (the session
fixture arm64_vm_run in tests/py/conftest.py) boots it once with the jobs of
every module that has a test selected in this pytest run. An emulated boot
costs about 20 s of a CPU.

Inputs (each overridable by environment):
  TRACECORR_ARM64_GUEST     kernel + busybox from scripts/arm64/prepare.sh (build-arm64-guest/)
  TRACECORR_ARM64_SYSROOT   arm64 shared libraries (build-arm64-sysroot/)
  TRACECORR_ARM64_TRACECORR arm64 tracecorr (build-arm64/bin/tracecorr, from scripts/arm64/build-tracecorr.sh)
  TRACECORR_ARM64_FIXTURE_DIR  arm64 Elastic reference fixture ($TRACECORR_BUILD/fixtures/arm64/reference,
                            from the normal build; else build-arm64/fixtures/arm64/reference)
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

import conform_support as cs

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests/arm64"))
import arm64_guest  # noqa: E402

# The kill matrix's arch column for runs on the arm64 kernel in qemu-system-aarch64.
KILL_MATRIX_ARCH = "arm64-vm"
# The writers conform judges in the guest burn 5 % of each span, not their default 25: every busy cycle is
# emulated, and the guest's readers (ptrace's sampler, the watchpoints) stop threads by the wall clock,
# running or not. The CPU they leave goes to tracecorr and the other job, which beside a busy host left
# 3 and 4 of a boot's runs short of updates (TLS-04, TCTX-08) and run again (BENCHMARKS.md). The
# profiler-mode stage and the BPF sampling job keep their writers busy: a cpu-clock sampler needs them on a CPU.
WRITER_BUSY = ["--busy-percent", "5"]
# Where the one boot keeps its initramfs and console log.
WORK_DIR = REPO / "build-arm64-vm"


def job_name(family: str, run: str) -> str:
    """A guest job's name (its folder and result sections): `family`_`run`,
    the run's "-" and ":" made "_" (shell- and section-safe)."""
    return f"{family}_" + run.replace(":", "_").replace("-", "_")


def env_path(name: str, default: Path) -> Path:
    return Path(os.environ[name]) if os.environ.get(name) else default


def arm64_tracecorr() -> Path:
    return env_path("TRACECORR_ARM64_TRACECORR",
                    env_path("TRACECORR_ARM64_BUILD", REPO / "build-arm64") / "bin/tracecorr")


def elastic_fixture_dir() -> Path:
    if os.environ.get("TRACECORR_ARM64_FIXTURE_DIR"):
        return Path(os.environ["TRACECORR_ARM64_FIXTURE_DIR"])
    native = env_path("TRACECORR_BUILD", REPO / "build") / "fixtures/arm64/reference"
    cross = env_path("TRACECORR_ARM64_BUILD", REPO / "build-arm64") / "fixtures/arm64/reference"
    return native if native.is_dir() or not cross.is_dir() else cross


def missing_payload(elastic_fixture: bool = True) -> list[str]:
    """What is not built, each with the command that builds it."""
    problems = []
    tracecorr = arm64_tracecorr()
    if not tracecorr.is_file():
        problems.append(f"arm64 tracecorr {tracecorr} is not built: run scripts/arm64/build-tracecorr.sh")
    fixture = elastic_fixture_dir() / arm64_guest.FIXTURE_EXECUTABLE
    if elastic_fixture and not fixture.is_file():
        problems.append(f"arm64 reference fixture {fixture} is not built: run scripts/setup.sh --tests (the normal build "
                        "cross-builds fixtures/ for arm64)")
    return problems


# The emulated boot's share of the guest's time limit.
BOOT_BUDGET_S = 120


def boot(work_dir: Path, jobs: list, timeout_s: float, elastic_fixture: bool = False) -> arm64_guest.BootResult:
    """Boots the guest with the capability check, `jobs` and (`elastic_fixture`)
    the Elastic BPF scenario; fails the calling test, with the console's tail,
    when the guest cannot be booted or does not reach the end of /init."""
    guest = arm64_guest.DEFAULT_GUEST
    for needed in (guest / "Image", guest / "busybox"):
        if not needed.is_file():
            pytest.fail(f"{needed} missing: run scripts/arm64/prepare.sh (as root) to fetch the pinned arm64 "
                        "kernel and busybox", pytrace=False)
    work_dir.mkdir(parents=True, exist_ok=True)
    # Without the payload the guest still boots with the capability check, so a
    # smoke test reports on the VM even when the scenario cannot run.
    full = not missing_payload(elastic_fixture)
    initrd = arm64_guest.build_initramfs(
        work_dir / "initramfs.cpio", guest, arm64_guest.DEFAULT_SYSROOT,
        arm64_tracecorr() if full else None, elastic_fixture_dir() if full and elastic_fixture else None,
        jobs if full else [])
    result = arm64_guest.boot(initrd, guest / "Image", timeout_s, work_dir / "console.log")
    if result.timed_out:
        pytest.fail(f"qemu-system-aarch64 did not finish within {timeout_s}s; console tail:\n{result.tail()}",
                    pytrace=False)
    if not result.finished:
        pytest.fail(f"the guest stopped before the end of /init; console tail:\n{result.tail()}", pytrace=False)
    if result.undecodable:
        pytest.fail(f"corrupt result sections {result.undecodable}; console tail:\n{result.tail()}", pytrace=False)
    print(f"arm64 guest ran {result.seconds:.1f}s")
    return result


def section_text(result: arm64_guest.BootResult, name: str) -> str:
    return result.sections.get(name, b"").decode(errors="replace")


def section_json(result: arm64_guest.BootResult, name: str):
    assert name in result.sections, f"the guest printed no '{name}' section; console tail:\n{result.tail()}"
    text = section_text(result, name)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        pytest.fail(f"'{name}' section is not JSON ({e}):\n{text[:2000]}", pytrace=False)


def conform_run(result: arm64_guest.BootResult, job: arm64_guest.ConformJob) -> cs.ConformRun:
    """A conform run of the guest as the conform tests know it (report, exit code, output)."""
    log = section_text(result, f"{job.section}_log")
    rc, _, seconds = section_text(result, f"{job.section}_rc").strip().partition(" ")
    report_text = section_text(result, job.section)
    report = json.loads(report_text) if report_text.strip() else None
    return cs.ConformRun(["(in the guest)", *job.argv()], int(rc) if rc.isdigit() else -1, report, log, log,
                         float(seconds) if seconds.isdigit() else 0.0, Path(job.guest_report()), None)


@dataclass(frozen=True)
class ModuleJobs:
    """What one test module runs in the shared guest."""
    jobs: Callable[[], list]  # its ConformJobs and ProfilerJobs (called once, at boot)
    budget_s: float           # its share of the guest's time limit (the limit only bounds a hang)
    elastic_fixture: bool = False  # it reads the Elastic BPF scenario


_registered: dict[str, ModuleJobs] = {}
_booted: arm64_guest.BootResult | None = None


def register_jobs(module: str, jobs: ModuleJobs) -> None:
    """`module` (its __name__) runs `jobs` in the shared guest."""
    _registered[module] = jobs


def shared_boot(selected_modules: set[str]) -> arm64_guest.BootResult:
    """The one boot of this pytest run, with the jobs of the registered modules
    among `selected_modules` (those that have a test selected)."""
    global _booted
    if _booted is None:
        chosen = [j for module, j in sorted(_registered.items()) if module in selected_modules]
        jobs = [job for j in chosen for job in j.jobs()]
        conform_runs = sum(isinstance(job, arm64_guest.ConformJob) for job in jobs)
        started = time.monotonic()
        _booted = boot(WORK_DIR, jobs, BOOT_BUDGET_S + sum(j.budget_s for j in chosen),
                       elastic_fixture=any(j.elastic_fixture for j in chosen))
        cs.KILL_MATRIX.time(f"{KILL_MATRIX_ARCH} guest ({conform_runs} conform runs)", time.monotonic() - started)
    return _booted
