"""A profiler's side of OTEP 4947, driven from a test: :class:`RecordReader` looks at every thread's record
from outside the way a profiler does, and runs the host agent's sampler (BPF or ptrace) over a process.
"""
from __future__ import annotations

from .. import _tracecorr
from ..sampling import ThreadRecordReader, make_sampler
from .target import PROTOCOL, thread_records

__all__ = ["RecordReader"]


class RecordReader(ThreadRecordReader):
    """A profiler's side of the protocol: looks at every thread's record from outside, each thread stopped
    while it is read, and runs the host agent's sampler over the process."""

    look = staticmethod(thread_records)

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
