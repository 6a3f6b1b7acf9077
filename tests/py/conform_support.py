"""Helpers for the `tracecorr conform` tests: running the command line, reading
its JSON report, the mutant list and the kill matrix.

Build outputs: see tests/support/build_products.py.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from build_products import BUILD, REGISTRY, REPO, TRACECORR, fixture_dir, fixture_program, missing_reason  # noqa: F401


def _requirement_levels() -> dict[str, str]:
    """The level of every requirement of every protocol registry in spec/
    (requirement IDs are unique across packages)."""
    levels = {}
    for path in sorted((REPO / "spec").glob("*.json")):
        document = json.loads(path.read_text())
        if isinstance(document.get("requirements"), list) and "protocol" in document:
            levels.update({r["id"]: r["level"] for r in document["requirements"]})
    return levels


LEVELS = _requirement_levels()
QEMU = shutil.which("qemu-aarch64")
AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"

# Exit codes of tracecorr conform.
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_ENVIRONMENT = 0, 1, 2, 3

# Bounds a hung run (a session stuck on its target), not a slow one: a full
# x86-64 run takes ~15 s, an arm64 one under qemu-user about three times that.
RUN_TIMEOUT_S = 300


def launches(protocol: str) -> dict[str, list[str]]:
    """{requirement: the sessions `conform --only ID` launches for it}, as
    `tracecorr list --json` says: kill matrices start the longest runs first."""
    listed = json.loads(subprocess.run([str(TRACECORR), "list", "--json", "--protocol", protocol], capture_output=True,
                                       text=True, check=True, timeout=60).stdout)
    return {r["id"]: r["sessions"] for r in listed["requirements"]}


def load_mutants(arch: str) -> list[dict]:
    """The mutants built for `arch`, from the build's copy of mutants.json
    (every entry, library variants included, names its one requirement)."""
    return json.loads((fixture_dir(arch) / "mutants" / "mutants.json").read_text())["mutants"]


def expected_violation_verdict(requirement: str, strict: bool) -> str:
    """What conform reports for a violated requirement: a MUST fails; a SHOULD
    warns, and fails under --strict; a MAY only ever warns."""
    level = LEVELS[requirement]
    if level == "MUST" or (level == "SHOULD" and strict):
        return "fail"
    return "warn"


def expected_violation_exit(requirement: str, strict: bool) -> int:
    return EXIT_FAILURE if expected_violation_verdict(requirement, strict) == "fail" else EXIT_OK


@dataclasses.dataclass
class ConformRun:
    argv: list[str]
    returncode: int
    report: dict | None
    stdout: str
    stderr: str
    seconds: float
    json_path: Path
    junit_path: Path | None
    # Earlier attempts that ended inconclusive (run_conform's retry_inconclusive):
    # "verdict: reason" of each inconclusive requirement, per attempt.
    inconclusive_attempts: list[list[str]] = dataclasses.field(default_factory=list)

    def result(self, requirement: str) -> dict:
        assert self.report is not None, f"no JSON report (exit {self.returncode}):\n{self.stderr[-3000:]}"
        for r in self.report["results"]:
            if r["id"] == requirement:
                return r
        raise AssertionError(f"{requirement} not in the report of {' '.join(self.argv)}")

    def verdict(self, requirement: str) -> str:
        return self.result(requirement)["verdict"]

    def verdicts(self) -> dict[str, str]:
        return {r["id"]: r["verdict"] for r in (self.report or {}).get("results", [])}

    def explain(self, requirement: str | None = None) -> str:
        """Enough of the run to see why a verdict is what it is."""
        lines = [f"$ {' '.join(self.argv)}", f"exit {self.returncode} after {self.seconds:.1f} s"]
        if self.report:
            for r in self.report["results"]:
                if requirement is None or r["id"] == requirement:
                    lines.append(f"{r['id']} {r['verdict']}: {r['reason']}")
                    for e in r.get("evidence", [])[:2]:
                        lines.append(f"    {e.get('label')}: expected {e.get('expected')!r}, actual {e.get('actual')!r}")
        for i, attempt in enumerate(self.inconclusive_attempts, 1):
            lines.append(f"attempt {i} was inconclusive: " + "; ".join(attempt))
        lines.append("stderr: " + self.stderr[-2000:])
        return "\n".join(lines)


# How often a conformance test runs conform again when a busy machine left it
# inconclusive (TRACECORR_INCONCLUSIVE_RETRIES; 0 shows every such verdict).
INCONCLUSIVE_RETRIES = int(os.environ.get("TRACECORR_INCONCLUSIVE_RETRIES", "2"))


def inconclusive_results(report: dict | None) -> list[str]:
    """The inconclusive (error) verdicts of a report that has no fail or warn:
    what a busy machine makes of a run, never a judgement against the agent.
    And, in a run that judged nothing, its skips when the agent's exports were
    lost on the way (an exporter that gave up on a connection the busy receiver
    had not accepted yet): the ids they carried are not judged, so the rules
    asked for may have had nothing to judge. (Not in a run that judged: a MAY
    is always a skip, and every such run losing an export would run three times.)"""
    if report is None:
        return []
    verdicts = [r["verdict"] for r in report["results"]]
    if "fail" in verdicts or "warn" in verdicts:
        return []
    lost = sum(v for k, v in report.get("counters", {}).items() if k.startswith("exports_lost."))
    judged_nothing = "pass" not in verdicts
    undecided = ("error", "skip") if lost and judged_nothing else ("error",)
    return [f"{r['id']} {r['verdict']}: {r['reason'][:300]}" + (f" ({lost} exports lost)" if r["verdict"] == "skip" else "")
            for r in report["results"] if r["verdict"] in undecided]


# Sessions a full run (no --only) overlaps, when set: scripts/test.sh sets 2 when it found the CPUs
# idle and runs its pytest processes side by side. Conform's own default goes by the load average,
# which those processes of mostly sleeping targets keep at the CPU count: every full run would then take
# its sessions one after another (19.5 s for the Elastic reference instead of 7).
SESSION_JOBS = os.environ.get("TRACECORR_TEST_CONFORM_SESSION_JOBS", "")

# The bundled writers' default busy share in these runs (fixtures/common/fixture_busy.h),
# instead of their 25 %: conform's sessions stop a writer's threads by the wall clock,
# running or not, so what a writer burns only spends the CPUs the tests share. A
# full run of the Elastic reference took 5.3 CPU-s instead of 9.0, with the same
# verdicts. A run's own `env` may set it back.
# TRACECORR_TEST_WRITER_BUSY_PERCENT sets another (25: the fixtures' own, for an A/B).
WRITER_ENV = {"TRACECORR_FIXTURE_BUSY_PERCENT": os.environ.get("TRACECORR_TEST_WRITER_BUSY_PERCENT", "5")}


def run_conform(command: list[str], only: list[str] | None = None, *, strict: bool = False,
                gdbstub: str | None = None, out_dir: Path | None = None, junit: bool = False,
                env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT_S,
                extra_args: list[str] | None = None, retry_inconclusive: int = 0,
                protocol: str | None = None) -> ConformRun:
    """One conform run (of `protocol`'s suite: --protocol; None: conform's
    default). retry_inconclusive: run again, up to that many times,
    while the only non-passes are inconclusive verdicts (the environment was
    too noisy to tell, and said so); a pass, fail or warn ends the retries, and
    every earlier attempt stays in the result's inconclusive_attempts."""
    earlier: list[list[str]] = []
    while True:
        run = _run_conform_once(command, only, strict=strict, gdbstub=gdbstub, out_dir=out_dir, junit=junit,
                                env=env, timeout=timeout, extra_args=extra_args, protocol=protocol)
        inconclusive = inconclusive_results(run.report)
        if not inconclusive or len(earlier) == retry_inconclusive:
            run.inconclusive_attempts = earlier
            return run
        earlier.append(inconclusive)


