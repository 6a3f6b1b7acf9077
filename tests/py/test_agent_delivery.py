"""`tracecorr agent` delivers what the agent's queue can carry (issue 29).

The reference fixture plays the agent: it reads its socket every
--socket-poll-ms, until the queue is empty (as EDOT Java does) or at most
--socket-read-max datagrams, and journals every correlation it read with its
outcome: `recorded`, or `unknown_transaction` when it had already exported the
transaction. The tests hold the host agent's --json summary against that
journal, in shares and counts (never in times):

  * an agent polling every 20 ms applies >= 99 % of the correlated samples
    (1 kHz sampling of four busy threads);
  * one reading only what its queue holds every 100 ms gets >= 90 % of the
    capacity bound the summary states, and the bound is below what was correlated;
  * the summary's late count is the agent's own unknown_transaction count and
    its read-in-time count the agent's recorded count, up to the datagrams the
    summary calls unconfirmed (read between two of its looks around their due);
  * an agent too slow for samples-delay-ms: its late correlations are counted
    late, the rest dropped as expired, never called delivered in time;
  * each judged against the processes' own progress: a run where the machine
    starved the fixture (too few samples for what the test sets up) or kept
    tracecorr's sender from a CPU past an agent's read is run again, and the
    test errors as inconclusive with every attempt's figures, never passes;
  * `agent --all` in a pid namespace of its own (no other engineer's agent can
    be reached there) among 300 processes without an agent ends on time.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from build_products import HOST_ARCH as ARCH, REGISTRY, TRACECORR, fixture_program, need
from fixture_process import FixtureProcess

pytestmark = [pytest.mark.root, pytest.mark.slow]
FIXTURE = fixture_program(ARCH)
ENABLED_ENV = REGISTRY["config"]["enabled"]["env"]
SOCKET_DIR_ENV = REGISTRY["config"]["socket_dir"]["env"]


@pytest.fixture(scope="module")
def tracecorr():
    path = need(TRACECORR)
    r = subprocess.run([str(path), "doctor", "--json"], capture_output=True, text=True, timeout=60)
    if not json.loads(r.stdout)["verdicts"]["bpf_sampler"]["works"]:
        pytest.skip("BPF sampler unavailable here")
    return path


def journal_file(path):
    """The journal of an agent already stopped: event -> its lines."""
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return lambda event: [e for e in lines if e["event"] == event]


class Agent:
    """One reference fixture as the agent (correlation enabled), its journal read back."""

    def __init__(self, tmp_path, *args):
        tmp_path.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **{ENABLED_ENV: "true", SOCKET_DIR_ENV: str(tmp_path), "TMPDIR": str(tmp_path)})
        env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)  # spans are only journaled
        self.process = FixtureProcess([str(need(FIXTURE)), *args], tmp_path / "journal.jsonl", env)
        self.process.read_line()
        self.process.wait_journal("ready", 1)

    @property
    def pid(self):
        return self.process.proc.pid

    def journal(self, event):
        return self.process.journal(event)


def outcomes_of(journal):
    """Samples per correlation outcome, as the agent journaled them."""
    out = Counter()
    for e in journal("message"):
        if e["kind"] == "correlation":
            out[e["outcome"]] += e["count"]
    return out


def run_agent(tracecorr, tmp_path, pids, *args):
    out = tmp_path / "summary.json"
    cmd = [str(tracecorr), "agent", "--json", str(out), "--quiet", *args]
    for pid in pids:
        cmd += ["--pid", str(pid)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"agent failed ({r.returncode}):\n{r.stderr}"
    return json.loads(out.read_text())


def the_process(summary, pid):
    (p,) = [p for p in summary["processes"] if p["pid"] == pid]
    return p


def exported_late(journal, delay_ms):
    """Samples the agent recorded for transactions it exported later than
    their end + samples-delay-ms (a starved deferral thread): read after the
    moment the summary calls late, they still counted."""
    late = {(e["trace_id"], e["span_id"]) for e in journal("export")
            if e["transaction"] and e["deferred_ms"] > delay_ms + 3}
    return sum(e["count"] for e in journal("message")
               if e["kind"] == "correlation" and e["outcome"] == "recorded"
               and (e["trace_id"], e["transaction_id"]) in late)


def raced_the_export(journal, window_ms=50):
    """Samples the agent found unknown though it handled them within
    `window_ms` of exporting their transaction: its receiving thread read the
    datagram before the export and was preempted before it looked the
    transaction up, or the thread's record outlived the transaction's end."""
    exported = {(e["trace_id"], e["span_id"]): e["t"] for e in journal("export") if e["transaction"]}
    return sum(e["count"] for e in journal("message")
               if e["kind"] == "correlation" and e["outcome"] == "unknown_transaction"
               and 0 <= e["t"] - exported.get((e["trace_id"], e["transaction_id"]), -10**19) <= window_ms * 1e6)


def delivered_as_the_agent_saw_it(process, journal, delay_ms=1000):
    """The summary's counts against the agent's journal. Every datagram sent
    arrived, once. What the summary calls read in time the agent recorded;
    what it found unknown the summary calls late or unconfirmed (read between
    the transaction's last sample + delay and its threads' leaving + delay:
    in time only if it ran on after its last sample), except what raced the
    agent's own export. What the summary calls late the agent found unknown,
    unless it exported that transaction late."""
    outcomes = outcomes_of(journal)
    d = process["delivery"]
    arrived = sum(outcomes.values())
    assert arrived == d["delivered"]["samples"] == process["samples_sent"], (outcomes, d)
    late, unconfirmed, in_time = d["late"]["samples"], d["unconfirmed"]["samples"], d["read_in_time"]["samples"]
    assert in_time + late + unconfirmed == d["delivered"]["samples"], d
    raced = raced_the_export(journal)
    assert in_time <= outcomes["recorded"] + raced, (outcomes, d, raced)
    assert outcomes["unknown_transaction"] <= late + unconfirmed + raced, (outcomes, d, raced)
    assert late <= outcomes["unknown_transaction"] + exported_late(journal, delay_ms), (outcomes, d)
    assert outcomes["transaction_full"] == outcomes["ignored_before_registration"] == 0, outcomes
    lost = sum(v["samples"] for v in d["dropped"].values())
    assert d["delivered"]["samples"] + lost + d["pending"]["samples"] == process["correlated"], d
    return outcomes


def threads_cpu(pid):
    """(ran, waited for a CPU) in seconds, summed over the process's threads
    (/proc/PID/task/*/schedstat): the process's own progress."""
    ran = waited = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:
            continue  # the thread ended
        ran, waited = ran + int(fields[0]), waited + int(fields[1])
    return ran / 1e9, waited / 1e9


class Inconclusive(Exception):
    """The machine, not the code judged, decided this run: its figures say how."""


# Attempts at a run that can be judged. The machine may starve the fixture's
# threads (too few samples for what the test sets up) or tracecorr's sending
# thread (kept from a CPU longer than the agent's period between reads, it
# could not refill the queue for a read): such a run judges nothing of the plan.
JUDGED_RUN_ATTEMPTS = 3


def until_judged(attempt):
    """Runs attempt(i) until one returns; one that raises Inconclusive is run
    again, and when none could be judged the test errors as inconclusive with
    every attempt's figures (never a pass)."""
    why = []
    for i in range(JUDGED_RUN_ATTEMPTS):
        try:
            return attempt(i)
        except Inconclusive as e:
            why.append(f"attempt {i + 1}: {e}")
    pytest.fail("inconclusive: no attempt could be judged:\n" + "\n".join(why))


class Run:
    """One agent fixture, one `tracecorr agent` run at it, the fixture's own CPU time over the run."""

    def __init__(self, tracecorr, work, agent_args, run_args, settle_s):
        agent = Agent(work / "agent", *agent_args)
        try:
            before = threads_cpu(agent.pid)
            self.summary = run_agent(tracecorr, work, [agent.pid], *run_args)
            after = threads_cpu(agent.pid)
            time.sleep(settle_s)  # the agent's next reads journal what the run's end sent
        finally:
            agent.process.stop()
        self.journal = agent.journal
        self.p = the_process(self.summary, agent.pid)
        self.fixture_ran_s, self.fixture_waited_s = after[0] - before[0], after[1] - before[1]

    def sender_missed_a_read(self):
        period = self.p["delivery"]["agent_reads"]["read_period_ms"]
        return period is not None and self.summary["timeline"]["sender_longest_wait_for_cpu_ms"] >= period

    def figures(self):
        t, reads = self.summary["timeline"], self.p["delivery"]["agent_reads"]
        return (f"correlated {self.p['correlated']}; {reads['reads']} reads about every {reads['read_period_ms']} ms "
                f"taking at most {reads['datagrams_per_read']}; the fixture's threads ran {self.fixture_ran_s:.2f} s "
                f"and waited {self.fixture_waited_s:.2f} s for a CPU; tracecorr's sender waited "
                f"{t['sender_waited_for_cpu_s']:.3f} s (at once at most {t['sender_longest_wait_for_cpu_ms']:.1f} ms), "
                f"its sampling loop {t['loop_waited_for_cpu_s']:.3f} s")


def test_an_agent_polling_every_20ms_applies_nearly_every_sample(tracecorr, tmp_path):
    """Judged unless tracecorr's sender was kept from a CPU longer than the
    agent's period between reads while the agent applied less (beside 4 CPU
    hogs it once waited 1.1 s at once and 61 of 650 samples expired)."""
    def attempt(i):
        run = Run(tracecorr, tmp_path / f"attempt{i}", ["--threads", "4", "--socket-poll-ms", "20"],
                  ["--frequency", "1000", "--duration", "4"], 0.3)
        p = run.p
        assert p["correlated"] > 500, (p, run.figures())
        outcomes = delivered_as_the_agent_saw_it(p, run.journal)
        reads = p["delivery"]["agent_reads"]
        assert reads["read_period_ms"] is not None and 15 <= reads["read_period_ms"] <= 200, reads
        assert run.summary["flush_interval_ms"] == 200, "derived from samples-delay-ms 1000, not contradicting it"
        if outcomes["recorded"] < 0.99 * p["correlated"] and run.sender_missed_a_read():
            raise Inconclusive(f"applied {outcomes['recorded']} while the sender waited for a CPU past a read; "
                               + run.figures())
        assert outcomes["recorded"] >= 0.99 * p["correlated"], (outcomes, p["delivery"], run.figures())
    until_judged(attempt)


def test_an_agent_reading_only_its_queue_every_100ms_gets_what_the_queue_can_carry(tracecorr, tmp_path):
    """11 datagrams per 100 ms cannot carry a key per (transaction, stack) at
    1 kHz: the summary states the bound (what any sender knowing every sample
    in advance could have had read in time through the agent's reads) and the
    agent records most of it. The bound lets a key go at any read after its
    first sample with its whole count, which no sender can do, so nothing
    reaches it; the simulation in delivery_plan_test.cpp holds the plan to 95 %
    of it deterministically, BENCHMARKS.md measures it (93-96.5 % on this
    shared machine at load 15-60), and here the agent must record at least 90 %
    of it. Judged against the processes' own progress: a run where the machine
    starved the fixture's threads until the queue limited nothing (beside 10
    CPU hogs: 1187 of 1187 correlated within the bound, the fixture ran 1.1 s
    of 8), or kept tracecorr's sender from a CPU longer than the agent's
    period between reads while the agent recorded less, judges nothing of the
    plan."""
    def attempt(i):
        run = Run(tracecorr, tmp_path / f"attempt{i}",
                  ["--threads", "4", "--socket-poll-ms", "100", "--socket-read-max", "11"],
                  ["--frequency", "1000", "--duration", "8"], 0.5)
        p = run.p
        outcomes = delivered_as_the_agent_saw_it(p, run.journal)
        bound = p["delivery"]["capacity_bound"]
        if bound["samples"] >= p["correlated"]:
            raise Inconclusive(f"all {p['correlated']} correlated samples ({bound['keys']} keys) within the bound "
                               f"({bound['samples']}): the queue limited nothing; " + run.figures())
        assert bound["datagrams_per_read"] <= 11 and bound["read_period_ms"] >= 90, bound
        shortfall = outcomes["recorded"] < 0.90 * bound["samples"]
        if shortfall and run.sender_missed_a_read():
            raise Inconclusive(f"recorded {outcomes['recorded']} of the bound's {bound['samples']} while the sender "
                               "waited for a CPU past a read; " + run.figures())
        assert not shortfall, (outcomes, bound, run.figures())
        assert p["delivery"]["dropped"]["expired"]["samples"] > 0, "what the reads could not take expired"
    until_judged(attempt)


def test_an_agent_too_slow_for_samples_delay_gets_its_late_correlations_counted_late(tracecorr, tmp_path):
    """The agent reads every 1.5 s, samples-delay-ms is 1 s: the first
    correlations (before its pace is known) are read after their transactions
    were exported; the summary's late count is the agent's unknown_transaction
    count, and the plan then drops what cannot be read in time as expired.
    Telling late from unconfirmed takes seeing a transaction's threads leave
    it: a fixture the machine starved (beside 4 CPU hogs: 83 samples in 5 s of
    two busy threads) leaves each transaction unsampled at its end, so what
    the agent found unknown the summary can only call unconfirmed; such a run
    judges nothing of the late count."""
    def attempt(i):
        run = Run(tracecorr, tmp_path / f"attempt{i}",
                  ["--threads", "2", "--busy-percent", "100", "--socket-poll-ms", "1500"],
                  ["--frequency", "200", "--duration", "5"], 1.7)
        p, d = run.p, run.p["delivery"]
        outcomes = delivered_as_the_agent_saw_it(p, run.journal)
        assert outcomes["unknown_transaction"] > 0, (outcomes, d, run.figures())
        if d["late"]["samples"] == 0 and run.fixture_waited_s > run.fixture_ran_s:
            raise Inconclusive(f"the agent found {outcomes['unknown_transaction']} unknown, the summary called "
                               f"{d['unconfirmed']['samples']} unconfirmed and none late; " + run.figures())
        assert d["late"]["samples"] > 0, (outcomes, d, run.figures())
        assert d["dropped"]["expired"]["samples"] > 0
        assert p["samples_late"] == run.summary["totals"]["samples_late"] == d["late"]["samples"]
    until_judged(attempt)


def test_agent_all_ends_on_time_among_many_processes_in_its_own_pid_namespace(tracecorr, tmp_path):
    """--all examines every process at each rescan; in a pid namespace of its
    own (unshare --pid --mount-proc: the host's other agents are not there) with
    300 processes that publish nothing and two agents, a 3 s run ends at its
    duration plus the final reads, and the summary's counts are the agents'."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare (util-linux) not installed")
    script = tmp_path / "namespace.py"
    script.write_text(NAMESPACE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", sys.executable, str(script), str(tracecorr),
                        str(need(FIXTURE)), str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    result = json.loads(r.stdout.splitlines()[-1])
    assert result["agent_exit"] == 0, r.stderr
    # The run's end, by its own timeline: sampling stops at the duration (rescans are examined in
    # 20 ms slices between sampler polls of at most 100 ms) unless the machine kept the loop from a
    # CPU, and the final reads take at most their limit (min(samples-delay-ms, 2 s)).
    t = result["summary"]["timeline"]
    assert t["duration_s"] == 3
    assert t["sampling_s"] - t["duration_s"] <= 0.25 + t["loop_waited_for_cpu_s"], t
    assert t["final_reads_s"] <= t["final_reads_limit_s"] + 0.25, t
    processes = {p["pid"]: p for p in result["summary"]["processes"]}
    for pid, journal in result["journals"].items():
        p = processes[int(pid)]
        assert p["correlated"] > 0, p
        delivered_as_the_agent_saw_it(p, journal_file(journal))


# Runs as pid 1 of a fresh pid namespace: starts 300 sleepers and two
# fixtures, runs `tracecorr agent --all --reader ptrace` (the BPF sampler
# names processes by the host's pids), stops the fixtures and prints one JSON
# line. Everything it starts dies with the namespace.
NAMESPACE_SCRIPT = r'''
import json, os, subprocess, sys, time
from collections import Counter
from pathlib import Path
tracecorr, fixture, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(300)]
agents = []
for i in range(2):
    d = work / f"agent{i}"
    d.mkdir()
    env = dict(os.environ, ELASTIC_OTEL_UNIVERSAL_PROFILING_INTEGRATION_ENABLED="true",
               ELASTIC_OTEL_UNIVERSAL_PROFILING_INTEGRATION_SOCKET_DIR=str(d), TMPDIR=str(d),
               TRACECORR_FIXTURE_JOURNAL=str(d / "journal.jsonl"))
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    agents.append((subprocess.Popen([fixture, "--threads", "2", "--socket-poll-ms", "20"], env=env,
                                    stdout=subprocess.DEVNULL), d / "journal.jsonl"))
deadline = time.monotonic() + 20
while not all(j.exists() and '"ready"' in j.read_text() for _, j in agents):
    assert time.monotonic() < deadline, "fixtures not ready"
    time.sleep(0.05)
start = time.monotonic()
r = subprocess.run([tracecorr, "agent", "--all", "--reader", "ptrace", "--duration", "3", "--quiet",
                    "--json", str(work / "all.json")], capture_output=True, text=True)
wall = time.monotonic() - start
time.sleep(0.3)
journals = {}
for proc, journal in agents:
    proc.terminate()
    proc.wait()
    journals[proc.pid] = str(journal)
for s in sleepers:
    s.kill()
sys.stderr.write(r.stderr)
print(json.dumps({"agent_exit": r.returncode, "wall_s": wall, "journals": journals,
                  "summary": json.loads((work / "all.json").read_text()) if r.returncode == 0 else None}))
'''
