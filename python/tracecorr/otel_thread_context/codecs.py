"""Thread records as tracecorr reads them, decoded: each thread's record of an inspection, a record's
attributes named through the key map, and the distinct records the host agent's sampler read (the
record's bytes are decoded by libtracecorr; these read its documents).
"""
from __future__ import annotations

from typing import Dict, List

__all__ = ["attributes", "records", "sampled_records"]


def records(document: dict) -> Dict[int, dict]:
    """tid -> the record its thread points to now (threads without one left out)."""
    return {t["tid"]: t["record"] for t in document.get("threads") or [] if t.get("record") is not None}


def attributes(record: dict) -> Dict[str, str]:
    """key -> value of a record's attributes, named through the key map (last occurrence of a key wins)."""
    return {a["key"]: a["value"] for a in record.get("attributes") or []}


def sampled_records(process: dict) -> Dict[int, List[dict]]:
    """tid -> the distinct records the sampler read on that thread (each ``record`` as :func:`records` gives
    one, with ``samples``: how often it was read), from a process of ``tracecorr agent --json`` or
    :meth:`RecordReader.sample`."""
    return {t["tid"]: [dict(r["record"], samples=r["samples"]) for r in t["records"]] for t in process["threads"]}
