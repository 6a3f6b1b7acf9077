"""A local attacker floods tracecorr's OTLP receiver while `tracecorr conform`
judges the reference fixture (issue 16): any local user can reach 127.0.0.1.

On every receiver the run opens (one per session), the attacker sends
- 100 MB of header lines on one request,
- a 200 MB request line,
- 600 connections that trickle a header byte every half second, each opened
  again as soon as it is cut.
The receiver must cut each of them off early (the request line and headers
share a 32 KiB buffer per connection; a request has 10 s in all; connections
from outside the judged tree beyond 8 are closed at accept), keep serving
the fixture's exports, and stop its sessions on time: the verdicts are the
same as in the session's unflooded reference run, and tracecorr's peak RSS
stays under 300 MB.
"""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import conform_support as cs

ARCH = "x86_64"
HEADER_FLOOD_BYTES = 100 << 20
REQUEST_LINE_FLOOD_BYTES = 200 << 20
SLOW_CONNECTIONS = 600
PEAK_RSS_LIMIT_KB = 300 << 10
# What the attacker may push before the receiver closes the connection: its
# 32 KiB header buffer plus what the kernel's socket buffers hold.
CUT_OFF_BOUND = 16 << 20
CHUNK = b"a" * (64 << 10)
# Judged on when exports arrived (deferral, settings and registrations taking
# effect, host ids from a point in time on): these read export timing.
DELAY_JUDGED = ({f"DEFER-0{i}" for i in range(1, 8)} | {f"CONF-0{i}" for i in range(1, 6)} |
                {"MSG-02", "MSG-03", "HOST-01", "HOST-02"})


