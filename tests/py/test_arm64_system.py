"""arm64 end to end on a real arm64 kernel: the BPF sampler, and the OTEP 4719
writer rules qemu-user cannot show.

Boots Debian's pinned arm64 kernel (tests/arm64/kernel.lock) under
qemu-system-aarch64 with an initramfs holding the arm64 tracecorr and the arm64
reference fixture. In the guest the fixture holds one transaction per thread
(--hold --threads 3) and `tracecorr agent --reader bpf` samples it; the records
the BPF sampler read through task->thread.uw.tp_value + the TLS offset must be
exactly the records the fixture journaled, thread by thread.

In the same boot, `tracecorr conform --protocol otel-process-context` judges the
arm64 OTEP 4719 reference writer and the mutants of PCTX-11 (MADV_DONTFORK),
PCTX-13 and PCTX-14 (prctl(PR_SET_VMA) naming): under qemu-user those rules are
skipped (test_conform_pctx_arm64.py), here the arm64 mapping watch (hardware
watchpoints by NT_ARM_HW_WATCH, system call stops, fork events) judges them.
The reference must pass them and PCTX-07..09 (the watchpoints saw the header's
stores), and each mutant must fail its own rule.

A capability check (tests/arm64/vm_smoke.c) runs first in the same guest, so
"the VM cannot do BPF" fails as test_guest_can_run_bpf, not as wrong records.

Inputs: tests/support/arm64_vm.py; TRACECORR_BUILD, the normal build, whose
fixtures/arm64/otel_process_context/ holds the OTEP 4719 writer and its mutants.
The guest is booted once for this module and test_arm64_thread_context.py
(arm64_vm.shared_boot).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import conform_support as cs
from test_conform_pctx_mutants import FORK, PACKAGE, PROGRAM, PROTOCOL, mutants_document, program

import arm64_vm
from arm64_vm import arm64_guest, missing_payload, section_json

REPO = Path(__file__).resolve().parents[2]

# pytest --shard keeps the modules that share the guest in one process.
SHARD_GROUP = "arm64-vm"
# ... and in a shard of its own, shard 1, which scripts/test.sh starts first: the guest is the long pole.
SHARD_ALONE = True
pytestmark = [pytest.mark.slow, pytest.mark.qemu, pytest.mark.matrix]

# 3 s of sampling and six conform runs: this module's share of the guest's time limit.
GUEST_BUDGET_S = 280

# The OTEP 4719 writer rules qemu-user hides (test_conform_pctx_arm64.py), judged here on a real kernel.
PCTX_KERNEL_RULES = ["PCTX-11", "PCTX-13", "PCTX-14"]
# Judged by the hardware watchpoints' stores: each must be judged, not skipped.
PCTX_WATCHED_RULES = ["PCTX-07", "PCTX-08", "PCTX-09"]


# Elastic v1's rules judged by hardware watchpoints on the writing thread: TLS-01 (the slot watch:
# a record complete before its pointer is stored) and TLS-04 (the update-order watch). Under
# qemu-user they are judged with the host's watchpoints on qemu's threads; here by arm64's own.
ELASTIC_PROTOCOL = "elastic-v1"
ELASTIC_WATCHED_RULES = ["TLS-01", "TLS-04"]
# The mutant each rule's arm64 watch must catch (the one no poll of the records would).
ELASTIC_WATCHED_MUTANTS = {"TLS-01": "record-filled-after-publishing", "TLS-04": "valid-byte-set-early"}


def elastic_mutants() -> list[dict]:
    if not (cs.fixture_dir("arm64") / "mutants" / "mutants.json").is_file():
        return []
    return [m for m in cs.load_mutants("arm64") if ELASTIC_WATCHED_MUTANTS.get(m["requirement"]) == m["name"]]


def elastic_jobs() -> list[arm64_guest.ConformJob]:
    """The arm64 Elastic reference judged on the watched rules, and each rule's mutant."""
    if not cs.fixture_program("arm64").is_file():
        return []
    jobs = [arm64_guest.ConformJob("elastic_reference", cs.fixture_program("arm64"), arm64_vm.WRITER_BUSY, ELASTIC_PROTOCOL,
                                   only=ELASTIC_WATCHED_RULES)]
    for m in elastic_mutants():
        jobs.append(arm64_guest.ConformJob(arm64_vm.job_name("elastic", m["name"]),
                                           cs.fixture_program("arm64", m["name"]), arm64_vm.WRITER_BUSY, ELASTIC_PROTOCOL,
                                           only=[m["requirement"]], strict=cs.strict_for(m["requirement"])))
    return jobs


def pctx_mutants() -> list[dict]:
    document = mutants_document("arm64")
    return [m for m in document["mutants"] if m["requirement"] in PCTX_KERNEL_RULES] if document else []


