"""A profiler's side of OTEP 4719, driven from a test: :class:`ContextReader` reads a process's context from
outside, like the OTel eBPF profiler (the timestamp as cache key).
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional

from .codecs import consistent_mapping
from .target import process_context

__all__ = ["ContextReader"]


class ContextReader:
    """A profiler's side of the protocol: reads a process's context from outside, like the OTel eBPF
    profiler, and keeps every distinct publication it saw (by timestamp)."""

    def __init__(self, target_or_pid):
        self.pid = target_or_pid if isinstance(target_or_pid, int) else target_or_pid.pid
        self.publications: Dict[int, dict] = {}  # monotonic_published_at_ns -> mapping document
        # Consistent reads whose payload differs from the first one read under the same timestamp:
        # the seqlock let a change through (PCTX-10).
        self.torn: List[dict] = []

    def __enter__(self) -> "ContextReader":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def read(self) -> Optional[dict]:
        """One look: the consistently read mapping (None when there is none now)."""
        mapping = consistent_mapping(process_context(self.pid))
        if mapping is not None:
            first = self.publications.setdefault(mapping["header"]["monotonic_published_at_ns"], mapping)
            if first["payload"] != mapping["payload"]:
                self.torn.append(mapping)
        return mapping

    def read_for(self, seconds: float, pause: float = 0.01) -> List[dict]:
        """Reads for ``seconds``; returns the publications seen, oldest first."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.read()
            time.sleep(pause)
        return [self.publications[t] for t in sorted(self.publications)]
