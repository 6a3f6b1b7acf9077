"""The records the walk reached, decoded: each JS thread's OTEP 4947 record of an inspection (the struct,
the walk and the record are decoded by libtracecorr; this reads its document).
"""
from __future__ import annotations

from typing import Dict

__all__ = ["records"]


def records(document: dict) -> Dict[int, dict]:
    """tid -> the record its walk reached now (threads whose walk ended elsewhere left out)."""
    return {t["tid"]: t["record"] for t in document.get("threads") or [] if t.get("record") is not None}
