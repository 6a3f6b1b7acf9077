"""A profiler's side of OTEP 4947, driven from a test: :class:`RecordReader` looks at every thread's record
from outside the way a profiler does, and runs the host agent's sampler (BPF or ptrace) over a process.
"""
from __future__ import annotations

import time
from typing import Dict, List

from .. import _tracecorr
from ..sampling import make_sampler
from .target import PROTOCOL, thread_records

__all__ = ["RecordReader"]


class RecordReader:
    """A profiler's side of the protocol: looks at every thread's record from outside, each thread stopped
    while it is read, and keeps each distinct (tid, trace_id, span_id) it saw with the record."""

    def __init__(self, target_or_pid):
        self.pid = target_or_pid if isinstance(target_or_pid, int) else target_or_pid.pid
        self.seen: Dict[tuple, dict] = {}

    def __enter__(self) -> "RecordReader":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def read(self) -> Dict[int, dict]:
        """One look: tid -> record of the threads with one now; the valid ones are remembered."""
        now = thread_records(self.pid)
        for tid, record in now.items():
            if record["valid"] == 1:
                self.seen.setdefault((tid, record["trace_id"], record["span_id"]), record)
        return now

    def sample(self, duration: float, reader: str = "bpf", *, frequency_hz: int = 99) -> dict:
        """Runs the host agent's sampler (``"bpf"``: the BPF program walks the DTV itself for dynamic TLS;
        ``"ptrace"``) over the process for ``duration`` seconds. Returns its entry of ``tracecorr agent
        --json``: ``records_at`` (module, access model, key map), ``statuses``, and ``threads``, each with its
        sample count, ``statuses`` (``record``, ``record_pointer_null``, ``tls_block_not_allocated``, ...) and
        the distinct ``records`` read (``samples``, ``record``: ids, valid, flags, named ``attributes``);
        :func:`sampled_records` gives them per tid."""
        summary = _tracecorr.sample_records(make_sampler(reader, frequency_hz), [self.pid], duration)
        for process in summary["processes"]:
            if process["pid"] == self.pid and not process["exited"]:
                return process
        raise _tracecorr.TracecorrError(f"pid {self.pid} published no {PROTOCOL} while it was sampled")

    def read_for(self, seconds: float, pause: float = 0.01) -> List[dict]:
        """Looks for ``seconds``; returns every distinct valid record seen, in the order first seen."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.read()
            time.sleep(pause)
        return list(self.seen.values())
