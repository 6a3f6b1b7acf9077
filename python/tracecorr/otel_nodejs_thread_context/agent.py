"""A profiler's side of the Node.js thread context, driven from a test: :class:`RecordReader` looks at every
JS thread from outside, through the inspector (the agent's sampling of this schema comes later, issue 30).
"""
from __future__ import annotations

import time
from typing import Dict, List

from .target import nodejs_records

__all__ = ["RecordReader"]


class RecordReader:
    """A profiler's side: looks at every JS thread from outside, each stopped while it is walked, and keeps
    each distinct valid (tid, trace_id, span_id) it saw."""

    def __init__(self, target_or_pid):
        self.pid = target_or_pid if isinstance(target_or_pid, int) else target_or_pid.pid
        self.seen: Dict[tuple, dict] = {}

    def __enter__(self) -> "RecordReader":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def read(self) -> Dict[int, dict]:
        now = nodejs_records(self.pid)
        for tid, record in now.items():
            if record["valid"] == 1:
                self.seen.setdefault((tid, record["trace_id"], record["span_id"]), record)
        return now

    def read_for(self, seconds: float, pause: float = 0.05) -> List[dict]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.read()
            time.sleep(pause)
        return list(self.seen.values())