def pctx_jobs() -> list[arm64_guest.ConformJob]:
    """The reference (every judged rule exercised, forking a child) and the
    three mutants (--strict --only their rule), or none when they are not built."""
    document = mutants_document("arm64")
    if document is None or not program("arm64").is_file():
        return []
    jobs = [arm64_guest.ConformJob("pctx_reference", program("arm64"), [*document["reference_args"], *FORK], PROTOCOL,
                                   only=PCTX_WATCHED_RULES + PCTX_KERNEL_RULES)]
    for m in pctx_mutants():
        jobs.append(arm64_guest.ConformJob(arm64_vm.job_name("pctx", m["name"]), program("arm64", m["name"]), m["args"],
                                           PROTOCOL, only=[m["requirement"]], strict=True))
    return jobs


arm64_vm.register_jobs(__name__, arm64_vm.ModuleJobs(lambda: [*pctx_jobs(), *elastic_jobs()], GUEST_BUDGET_S,
                                                     elastic_fixture=True))


@pytest.fixture(scope="module")
def guest_run(arm64_vm_run) -> arm64_guest.BootResult:
    return arm64_vm_run


def test_guest_can_run_bpf(guest_run):
    smoke = section_json(guest_run, "smoke")
    guest = guest_run.sections.get("guest", b"").decode().strip()
    assert "machine=aarch64" in guest, f"not an arm64 guest: {guest!r}"
    assert smoke["btf_vmlinux"], f"/sys/kernel/btf/vmlinux unusable in the guest: {smoke['btf_error']}"
    assert smoke["bpf_map_create"], f"bpf(BPF_MAP_CREATE) failed: {smoke['bpf_map_error']}"
    assert smoke["bpf_prog_load"], f"bpf(BPF_PROG_LOAD) failed: {smoke['bpf_prog_error']}\n{smoke['verifier_log']}"
    assert smoke["perf_cpu_clock"], f"perf_event_open(cpu-clock) failed: {smoke['perf_error']}"
    assert smoke["perf_attach_bpf"], f"PERF_EVENT_IOC_SET_BPF failed: {smoke['attach_error']}"
    assert smoke["bpf_program_runs"] > 0, "the perf_event BPF program never ran on cpu-clock samples"


def tls_record_layout() -> dict[str, dict]:
    registry = json.loads((REPO / "spec/elastic-v1.json").read_text())
    record = registry["layouts"]["tls_record"]
    return {"size": record["size"], **{f["name"]: f for f in record["fields"]}}


def decode_tls_record(raw: bytes, layout: dict) -> dict:
    assert len(raw) >= layout["size"], f"sampled record has {len(raw)} bytes, the layout needs {layout['size']}"

    def field(name: str) -> bytes:
        f = layout[name]
        return raw[f["offset"]:f["offset"] + f["size"]]

    return {"valid": field("valid")[0], "trace_present": field("trace_present")[0],
            "ids": (field("trace_id").hex(), field("span_id").hex(), field("transaction_id").hex())}


def journaled_records(journal: str) -> dict[int, tuple[str, str, str]]:
    """Each thread's held record (trace id, span id, transaction id): the last one
    published before "ready". Later records are the fixture's shutdown (SIGTERM
    after sampling), which clears every record."""
    last: dict[int, dict] = {}
    for line in journal.splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        if event.get("event") == "ready":
            break
        if event.get("event") == "record":
            last[event["tid"]] = event
    return {tid: (e["trace_id"].lower(), e["span_id"].lower(), e["transaction_id"].lower())
            for tid, e in last.items() if e["valid"] and e["trace_present"]}


def test_bpf_sampler_reads_fixture_records(guest_run):
    problems = missing_payload()
    if problems:
        pytest.fail("the arm64 scenario cannot run:\n  " + "\n  ".join(problems), pytrace=False)

    agent_log = guest_run.sections.get("agent_log", b"").decode(errors="replace")
    fixture_log = guest_run.sections.get("fixture_log", b"").decode(errors="replace")
    rc = guest_run.sections.get("agent_rc", b"?").decode().strip()
    assert rc == "0", f"tracecorr agent exited {rc} in the guest:\n{agent_log}\nfixture log:\n{fixture_log}"

    journal = guest_run.sections.get("journal", b"").decode(errors="replace")
    expected = journaled_records(journal)
    assert len(expected) == arm64_guest.FIXTURE_THREADS, (
        f"the fixture journaled {len(expected)} held records, expected one per thread "
        f"({arm64_guest.FIXTURE_THREADS}):\n{journal}\nfixture log:\n{fixture_log}")

    summary = section_json(guest_run, "agent")
    assert summary.get("reader") == "bpf", f"the agent did not use the BPF reader: {summary.get('reader')}"
    assert "sampler_error" not in summary, f"sampler error: {summary['sampler_error']}\n{agent_log}"
    processes = summary.get("processes", [])
    assert len(processes) == 1, f"expected the fixture as the one process, got {len(processes)}:\n{agent_log}"
    process = processes[0]

    layout = tls_record_layout()
    sampled = [decode_tls_record(bytes.fromhex(r["hex"]), layout) for r in process["records"]]
    sampled_ids = {r["ids"] for r in sampled if r["valid"] and r["trace_present"]}
    wanted = set(expected.values())
    assert sampled_ids == wanted, (
        "records read by the BPF sampler (task->thread.uw.tp_value + TLS offset) differ from the journal:\n"
        f"  only journaled: {sorted(wanted - sampled_ids)}\n  only sampled:   {sorted(sampled_ids - wanted)}\n"
        f"  sampled records: {process['records']}\n{agent_log}")

    # The agent's own correlation view agrees: one transaction per thread with its span.
    transactions = {(t["trace_id"].lower(), t["transaction_id"].lower()): {s.lower() for s in t["span_ids"]}
                    for t in process["transactions"]}
    for trace_id, span_id, transaction_id in wanted:
        assert span_id in transactions.get((trace_id, transaction_id), set()), (
            f"no correlated transaction {trace_id}/{transaction_id} with span {span_id}: {process['transactions']}")