def run_pool(jobs: dict[str, dict], out: Path, at_once: int) -> dict[str, ConformRun]:
    """{name: run_conform's arguments, by keyword} -> {name: run}, `at_once`
    at a time, each in out/<name> (":" made "-"), the full runs (no `only`)
    first: they are the longest, so the pool drains evenly. Runs whose only
    non-passes are inconclusive are retried (INCONCLUSIVE_RETRIES)."""
    ordered = sorted(jobs.items(), key=lambda item: item[1].get("only") is not None)
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        futures = {name: pool.submit(run_conform, out_dir=out / name.replace(":", "-"),
                                     retry_inconclusive=INCONCLUSIVE_RETRIES, **job)
                   for name, job in ordered}
        return {name: f.result() for name, f in futures.items()}


def _run_conform_once(command: list[str], only: list[str] | None, *, strict: bool, gdbstub: str | None,
                      out_dir: Path | None, junit: bool, env: dict[str, str] | None, timeout: float,
                      extra_args: list[str] | None, protocol: str | None) -> ConformRun:
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="tracecorr-conform-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "report.json"
    junit_path = out_dir / "report.xml" if junit else None
    argv = [str(TRACECORR), "conform", "--json", str(json_path)]
    if protocol:
        argv += ["--protocol", protocol]
    if junit_path:
        argv += ["--junit", str(junit_path)]
    if only:
        argv += ["--only", ",".join(only)]
    if strict:
        argv.append("--strict")
    if gdbstub:
        argv += ["--gdbstub", gdbstub]
    if SESSION_JOBS and not only and "--jobs" not in (extra_args or []):
        argv += ["--jobs", SESSION_JOBS]
    argv += [*(extra_args or []), "--", *command]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **WRITER_ENV, **(env or {})})
    seconds = time.monotonic() - started
    report = json.loads(json_path.read_text()) if json_path.exists() else None
    return ConformRun(argv, proc.returncode, report, proc.stdout, proc.stderr, seconds, json_path, junit_path)


