"""`tracecorr agent --pid N` follows the process N named, not the number.

Pids wrap at pid_max (32768 by default, on this kind of machine within minutes
when tests start 2000-thread writers): once the named process exits, the
number may be handed to another process, here another Elastic agent with a
socket of its own. A host agent that examined the number afresh would register
with that stranger and send it correlations carrying stack ids its own judge
never sent (a false MSG-04 in whatever conformance run judges the stranger).

The reuse is made certain, not waited for: everything runs in a pid namespace
of its own, where the second fixture is given the first one's number through
/proc/sys/kernel/ns_last_pid. The ptrace reader, because the BPF one names
processes by their pid in the initial namespace.
"""
import json
import subprocess
from pathlib import Path

import pytest

from build_products import HOST_ARCH as ARCH, REGISTRY, TRACECORR, fixture_program, need

pytestmark = [pytest.mark.root]
FIXTURE = fixture_program(ARCH)
ENABLED_ENV = REGISTRY["config"]["enabled"]["env"]
SOCKET_DIR_ENV = REGISTRY["config"]["socket_dir"]["env"]

# $1 fixture, $2 tracecorr, $3 work directory. The first fixture runs 1.5 s
# under the agent, then exits; the second is forked with the first one's pid
# while the agent (5 s, rescanning every 500 ms) still runs.
SCRIPT = r"""
set -eu
fixture=$1 tracecorr=$2 work=$3
export %(enabled)s=true
mkdir -p "$work/first" "$work/second"
start() {  # start NAME: a fixture with its own socket directory and journal (nothing forks before it)
  %(socket_dir)s="$work/$1" TRACECORR_FIXTURE_JOURNAL="$work/$1/journal.jsonl" "$fixture" --threads 2 >/dev/null &
}
start first
first=$!
sleep 0.5
"$tracecorr" agent --reader ptrace --frequency 200 --duration 5 --pid "$first" --json "$work/summary.json" \
  2>"$work/agent.err" &
agent=$!
sleep 1.5
kill "$first"
wait "$first" || true
echo $((first - 1)) > /proc/sys/kernel/ns_last_pid
start second
second=$!
echo "$first $second" > "$work/pids"
wait "$agent"
kill "$second"
wait "$second" || true
"""


def journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def messages(path: Path) -> list[dict]:
    return [e for e in journal(path) if e.get("event") == "message"]


def test_a_named_pid_given_to_another_process_is_not_followed(tmp_path):
    script = SCRIPT % {"enabled": ENABLED_ENV, "socket_dir": SOCKET_DIR_ENV}
    run = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", script, "named-pids",
                          str(need(FIXTURE)), str(need(TRACECORR)), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    agent_err = (tmp_path / "agent.err").read_text() if (tmp_path / "agent.err").exists() else ""
    assert run.returncode == 0, run.stderr + agent_err
    first, second = map(int, (tmp_path / "pids").read_text().split())
    assert first == second, f"the namespace gave the second fixture pid {second}, not {first}: the reuse was not made"
    # The agent did its work on the process it was named: registered, correlated.
    kinds = {m["kind"] for m in messages(tmp_path / "first" / "journal.jsonl")}
    assert {"registration", "correlation"} <= kinds, kinds
    # ... and sent nothing to the stranger that later held the number.
    stranger = messages(tmp_path / "second" / "journal.jsonl")
    assert not stranger, f"{len(stranger)} message(s) reached the process that reused pid {first}: {stranger[:3]}"
    assert f"pid {first}: the process named by --pid exited and the number now names another process" in agent_err, agent_err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [p["exited"] for p in summary["processes"] if p["pid"] == first] == [True], summary["processes"]