# ---- OTEP 4719 writer rules on a real arm64 kernel ------------------------------

def guest_conform_run(result: arm64_guest.BootResult, job_name: str) -> cs.ConformRun:
    problems = missing_payload()
    if problems or not pctx_jobs():
        pytest.fail("the arm64 conform runs cannot run:\n  " + "\n  ".join(
            problems or [f"the arm64 {PACKAGE} fixtures ({PROGRAM}, mutants.json) are not built under "
                         f"{cs.BUILD}/fixtures/arm64: run scripts/setup.sh --tests"]), pytrace=False)
    return arm64_vm.conform_run(result, next(j for j in [*pctx_jobs(), *elastic_jobs()] if j.name == job_name))


def test_pctx_reference_passes_the_watched_and_kernel_rules(guest_run):
    run = guest_conform_run(guest_run, "pctx_reference")
    verdicts = run.verdicts()
    assert verdicts, f"no report from the guest:\n{run.explain()}"
    for rule in PCTX_WATCHED_RULES + PCTX_KERNEL_RULES:
        assert verdicts.get(rule) == "pass", f"{rule}: {verdicts.get(rule)}\n{run.explain(rule)}"
    assert run.returncode == cs.EXIT_OK, run.explain()
    # Judged on the kernel's evidence, not qemu-user's absence of it.
    assert "qemu-user" not in " ".join(run.result(r)["reason"] for r in PCTX_KERNEL_RULES), run.explain()
    assert "forks seen, no child inherited it" in run.result("PCTX-11")["reason"], run.explain("PCTX-11")
    assert "updates each zeroed the timestamp" in run.result("PCTX-08")["reason"], run.explain("PCTX-08")


@pytest.mark.parametrize("mutant", pctx_mutants(), ids=[m["name"] for m in pctx_mutants()])
def test_pctx_mutant_fails_its_own_rule(guest_run, mutant):
    run = guest_conform_run(guest_run, arm64_vm.job_name("pctx", mutant["name"]))
    assert list(run.verdicts()) == [mutant["requirement"]], run.explain()
    cs.assert_mutant_caught(arm64_vm.KILL_MATRIX_ARCH, mutant, run)


def test_pctx_kernel_rules_each_have_their_mutant():
    """Without this, a missing mutant would leave its rule untested, silently."""
    assert sorted(m["requirement"] for m in pctx_mutants()) == PCTX_KERNEL_RULES, (
        f"arm64 {PACKAGE} mutants of {PCTX_KERNEL_RULES} not all built under {cs.BUILD}/fixtures/arm64")


# ---- Elastic v1's watched rules on arm64's own watchpoints ----------------------

def test_elastic_reference_passes_the_watched_rules(guest_run):
    run = guest_conform_run(guest_run, "elastic_reference")
    assert run.verdicts() == {rule: "pass" for rule in ELASTIC_WATCHED_RULES}, run.explain()
    assert "updates watched store by store" in run.result("TLS-04")["reason"], run.explain("TLS-04")


@pytest.mark.parametrize("mutant", elastic_mutants(), ids=[m["name"] for m in elastic_mutants()])
def test_elastic_watched_mutant_fails_its_own_rule(guest_run, mutant):
    run = guest_conform_run(guest_run, arm64_vm.job_name("elastic", mutant["name"]))
    assert list(run.verdicts()) == [mutant["requirement"]], run.explain()
    cs.assert_mutant_caught(arm64_vm.KILL_MATRIX_ARCH, mutant, run)


def test_elastic_watched_rules_each_have_their_mutant():
    assert sorted(m["requirement"] for m in elastic_mutants()) == ELASTIC_WATCHED_RULES, (
        f"arm64 Elastic mutants {sorted(ELASTIC_WATCHED_MUTANTS.values())} not all built under {cs.BUILD}/fixtures/arm64")