# ---- arm64 under qemu-user --------------------------------------------------

_port_lock = threading.Lock()
_ports_handed_out: set[int] = set()


def free_tcp_port() -> int:
    """A port for qemu's gdbstub that nothing listens on now. Taken below the
    kernel's ephemeral range, so that no outgoing connection (the fixture's
    OTLP client, say) can grab it between this check and qemu's bind; and
    never handed out twice, so parallel runs do not collide."""
    low, _ = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    with _port_lock:
        for _ in range(1000):
            port = random.randrange(max(1024, low - 12000), low)
            if port in _ports_handed_out:
                continue
            with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _ports_handed_out.add(port)
            return port
    raise RuntimeError("no free TCP port below the ephemeral range")


def qemu_command(program: Path, gdb_port: int) -> list[str]:
    """The arm64 program under qemu-user with its gdbstub on `gdb_port` (the
    guest waits for tracecorr to connect)."""
    return [QEMU, "-L", AARCH64_SYSROOT, "-g", str(gdb_port), str(program)]


# ---- the kill matrix --------------------------------------------------------

@dataclasses.dataclass
class KillEntry:
    arch: str
    mutant: str
    requirement: str
    level: str
    expected: str
    verdict: str
    returncode: int
    seconds: float

    @property
    def killed(self) -> bool:
        return self.verdict == self.expected


class KillMatrix:
    """Mutant x its own requirement -> verdict, collected across tests and
    printed once at the end of the session (conftest.py)."""

    def __init__(self) -> None:
        self._entries: list[KillEntry] = []
        self._timings: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, entry: KillEntry) -> None:
        with self._lock:
            self._entries.append(entry)

    def time(self, label: str, seconds: float) -> None:
        with self._lock:
            self._timings[label] = seconds

    def entries(self) -> list[KillEntry]:
        with self._lock:
            return sorted(self._entries, key=lambda e: (e.arch, e.requirement, e.mutant))

    def render(self) -> list[str]:
        entries = self.entries()
        if not entries and not self._timings:
            return []
        lines = []
        if entries:
            width = max(len(e.mutant) for e in entries)
            lines.append(f"{'arch':7} {'mutant':{width}} {'requirement':11} {'level':6} {'expected':8} "
                         f"{'verdict':8} {'exit':4} {'time':>6}  killed")
            for e in entries:
                lines.append(f"{e.arch:7} {e.mutant:{width}} {e.requirement:11} {e.level:6} {e.expected:8} "
                             f"{e.verdict:8} {e.returncode:4} {e.seconds:5.1f}s  {'yes' if e.killed else 'NO'}")
            by_arch: dict[str, list[KillEntry]] = {}
            for e in entries:
                by_arch.setdefault(e.arch, []).append(e)
            for arch, es in sorted(by_arch.items()):
                lines.append(f"{arch}: {sum(e.killed for e in es)} of {len(es)} mutants killed by their own requirement")
        for label, seconds in sorted(self._timings.items()):
            lines.append(f"time: {label}: {seconds:.1f} s")
        return lines


