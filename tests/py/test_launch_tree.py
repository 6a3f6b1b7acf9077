"""Launch mode as agents are really started: through shell scripts that do not
`exec` the agent, wrappers that fork it two deep, and helpers (`sleep 300 &`)
that outlive their parent and hold the output pipe. tracecorr must judge the
process that loads the library, say which one and why, stop the whole tree and
end by itself."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import conform_support as cs

REFERENCE = cs.fixture_program("x86_64")

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(not (cs.TRACECORR.exists() and REFERENCE.exists()),
                                 reason=cs.missing_reason(f"tracecorr or the x86_64 reference under {cs.BUILD}"))]

# Bounds a hang (the bug: tracecorr waiting forever on a pipe an orphan holds), not a duration.
HANG_BOUND_S = 120

SCRIPTS = {
    # The shell forks the agent and waits for it: the launched pid never maps the library.
    "no-exec": 'echo $$ > "$PIDS/launcher"\n"$FIXTURE" "$@"\nstatus=$?\nexit $status\n',
    # A background subshell that forks the agent: two deep below the launched shell.
    "two-deep": 'echo $$ > "$PIDS/launcher"\n( "$FIXTURE" "$@"; true ) &\nwait\n',
    # A helper that outlives everything and holds the output pipe; the agent replaces the shell.
    "helper-then-exec": 'sleep 300 &\necho $! > "$PIDS/helper"\nexec "$FIXTURE" "$@"\n',
}


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("shape", sorted(SCRIPTS))
def test_conform_judges_the_agent_a_launch_script_starts_and_stops_the_whole_tree(shape, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    script = tmp_path / f"run-agent-{shape}.sh"
    script.write_text("#!/bin/sh\n" + SCRIPTS[shape])
    script.chmod(0o755)
    report_path = tmp_path / "report.json"
    argv = [str(cs.TRACECORR), "conform", "--json", str(report_path), "--only", "ELF-01,PROC-01",
            "--duration", "1", "--", str(script)]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_BOUND_S,
                         env=dict(os.environ, FIXTURE=str(REFERENCE), PIDS=str(pids)))
    report = json.loads(report_path.read_text())
    verdicts = {r["id"]: r for r in report["results"]}
    assert run.returncode == cs.EXIT_OK, (run.stdout[-3000:], run.stderr[-3000:])
    assert verdicts["ELF-01"]["verdict"] == "pass", verdicts["ELF-01"]
    assert verdicts["PROC-01"]["verdict"] == "pass", verdicts["PROC-01"]
    # It says which process it judged and why.
    judged = [n for n in report["notes"] if "judged" in n]
    assert judged, report["notes"]
    expected = {"no-exec": "descendant 1 deep", "two-deep": "descendant 2 deep",
                "helper-then-exec": "the launched process itself"}[shape]
    assert expected in judged[0], judged[0]
    assert "tracecorr-fixture" in judged[0]
    assert "judging pid" in run.stderr
    # Nothing of the tree is left running.
    for name in ("launcher", "helper"):
        f = pids / name
        if f.exists():
            pid = int(f.read_text())
            for _ in range(100):  # init reaps orphans asynchronously
                if not alive(pid):
                    break
                time.sleep(0.05)
            assert not alive(pid), f"{name} pid {pid} of the launched tree still runs"


def test_target_stop_does_not_wait_for_an_orphan_holding_the_output_pipe():
    """`sleep 300 & exec agent`: stopping the target stops the helper too, and
    the output capture ends without the helper's end-of-file."""
    sys.path.insert(0, str(cs.REPO / "python"))  # this tree's extension, not an installed one
    from tracecorr import _tracecorr as native

    target = native.Target.launch(["/bin/sh", "-c", 'sleep 300 & echo helper=$!; exec sleep 1000'])
    helper = None
    for _ in range(200):
        out = target.output().decode()
        if "helper=" in out:
            helper = int(out.split("helper=")[1].split()[0])
            break
        time.sleep(0.01)
    assert helper is not None and alive(helper)
    processes = {p.pid for p in target.processes()}
    assert helper in processes and target.pid in processes, processes
    how = target.stop(5.0)
    assert "SIGTERM" in how, how
    assert b"helper=" in target.output()
    for _ in range(100):
        if not alive(helper):
            break
        time.sleep(0.05)
    assert not alive(helper), "the helper in the launched process group survived stop()"
    target.release()
