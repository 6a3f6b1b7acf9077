"""`tracecorr conform --profiler`: the reader side judged (issue 27).

tracecorr plays the application: a stage of writers (OTEP 4947 in every TLS model built, the in-place
style, dynamic TLS, a process under another schema; the V8-shaped Node.js writer in static and dynamic TLS,
showing the walk's hazards in turn, and under another schema and none; Elastic's reference agent) journals what each thread
published when, the profiler under test samples the host and exports OTLP profiles to tracecorr, and each
reader requirement is judged from the journals and the samples.

The profiler here is tracecorr's own host agent, the reference reader: it must pass everything the stage
shows. Then the kill matrix: the same agent with one reader defect switched on (`--reader-defect`) must
fail the requirement the defect breaks, in a run limited to it (`--only`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from build_products import HOST_ARCH, REPO, TRACECORR, need

try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr
from tracecorr.profiles import HAVE_PROFILES

pytestmark = [pytest.mark.root, pytest.mark.host_wide,  # the agent samples (and sends to) every agent on the host
              pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the BPF sampler runs natively on x86-64 here"),
              pytest.mark.skipif(not HAVE_PROFILES, reason="built without OTLP profiles (libgrpc++-dev)")]

RUN_TIMEOUT_S = 240
LEVELS = {r["id"]: r["level"]
          for registry in json.loads(subprocess.run([str(TRACECORR), "list", "--json"], capture_output=True, text=True,
                                                    check=False).stdout or "[]")
          for r in registry["requirements"]}
# The reference reader: every process on the host, BPF (or ptrace: `READER`), often enough that each stage member is
# sampled soon.
AGENT = [str(TRACECORR), "agent", "--all", "--frequency", "199", "--quiet"]
READER = ["--reader", "bpf"]
PTRACE = ["--reader", "ptrace"]
EXIT_FAIL = 1
EXIT_USAGE = 2


def conform_profiler(tmp_path, agent_args: list[str], only: list[str] | None = None, protocol: str = "grpc",
                     strict: bool = False, protocols: list[str] | None = None, reader: list[str] = READER,
                     options: list[str] = ()) -> dict:
    report = tmp_path / "report.json"
    args = [str(need(TRACECORR)), "conform", "--profiler", "--profiler-protocol", protocol, "--json", str(report),
            "--html", str(tmp_path / "report.html"), "--quiet"]
    if only:
        args += ["--only", ",".join(only)]
    if strict:
        args.append("--strict")
    args += options
    if protocols:
        args += ["--protocol", ",".join(protocols)]
    # Waited for here (wait4), not by subprocess: the largest peak RSS of the run's tree comes with it.
    run = subprocess.Popen(args + ["--"] + AGENT + reader + agent_args, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(RUN_TIMEOUT_S, run.kill)
    timer.start()
    output = run.stdout.read()
    _, status, usage = os.wait4(run.pid, 0)
    timer.cancel()
    run.returncode = os.waitstatus_to_exitcode(status)
    run.stdout.close()
    assert report.exists(), output
    result = json.loads(report.read_text())
    result["exit"] = run.returncode
    result["output"] = output
    result["tree_max_rss_mb"] = usage.ru_maxrss / 1024
    result["html"] = (tmp_path / "report.html").read_text()
    return result


def verdicts(result: dict) -> dict[str, dict]:
    return {r["id"]: r for r in result["results"]}


def explain(result: dict) -> str:
    lines = [f'{r["id"]}: {r["verdict"]}: {r["reason"]}' for r in result["results"]]
    return "\n".join(lines + result.get("notes", []))


# What the stage shows today, each judged from its hazard; the rest are skipped (a permission, a
# documentation rule) or not yet shown by any stage member, and say so.
JUDGED_ON_THE_STAGE = ["TCTXR-01", "TCTXR-02", "TCTXR-03", "TCTXR-04", "TCTXR-05", "TCTXR-06", "TCTXR-07", "TCTXR-08",
                       "TCTXR-09", "TCTXR-10", "TCTXR-11", "TCTXR-12", "TCTXR-14", "TCTXR-16", "PCTXR-01", "PCTXR-02",
                       "PCTXR-03", "PCTXR-04", "PCTXR-05", "TLS-08", "TLS-09", "MSG-01", "MSG-08",
                       "NJSR-01", "NJSR-02", "NJSR-03", "NJSR-04", "NJSR-05", "NJSR-06", "NJSR-08", "NJSR-10",
                       "NJSR-11", "NJSR-12", "NJSR-13", "NJSR-14"]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> dict:
    return conform_profiler(tmp_path_factory.mktemp("reference"), [])


def test_a_run_takes_at_most_300_mb_in_any_of_its_processes(reference_run):
    """Issue 27's bound, for tracecorr's side and the reference reader alike (the largest peak RSS of the
    run's tree, wait4): every member's journal is read at once, so a read sized by its limit, not by the
    file, took 256 MB each (5.3 GB for the stage)."""
    assert reference_run["tree_max_rss_mb"] <= 300, reference_run["tree_max_rss_mb"]


def test_the_reference_reader_passes_the_gate(reference_run):
    v = verdicts(reference_run)
    failed = [i for i, r in v.items() if r["verdict"] in ("fail", "warn", "error")]
    assert not failed, explain(reference_run)
    assert reference_run["exit"] == 0, explain(reference_run)
    # What is skipped says why: a permission, a documentation rule, a hazard no stage member shows yet.
    for r in v.values():
        if r["verdict"] == "skip":
            assert r["reason"], r


@pytest.mark.parametrize("requirement", JUDGED_ON_THE_STAGE)
def test_the_reference_reader_passes_what_the_stage_shows(reference_run, requirement):
    r = verdicts(reference_run)[requirement]
    assert r["verdict"] == "pass", explain(reference_run)


def test_every_stage_member_is_named_with_what_it_showed(reference_run):
    members = [n for n in reference_run["notes"] if n.startswith("stage member ")]
    assert any("otel-thread-context/musl-dlopen" in n for n in members), members
    assert any("otel-thread-context/nodejs-schema" in n for n in members), members
    assert any("otel-thread-context/keys-late" in n for n in members), members
    assert any("otel-process-context/damaged-signature" in n for n in members), members
    for node in ("addon-dlopen", "addon-dlopen-dynamic", "wrong-schema", "no-schema"):
        assert any(f"otel-nodejs-thread-context/{node} " in n for n in members), (node, members)
    assert all("could not launch" not in n for n in members), members
    assert reference_run["counters"]["profile_samples"] > 0


def test_the_html_report_draws_every_member_that_ran(reference_run):
    """A picture per stage member: its samples over time in lanes of their check (right, missing, stale,
    poisoned, ...) beside the hazards its threads showed."""
    timelines = reference_run["figures"]["timelines"]
    ran = [n for n in reference_run["notes"] if n.startswith("stage member ") and "could not launch" not in n]
    assert len(timelines) == len(ran) and all(t["of"] == "stage member" for t in timelines), timelines
    html = reference_run["html"]
    assert html.count('data-figure="timeline"') == len(timelines)
    assert "Stage members: their samples over time" in html
    for t in timelines:
        kinds = {e["kind"] for e in t["events"]}
        assert not kinds & {"poisoned", "torn"}, t["session"]  # the reference reader reads nothing it must not
        # Right contexts, or none where a conforming reader reports none (another schema, valid 2).
        assert "right" in kinds or kinds - {"hazard"} <= {"no-context"}, (t["session"], kinds)
        if t["session"].startswith("otel-thread-context/") and t["session"] != "otel-thread-context/keys-late":
            assert "hazard" in kinds, t["session"]  # keys-late holds one span: its hazard is its process context's


# The stage members that show what each requirement of the kill matrix is judged on (--stage-member): a defect is
# caught by its first misreading, on the member whose hazard it misreads. The whole stage burnt both CPUs for each
# kill while it lasted (5 to 20 CPU-s a kill); one member takes 3 to 4.
TCTX = "otel-thread-context/"
NJS = "otel-nodejs-thread-context/"
SHOWN_BY = {
    "TCTXR-02": [TCTX + "keys-late"],  # threadlocal keys published once the profiler met the process
    "TCTXR-03": [TCTX + "nodejs-schema"],
    "TCTXR-05": [TCTX + "tlsdesc-dlopen-dynamic"],
    "TCTXR-06": [TCTX + "tlsdesc-rewriting", TCTX + "tlsdesc-in-place"],  # records rewritten in place
    "TCTXR-08": [TCTX + "tlsdesc"], "TCTXR-10": [TCTX + "tlsdesc"], "TCTXR-11": [TCTX + "tlsdesc"],
    "TCTXR-12": [TCTX + "tlsdesc"], "TCTXR-16": [TCTX + "tlsdesc"],
    "PCTXR-02": ["otel-process-context/damaged-signature", "otel-process-context/damaged-version"],
    "PCTXR-03": [TCTX + "tlsdesc"], "PCTXR-04": [TCTX + "tlsdesc"],  # its process context's poison payloads
    "NJSR-01": [NJS + "wrong-schema", NJS + "no-schema"],
    "NJSR-04": [NJS + "addon-dlopen"], "NJSR-06": [NJS + "addon-dlopen"], "NJSR-08": [NJS + "addon-dlopen"],
    "NJSR-12": [NJS + "addon-dlopen"], "NJSR-14": [NJS + "addon-dlopen"],
    "TLS-08": ["elastic-v1/reference"], "TLS-09": ["elastic-v1/reference"],
    "MSG-01": ["elastic-v1/reference"], "MSG-08": ["elastic-v1/reference"],
}


def shown_by(requirement: str) -> list[str]:
    return [a for m in SHOWN_BY[requirement] for a in ("--stage-member", m)]


# The ptrace reader, which stops each thread while it reads its record, passes what its defect breaks, on the
# members that show it, for the default length of a stage.
PTRACE_JUDGED = ["TCTXR-06", "PCTXR-02"]


@pytest.mark.parametrize("requirement", PTRACE_JUDGED)
def test_the_ptrace_reference_reader_passes_what_its_defects_break(tmp_path, requirement):
    result = conform_profiler(tmp_path, [], only=[requirement], reader=PTRACE, protocols=staged_protocols(requirement),
                              options=shown_by(requirement))
    assert verdicts(result)[requirement]["verdict"] == "pass", explain(result)


# The kill matrix: one reader defect each, the requirement it breaks (a SHOULD judged --strict), and the reader
# it needs (the sampler's defects are the ptrace reader's). Each run stages only the members that show what its
# requirement is judged on (SHOWN_BY; OTEP 4719's readers read the OTEP 4947 writers' process contexts).
STAGED_FOR = {"TCTXR": ["otel-thread-context"], "PCTXR": ["otel-process-context", "otel-thread-context"],
              "TLS": ["elastic-v1"], "MSG": ["elastic-v1"], "NJSR": ["otel-nodejs-thread-context"]}
KILLS = [
    ("ignores-valid", "TCTXR-08"),
    ("ignores-valid", "TLS-08"),
    ("ignores-trace-present", "TLS-09"),
    ("never-refreshes-key-map", "TCTXR-10"),
    ("keeps-out-of-map", "TCTXR-11"),
    ("first-duplicate-wins", "TCTXR-12"),
    ("reads-any-schema", "TCTXR-03"),
    ("static-tls-only", "TCTXR-05"),
    ("unbounded-record", "TCTXR-16"),
    ("never-looks-again", "TCTXR-02"),
    ("wrong-counts", "MSG-08"),
    ("no-registration", "MSG-01"),
    ("ignores-seqlock", "PCTXR-03"),
    ("ignores-seqlock", "PCTXR-04"),
    ("reads-running-thread", "TCTXR-06", PTRACE),
    ("any-signature", "PCTXR-02", PTRACE),  # the BPF sampler checks the header's identity in the kernel
    ("walks-any-schema", "NJSR-01"),
    ("ignores-valid", "NJSR-12"),
    # The walk's defects have no table shape for the BPF sampler: the ptrace reader's walk breaks the rule.
    ("caches-struct", "NJSR-04", PTRACE),
    ("ignores-forwarding", "NJSR-06", PTRACE),
    ("bounds-by-elements", "NJSR-08", PTRACE),
    ("checks-map-words", "NJSR-14", PTRACE),
]
# Not in the matrix: one-mapping-name (PCTXR-01): every mapping here is /memfd:OTEL_CTX (no CONFIG_ANON_VMA_NAME),
# so a reader of [anon_shmem:OTEL_CTX] only reads no member, which is inconclusive, not failed.


def staged_protocols(requirement: str) -> list[str]:
    return STAGED_FOR[requirement.split("-")[0]]


# A kill's stage ends once every member has its samples and the profiler has watched it KILL_MIN_STAGE_S (the
# default, 6 s, is for a pass: enough of every hazard's cycles that a reader right so far is right). A defect is
# caught by its first misreading: in a run of the default length, every kill failed its rule on a tenth to
# nine tenths of its samples.
KILL_MIN_STAGE_S = 2
# ... and once every member has this many samples (the default, 40, is for a pass): the stage then ends on
# KILL_MIN_STAGE_S (TCTXR-08's kill on the whole stage of 19 members: 6.5 s and 12.4 CPU-s with 40, 5.5 s and
# 10.3 with 15).
KILL_MEMBER_SAMPLES = 15


def kill_run(tmp_path, kill: tuple) -> dict:
    defect, requirement, reader = (*kill, READER)[:3]
    strict = LEVELS[requirement] == "SHOULD"
    return conform_profiler(tmp_path, ["--reader-defect", defect], only=[requirement], strict=strict,
                            protocols=staged_protocols(requirement), reader=reader,
                            options=["--min-stage", str(KILL_MIN_STAGE_S), "--stage-samples", str(KILL_MEMBER_SAMPLES),
                                     *shown_by(requirement)])


@pytest.mark.parametrize("kill", KILLS, ids=[f"{k[0]}-{k[1]}" for k in KILLS])
def test_a_reader_defect_fails_its_own_requirement(tmp_path, kill):
    requirement = kill[1]
    result = kill_run(tmp_path, kill)
    assert verdicts(result)[requirement]["verdict"] == "fail", explain(result)
    assert result["exit"] == EXIT_FAIL, explain(result)
    staged = sorted(n.split()[2] for n in result["notes"] if n.startswith("stage member "))
    assert staged == sorted(SHOWN_BY[requirement]), staged


def test_every_kill_stages_the_members_that_show_its_requirement():
    assert {k[1] for k in KILLS} == set(SHOWN_BY)


def test_a_stage_member_no_protocol_has_is_refused():
    run = subprocess.run([str(need(TRACECORR)), "conform", "--profiler", "--protocol", "elastic-v1", "--stage-member",
                          "otel-thread-context/tlsdesc", "--", "/bin/true"], capture_output=True, text=True, timeout=60)
    assert run.returncode == EXIT_USAGE, run.stdout + run.stderr
    assert "no stage member otel-thread-context/tlsdesc in the protocols staged (members: elastic-v1/reference)" in \
        run.stderr, run.stderr