KILL_MATRIX = KillMatrix()


# A mutant whose protocol discovery never finds what it looks for (Elastic's
# library under another name, ELF-01; OTEP 4947's variable missing from .dynsym,
# TCTX-01) keeps its verdict until discovery's CPU budget is spent: 30 s of the
# writer's CPU by default (the wrong-name mutant: 57 CPU-s and 118 s of a CI's
# wall time; TCTX-01's: 127 s, its module's long pole). The rule is judged the
# same after 3 s; the default budget's own test is test_discovery_wait.py.
DISCOVERY_NEVER_ENDS = {"ELF-01": ["--discovery-cpu", "3"], "TCTX-01": ["--discovery-cpu", "3"]}


def mutant_options(requirement: str) -> list[str]:
    """conform's options for a mutant of `requirement`, beyond --only and --strict."""
    return list(DISCOVERY_NEVER_ENDS.get(requirement, []))


def strict_for(requirement: str) -> bool:
    """Mutants of a SHOULD are run with --strict, so that they must fail."""
    return LEVELS[requirement] == "SHOULD"


def mutant_strict(mutant: dict) -> bool:
    """Whether a mutant's run is --strict: a SHOULD's, or one whose mutants.json
    entry says so (`strict`: a MUST judged as far as the evidence allows, a warning)."""
    return mutant.get("strict", strict_for(mutant["requirement"]))


def assert_mutant_caught(arch: str, mutant: dict, run: "ConformRun") -> None:
    """Records the mutant's row of the kill matrix, then asserts that conform
    gave its own requirement the violation verdict (or the entry's `verdict`)
    and the exit code that fails the gate."""
    requirement = mutant["requirement"]
    strict = mutant_strict(mutant)
    expected = mutant.get("verdict", expected_violation_verdict(requirement, strict))
    verdict = run.verdict(requirement) if run.report else "no report"
    KILL_MATRIX.add(KillEntry(arch, mutant["name"], requirement, LEVELS[requirement], expected, verdict,
                              run.returncode, run.seconds))
    assert verdict == expected, f"{mutant['name']} ({mutant['description']}) escaped {requirement}:\n{run.explain(requirement)}"
    assert run.returncode == (EXIT_FAILURE if strict else expected_violation_exit(requirement, strict)), \
        run.explain(requirement)


# ---- full reference runs, shared by the test modules -------------------------

_reference_runs: dict[str, ConformRun] = {}
_reference_lock = threading.Lock()


def arch_command(arch: str, program: Path) -> tuple[list[str], str | None]:
    """The command line that runs `program` for `arch`, and the --gdbstub
    endpoint (arm64: under qemu-user, thread pointers from its gdbstub)."""
    if arch == "arm64":
        port = free_tcp_port()
        return qemu_command(program, port), f"127.0.0.1:{port}"
    return [str(program)], None


def elastic_command(arch: str, mutant: str | None = None) -> tuple[list[str], str | None]:
    """The Elastic reference (or a mutant) for `arch`, and the --gdbstub
    endpoint (arm64: under qemu-user)."""
    return arch_command(arch, fixture_program(arch, mutant))


def reference_run(arch: str, out_dir: Path) -> ConformRun:
    """One full conform run (every requirement, JSON and JUnit reports) of the
    reference for `arch`, done once per test session whichever module asks first."""
    with _reference_lock:
        if arch not in _reference_runs:
            command, gdbstub = elastic_command(arch)
            run = run_conform(command, gdbstub=gdbstub, out_dir=out_dir, junit=True,
                              retry_inconclusive=INCONCLUSIVE_RETRIES)
            KILL_MATRIX.time(f"{arch} full reference conform run", run.seconds)
            _reference_runs[arch] = run
        return _reference_runs[arch]


