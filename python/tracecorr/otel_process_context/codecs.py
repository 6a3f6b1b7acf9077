"""The context a process published, decoded: the first consistently read mapping of an inspection, its
resource and its attributes (the payload's protobuf is decoded by libtracecorr; these read its document).
"""
from __future__ import annotations

from typing import Dict, Optional

__all__ = ["attributes", "consistent_mapping", "resource"]


def consistent_mapping(document: dict) -> Optional[dict]:
    """The first mapping read consistently (the seqlock held) whose payload decoded, or None."""
    for mapping in document.get("mappings") or []:
        if (mapping.get("read") or {}).get("consistent") and (mapping.get("payload") or {}).get("error") is None:
            return mapping
    return None


def resource(document: dict) -> Dict[str, object]:
    """key -> value of the first consistently read mapping's resource ({} when none)."""
    mapping = consistent_mapping(document)
    return {a["key"]: a["value"] for a in (mapping["payload"]["resource"] if mapping else [])}


def attributes(document: dict) -> Dict[str, object]:
    """key -> value of its ``attributes`` (the OTEP's extra attributes)."""
    mapping = consistent_mapping(document)
    return {a["key"]: a["value"] for a in (mapping["payload"]["attributes"] if mapping else [])}
