"""The engine's samplers: they read threads' records by a :class:`~tracecorr.RecordLayout` a protocol
supplies, and their stacks."""
from __future__ import annotations

from . import _tracecorr

__all__ = ["make_sampler"]


def make_sampler(reader: str = "bpf", frequency_hz: int = 99):
    """A C++ sampler: ``"bpf"`` (needs the BPF build and privileges) or ``"ptrace"``."""
    if reader == "ptrace":
        return _tracecorr.make_ptrace_sampler(frequency_hz)
    if reader == "bpf":
        if not _tracecorr.HAVE_BPF:
            raise _tracecorr.TracecorrError("this tracecorr was built without the BPF sampler; use reader='ptrace'")
        return _tracecorr.make_bpf_sampler(frequency_hz)
    raise ValueError(f"unknown reader {reader!r} (bpf, ptrace)")
