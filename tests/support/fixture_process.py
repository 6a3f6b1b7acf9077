"""A fixture program under test: run (natively, or under qemu-aarch64 for arm64) in a
process group of its own, its stdout read line by line with a bound, its journal
(TRACECORR_FIXTURE_JOURNAL, docs/design/fixture-journal.md) read back, its
memory read through /proc/PID/mem, and stopped as a group.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

QEMU = shutil.which("qemu-aarch64")
AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"
# Generous bound for waiting on a fixture; a missed event is a failure, not a slow pass.
WAIT_S = 20.0


def read_journal(path: Path, event: str | None = None) -> list[dict]:
    """A fixture's JSON-lines journal (TRACECORR_FIXTURE_JOURNAL): its whole lines, the one being
    written left out; only `event`'s when given."""
    if not path.exists():
        return []
    # Cut at the last newline before decoding: the line being written may end inside a
    # multi-byte character (a writer's 4096-byte flush, read under load: issue 25's stress CI).
    data = path.read_bytes()
    lines = [json.loads(line) for line in data[:data.rfind(b"\n") + 1].decode().splitlines()]
    return [e for e in lines if event is None or e.get("event") == event]


def command_for(arch, path):
    """The command that runs `path` built for `arch` here. qemu-user maps 64-bit guests at
    guest address = host address, so the addresses an arm64 fixture prints and journals are
    the ones /proc/PID/maps and /proc/PID/mem of the qemu process use."""
    if arch == "arm64":
        if QEMU is None:
            pytest.skip("qemu-aarch64 not installed")
        return [QEMU, "-L", AARCH64_SYSROOT, str(path)]
    return [str(path)]


class FixtureProcess:
    """One fixture program started in a process group of its own (stopped as a group)."""

    def __init__(self, command, journal_path, env=None):
        self.journal_path = Path(journal_path)
        environment = dict(os.environ if env is None else env, TRACECORR_FIXTURE_JOURNAL=str(self.journal_path))
        self.proc = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     process_group=0)
        self.returncode = None
        self.stderr = ""
        self._pending = b""

    def read_line(self):
        deadline = time.monotonic() + WAIT_S
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            chunk = os.read(self.proc.stdout.fileno(), 4096) if ready else b""
            if not chunk:
                stderr = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
                pytest.fail(f"no stdout line from the fixture (exit {self.proc.poll()}): {stderr}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def read(self, address, size):
        with open(f"/proc/{self.proc.pid}/mem", "rb", buffering=0) as mem:
            mem.seek(address)
            data = mem.read(size)
        assert len(data) == size, f"short read at {address:#x}"
        return data

    def journal(self, event=None):
        return read_journal(self.journal_path, event)

    def wait_journal(self, event, count, between=lambda: time.sleep(0.02)):
        """The journal's `event` lines once there are `count`, calling `between` while waiting."""
        deadline = time.monotonic() + WAIT_S
        while len(self.journal(event)) < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                pytest.fail(f"the journal has {len(self.journal(event))} {event} events, waited for {count}")
            between()
        return self.journal(event)

    def stop(self):
        """SIGTERM to the group (the fixture and any children); SIGKILL what is left."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.returncode = self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.returncode = None
        except ProcessLookupError:
            self.returncode = self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.stderr = self.proc.stderr.read().decode(errors="replace")
        self.proc.stdout.close()
        self.proc.stderr.close()
