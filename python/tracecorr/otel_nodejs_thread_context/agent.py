"""A profiler's side of the Node.js thread context, driven from a test: :class:`RecordReader` looks at every
JS thread from outside, through the inspector (the agent's sampling of this schema comes later, issue 30).
"""
from __future__ import annotations

from ..sampling import ThreadRecordReader
from .target import nodejs_records

__all__ = ["RecordReader"]


class RecordReader(ThreadRecordReader):
    """Looks at every JS thread from outside, each stopped while the inspector walks it."""

    look = staticmethod(nodejs_records)
    pause_s = 0.05  # a walk stops the thread longer than a record read
