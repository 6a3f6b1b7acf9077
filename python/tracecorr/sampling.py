"""The engine's samplers: they read threads' records by a :class:`~tracecorr.RecordLayout` a protocol
supplies, and their stacks."""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional

from . import _tracecorr

__all__ = ["make_sampler", "ThreadRecordReader"]


def make_sampler(reader: str = "bpf", frequency_hz: int = 99):
    """A C++ sampler: ``"bpf"`` (needs the BPF build and privileges) or ``"ptrace"``."""
    if reader == "ptrace":
        return _tracecorr.make_ptrace_sampler(frequency_hz)
    if reader == "bpf":
        if not _tracecorr.HAVE_BPF:
            raise _tracecorr.TracecorrError("this tracecorr was built without the BPF sampler; use reader='ptrace'")
        return _tracecorr.make_bpf_sampler(frequency_hz)
    raise ValueError(f"unknown reader {reader!r} (bpf, ptrace)")


class ThreadRecordReader:
    """A profiler's side, driven from a test: looks at every thread's record from outside (each thread
    stopped while it is read, by ``look``: pid -> {tid: record}) and keeps each distinct valid
    (tid, trace_id, span_id) it saw, with the record. A protocol's reader names its look."""

    look: Callable[[int], Dict[int, dict]]
    pause_s = 0.01  # between looks, by default

    def __init__(self, target_or_pid):
        self.pid = target_or_pid if isinstance(target_or_pid, int) else target_or_pid.pid
        self.seen: Dict[tuple, dict] = {}

    def __enter__(self) -> "ThreadRecordReader":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def read(self) -> Dict[int, dict]:
        """One look: tid -> record of the threads with one now; the valid ones are remembered."""
        now = type(self).look(self.pid)
        for tid, record in now.items():
            if record["valid"] == 1:
                self.seen.setdefault((tid, record["trace_id"], record["span_id"]), record)
        return now

    def read_for(self, seconds: float, pause: Optional[float] = None) -> List[dict]:
        """Looks for ``seconds``; returns every distinct valid record seen, in the order first seen."""
        pause = self.pause_s if pause is None else pause
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.read()
            time.sleep(pause)
        return list(self.seen.values())