# ---- reference variants -----------------------------------------------------
# Conforming agents that make other legal choices than the reference: each must
# pass every requirement the reference passes. Shared by the variants test and
# the load benchmark (tests/bench/conform_load.py).
FULL_QUEUE_WARNING_IN_OTHER_WORDS = (
    "3 spans could not be delayed for correlation due to a full buffer; "
    "consider raising ELASTIC_OTEL_UNIVERSAL_PROFILING_INTEGRATION_BUFFER_SIZE")


def reference_variants(arch: str = "x86_64") -> dict[str, list[str]]:
    """{name: command} for the reference and its conforming variants."""
    program = [str(fixture_program(arch))]
    return {
        "reference": program,
        # A slow poller: the socket is drained every 200 ms (EDOT Java: 20 ms).
        "socket-poll-200ms": [*program, "--socket-poll-ms", "200"],
        # The OTel SDK's default batch period: spans reach the receiver in 5 s batches.
        "export-batches-5s": ["env", "OTEL_BSP_SCHEDULE_DELAY=5000", *program],
        # An exporter that omits the optional OTLP span flags field.
        "no-span-flags": [*program, "--no-span-flags"],
        # A full-queue warning worded like a real agent's, without "queue" or "incomplete".
        "warning-in-other-words": [*program, "--full-queue-warning", FULL_QUEUE_WARNING_IN_OTHER_WORDS],
        # A slow start: 3 s of its own CPU before it loads the library (a JVM; many seconds of a busy
        # machine, beside stress-ng: tests/bench/slow_start_stress.sh). Discovery waits on its progress.
        "slow-start": [*program, "--start-cpu-ms", "3000"],
        # A queue whose size is its own: BUFFER_SIZE=8 holds 9 (EDOT Java's ring of 8 and one peeked).
        "queue-pow2-plus-one": [*program, "--queue-pow2-plus-one"],
    }


# The figures conform gives with a verdict the machine decided (conform::RunQueueWait::describe).
RUN_QUEUE_FIGURES = re.compile(r"(\d+) target threads waited (\d+) ms in run queues in total "
                               r"\(one thread at most \d+ ms\) over (\d+) ms")
# An inconclusive verdict is the machine's, not the agent's, when its target's average thread waited for a
# CPU at least this share of the time measured (the reference alone on two idle cores: a few percent).
STARVED_SHARE = 0.25


def starved_inconclusive(result: dict) -> bool:
    """An inconclusive (error) verdict whose reason shows its target starved of CPU, with the figures:
    what conform must answer when the machine, not the agent, decided the timing."""
    m = RUN_QUEUE_FIGURES.search(result["reason"]) if result["verdict"] == "error" else None
    if not m:
        return False
    threads, waited_ms, over_ms = (int(g) for g in m.groups())
    return threads > 0 and waited_ms >= STARVED_SHARE * over_ms * threads


def judgement_problems(run: ConformRun, *, starved_may_be_inconclusive: bool = False) -> list[str]:
    """What makes a run of a conforming agent wrong: a non-zero exit, a verdict
    other than pass (the MAY TLS-06 may skip), or a pass resting on no evidence.
    starved_may_be_inconclusive: an inconclusive verdict showing its target
    starved (starved_inconclusive) is no problem, nor the exit 3 it makes: a
    launch into a session of its own gets one autogroup's share of the CPUs
    beside a busy one (CONFIG_SCHED_AUTOGROUP), and conform must then say it
    cannot tell, with the figures, never fail the agent."""
    if run.report is None:
        return [f"no report (exit {run.returncode}): {run.stderr[-2000:]}"]
    starved = [r for r in run.report["results"] if starved_may_be_inconclusive and starved_inconclusive(r)]
    exit_ok = run.returncode == EXIT_OK or (starved and run.returncode == EXIT_ENVIRONMENT)
    problems = [] if exit_ok else [f"exit {run.returncode}"]
    for r in run.report["results"]:
        if r["verdict"] == "pass" and r.get("evidence_count", 0) < 1:
            problems.append(f"{r['id']} passed on no evidence: {r['reason']}")
        elif r["verdict"] not in ("pass",) and not (r["id"] == "TLS-06" and r["verdict"] == "skip") \
                and r not in starved:
            problems.append(f"{r['id']} {r['verdict']}: {r['reason']}")
    return problems
