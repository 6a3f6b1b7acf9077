"""The OpenTelemetry process context (OTEP 4719, spec/otel-process-context.md) from Python:
``tracecorr.otel_process_context``.

A process publishes its resource in an ``OTEL_CTX`` mapping; tracecorr's engine reads it
(discovery by name, the header, the timestamp seqlock, the protobuf payload). This package
registers the protocol with the engine package (:mod:`tracecorr.protocol`):

* a :class:`tracecorr.Target` of this protocol (``protocol="otel-process-context"``) needs no
  environment to turn it on, is ready once a consistent read of its context succeeded, and gains
  ``process_context()``;
* the pytest plugin's ``host_agent`` fixture is a :class:`ContextReader`, an out-of-process reader
  polling the context the way a profiler does (the timestamp as cache key).
"""
from __future__ import annotations

import sys
import time
from typing import Dict, List, Optional

from .. import _tracecorr
from .. import protocol as _protocol

PROTOCOL = "otel-process-context"

__all__ = ["PROTOCOL", "ContextReader", "attributes", "launch_environment", "not_ready", "process_context", "resource"]


def launch_environment(enabled: Optional[str] = None, socket_dir: Optional[str] = None) -> Dict[str, str]:
    """Nothing turns the process context on: an SDK publishes it when it starts."""
    del enabled, socket_dir
    return {}


def process_context(target_or_pid) -> dict:
    """The ``tracecorr inspect --json`` member of this protocol: ``mappings`` (each with
    ``header``, ``read`` and ``payload``: ``resource`` and ``attributes`` as lists of
    ``{"key", "type", "value"}``), and the ``findings`` of the writer rules one look judges."""
    pid = target_or_pid if isinstance(target_or_pid, int) else target_or_pid.pid
    return _tracecorr.inspect_process(pid, False, False, PROTOCOL)


def _consistent(document: dict) -> Optional[dict]:
    for mapping in document.get("mappings") or []:
        if (mapping.get("read") or {}).get("consistent") and (mapping.get("payload") or {}).get("error") is None:
            return mapping
    return None


def not_ready(document: dict) -> Optional[str]:
    if not document.get("mappings"):
        return "no OTEL_CTX mapping yet"
    if _consistent(document) is None:
        return "no consistent read of the context yet"
    return None


def resource(document: dict) -> Dict[str, object]:
    """key -> value of the first consistently read mapping's resource ({} when none)."""
    mapping = _consistent(document)
    return {a["key"]: a["value"] for a in (mapping["payload"]["resource"] if mapping else [])}


def attributes(document: dict) -> Dict[str, object]:
    """key -> value of its ``attributes`` (the OTEP's extra attributes)."""
    mapping = _consistent(document)
    return {a["key"]: a["value"] for a in (mapping["payload"]["attributes"] if mapping else [])}


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
        mapping = _consistent(process_context(self.pid))
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


_protocol.register(_protocol.ProtocolPackage(
    id=PROTOCOL,
    module=sys.modules[__name__],
    launch_environment=launch_environment,
    not_ready=not_ready,
    profiler=ContextReader,
    target_helpers={"process_context": process_context},
))