class Attack:
    """Results of every flood, appended by the attacker threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.floods: list[tuple[str, int, str]] = []  # (kind, bytes accepted, how it ended)
        self.slow: list[tuple[float, float | None]] = []  # (opened, closed by the receiver or None)
        self.stop = threading.Event()

    def add_flood(self, kind: str, sent: int, ended: str) -> None:
        with self.lock:
            self.floods.append((kind, sent, ended))


def flood(attack: Attack, port: int, kind: str) -> None:
    """Sends one oversized request line or header block until the receiver
    closes the connection; records how many bytes it took."""
    sent = 0
    total = HEADER_FLOOD_BYTES if kind == "headers" else REQUEST_LINE_FLOOD_BYTES
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.settimeout(15)  # a receiver that stops reading but keeps the socket would stall here
            if kind == "headers":
                s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
                line = b"X-Flood: " + b"h" * 1000 + b"\r\n"
                block = line * 64
            else:
                s.sendall(b"POST /")
                block = CHUNK
            while sent < total and not attack.stop.is_set():
                s.sendall(block)
                sent += len(block)
            attack.add_flood(kind, sent, "attacker stopped" if sent < total else "all sent")
    except socket.timeout:
        attack.add_flood(kind, sent, "stalled")
    except OSError:
        attack.add_flood(kind, sent, "closed by receiver")


def slow_connections(attack: Attack, port: int) -> None:
    """Holds SLOW_CONNECTIONS connections that each send one header byte every
    half second, each opened again as soon as the receiver is seen to have cut
    it (issue 29: 600 against the receiver's 512 delayed the agent's exports by
    5 s); notes when the receiver closes each."""
    def connect():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            s.setblocking(False)
            return s, time.monotonic()
        except OSError:
            return None  # the receiver is gone (its session ended)

    open_ = [c for c in (connect() for _ in range(SLOW_CONNECTIONS)) if c]
    while open_ and not attack.stop.is_set():
        still = []
        for s, opened in open_:
            try:
                s.send(b"s")
                try:
                    if s.recv(4096) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                still.append((s, opened))
            except OSError:
                s.close()
                with attack.lock:
                    attack.slow.append((opened, time.monotonic()))
                if again := connect():
                    still.append(again)
        open_ = still
        attack.stop.wait(0.5)
    with attack.lock:
        for s, opened in open_:
            attack.slow.append((opened, None))
            s.close()


def attacker(attack: Attack, endpoints: Path) -> None:
    """Attacks every receiver the run opens, as soon as its endpoint appears."""
    seen: set[str] = set()
    threads = []
    while not attack.stop.is_set():
        for line in endpoints.read_text().split() if endpoints.exists() else []:
            if line in seen:
                continue
            seen.add(line)
            port = int(line.rsplit(":", 1)[1])
            for target, args in ((slow_connections, (attack, port)), (flood, (attack, port, "headers")),
                                 (flood, (attack, port, "request-line"))):
                t = threading.Thread(target=target, args=args, daemon=True)
                t.start()
                threads.append(t)
        attack.stop.wait(0.05)
    for t in threads:
        t.join(30)


def conform_flooded(out_dir: Path) -> tuple[cs.ConformRun, int, Attack, float]:
    out_dir.mkdir(parents=True, exist_ok=True)
    endpoints = out_dir / "endpoints"
    command, _ = cs.arch_command(ARCH, cs.fixture_program(ARCH))
    # The launch line records the endpoint each session gives the agent, then
    # becomes the agent.
    wrapped = ["/bin/sh", "-c", f'echo "$OTEL_EXPORTER_OTLP_ENDPOINT" >> {endpoints}; exec "$@"', "sh", *command]
    json_path = out_dir / "report.json"
    argv = [str(cs.TRACECORR), "conform", "--quiet", "--json", str(json_path), "--", *wrapped]
    attack = Attack()
    thread = threading.Thread(target=attacker, args=(attack, endpoints), daemon=True)
    thread.start()
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # The run's own peak RSS (ru_maxrss of the reaped child, in KiB).
    deadline = started + cs.RUN_TIMEOUT_S
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.1)
    ended = time.monotonic()
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout, stderr = proc.stdout.read().decode(errors="replace"), proc.stderr.read().decode(errors="replace")
    attack.stop.wait(1.0)  # lets the slow-connection loops notice the last closes
    attack.stop.set()
    thread.join(60)
    report = cs.json.loads(json_path.read_text()) if json_path.exists() else None
    run = cs.ConformRun(argv, proc.returncode, report, stdout, stderr, ended - started, json_path, None)
    return run, usage.ru_maxrss, attack, ended


def test_flooded_receiver_keeps_verdicts_and_memory(tmp_path):
    baseline = cs.reference_run(ARCH, tmp_path / "baseline")
    assert baseline.report is not None, baseline.explain()

    run, peak_rss_kb, attack, ended = conform_flooded(tmp_path / "flooded")
    assert run.report is not None, run.explain()
    print(f"flooded run: {run.seconds:.1f} s (baseline {baseline.seconds:.1f} s), peak RSS {peak_rss_kb // 1024} MiB, "
          f"{len(attack.floods)} floods (max {max((f[1] for f in attack.floods), default=0)} bytes accepted), "
          f"{len(attack.slow)} slow connections (longest held "
          f"{max((c - o for o, c in attack.slow if c), default=0):.1f} s)")

    # The attack happened, on every session's receiver, and was cut off.
    kinds = {kind for kind, _, _ in attack.floods}
    assert kinds == {"headers", "request-line"}, attack.floods
    for kind, sent, how in attack.floods:
        assert how == "closed by receiver" and sent < CUT_OFF_BOUND, (kind, sent, how)
    assert len(attack.slow) >= SLOW_CONNECTIONS, "the slow connections never reached a receiver"
    still_open = [opened for opened, closed in attack.slow if closed is None]
    assert not still_open, f"{len(still_open)} slow connections outlived the run"

    # Same verdicts as without the attack, in bounded memory. The requirements
    # judged on export timing flip between pass and fail between two unflooded
    # runs on a loaded machine (seen here at load 13-28 on 2 CPUs: DEFER-04
    # failed in a baseline run whose exporter waited up to 3 s for the CPU;
    # MSG-02 and CONF-03 flipped), so for those the flooded run
    # must reach a judgement whenever the baseline did: a starved receiver
    # shows as skips, errors or no report at all (before issue 16: DEFER-01
    # failed with 15 skips, the run took 92 s).
    baseline_verdicts, flooded_verdicts = baseline.verdicts(), run.verdicts()
    assert flooded_verdicts.keys() == baseline_verdicts.keys()
    judged = {"pass", "fail", "warn"}
    reasons = {r["id"]: r["reason"] for r in run.report["results"]}
    changed = {}
    for requirement, verdict in flooded_verdicts.items():
        expected = baseline_verdicts[requirement]
        if requirement in DELAY_JUDGED and verdict in judged and expected in judged:
            continue
        # A timing failure while something outside the tree connected is inconclusive by design, saying so.
        if requirement in DELAY_JUDGED and verdict == "error" and "under attack" in reasons[requirement]:
            continue
        if verdict != expected:
            changed[requirement] = f"{expected} -> {verdict}"
    assert not changed, f"verdicts changed under the flood: {changed}\n{run.explain()}"
    # The attack is counted, and no verdict blames the agent's exporter for what it did (issue 29).
    assert sum(v for k, v in run.report["counters"].items() if k.startswith("connections_refused.")) > 0
    blamed = [f"{r['id']}: {r['reason']}" for r in run.report["results"] if "OTEL_BSP_SCHEDULE_DELAY" in r["reason"]]
    assert not blamed, blamed
    assert peak_rss_kb < PEAK_RSS_LIMIT_KB, f"peak RSS {peak_rss_kb} KiB"
