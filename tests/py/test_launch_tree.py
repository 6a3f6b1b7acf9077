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
import launch_support as ls
from build_products import package_fixture_program

REFERENCE = cs.fixture_program("x86_64")
THREAD_CONTEXT_WRITER = package_fixture_program("otel_thread_context", "otel-tctx-writer", "x86_64").parent / "tlsdesc" / "otel-tctx-writer"

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


# Issue 29: launched processes that try to outlive the run. Each escape is a
# `sleep` renamed to the run's tag (`exec -a`), counted before and after.
ESCAPE = """bash -c 'exec -a "$TAG" sleep 300'"""
ESCAPES = {
    # A double fork into a new session: the middle process exits, init adopts the rest.
    "setsid-double-fork": f"( setsid {ESCAPE} & ) ; exec \"$FIXTURE\" --service-name \"$TAG\"",
    # A process group of its own, in the launched session.
    "new-process-group": "( /usr/bin/python3 -c 'import os; os.setpgid(0, 0); "
                         "os.execvp(\"bash\", [\"bash\", \"-c\", \"exec -a \\\"$TAG\\\" sleep 300\"])' & ) ; "
                         "exec \"$FIXTURE\" --service-name \"$TAG\"",
    # 70 levels of forks, each waiting for the next; the deepest leaves into a new session.
    "chain-70-deep": f"chain() {{ if [ \"$1\" -gt 0 ]; then chain $(( $1 - 1 )) & wait; else setsid {ESCAPE}; fi; }}\n"
                     "chain 70 &\nexec \"$FIXTURE\" --service-name \"$TAG\"",
}


@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_nothing_the_run_launched_outlives_it(escape, tmp_path):
    tag = ls.unique_tag(escape)
    assert not ls.tagged(tag)
    script = tmp_path / "run-agent.sh"
    script.write_text("#!/bin/bash\n" + ESCAPES[escape] + "\n")
    script.chmod(0o755)
    report_path = tmp_path / "report.json"
    argv = [str(cs.TRACECORR), "conform", "--json", str(report_path), "--only", "ELF-01,PROC-01", "--", str(script)]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_BOUND_S,
                         env=dict(os.environ, FIXTURE=str(REFERENCE), TAG=tag))
    assert run.returncode == cs.EXIT_OK, (run.stdout[-3000:], run.stderr[-3000:])
    left = ls.left_running(tag)
    assert not left, f"{len(left)} processes of the launched tree still run after conform: {sorted(left)}"
    notes = json.loads(report_path.read_text())["notes"]
    stopped = [n for n in notes if "had left the launched process group" in n]
    assert stopped, notes


@pytest.mark.skipif(not THREAD_CONTEXT_WRITER.exists(), reason=cs.missing_reason(str(THREAD_CONTEXT_WRITER)))
def test_a_writer_that_forks_and_setsids_its_children_leaves_none_of_them(tmp_path):
    tag = ls.unique_tag("tctx-setsid-children")
    children = 8
    wrapper = ("import os, sys\n"
               f"for _ in range({children}):\n"
               "    if os.fork() == 0:\n"
               "        os.setsid()\n"
               f"        os.execvp('bash', ['bash', '-c', 'exec -a {tag} sleep 300'])\n"
               "os.execv(sys.argv[1], sys.argv[1:])\n")
    report_path = tmp_path / "report.json"
    argv = [str(cs.TRACECORR), "conform", "--json", str(report_path), "--protocol", "otel-thread-context",
            "--only", "TCTX-01", "--", "/usr/bin/python3", "-c", wrapper, str(THREAD_CONTEXT_WRITER),
            "--service-name", tag]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_BOUND_S)
    assert run.returncode == cs.EXIT_OK, (run.stdout[-3000:], run.stderr[-3000:])
    left = ls.left_running(tag)
    assert not left, f"{len(left)} of the writer's {children} children still run after conform: {sorted(left)}"
    notes = json.loads(report_path.read_text())["notes"]
    assert any("had left the launched process group" in n for n in notes), notes
