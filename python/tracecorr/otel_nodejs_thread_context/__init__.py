"""The Node.js thread context (``nodejs_v1_dev``, spec/otel-nodejs-thread-context.md) from Python:
``tracecorr.otel_nodejs_thread_context``.

Each JS thread of a Node.js process publishes a 32-byte struct, ``otel_thread_ctx_nodejs_v1``, from which a
reader walks V8's current async-context frame to an OTEP 4947 record. tracecorr's inspector reads every thread
stopped and shows the struct, each step of the walk and the record. This package registers the protocol with
the engine package (:mod:`tracecorr.protocol`):

* a :class:`tracecorr.Target` of this protocol (``protocol="otel-nodejs-thread-context"``) needs no
  environment of tracecorr's (a tracer turns it on), is ready once the struct's module is mapped and the
  process context declares the schema, and gains ``nodejs_thread_context()`` and ``nodejs_records()``;
* the pytest plugin's ``host_agent`` fixture is a :class:`RecordReader` that looks at every JS thread the
  way a profiler does (through the inspector: the agent's sampling of this schema comes later, issue 30).
"""
from __future__ import annotations

import sys
import time
from typing import Dict, List, Optional

from .. import _tracecorr
from .. import protocol as _protocol

PROTOCOL = "otel-nodejs-thread-context"

__all__ = ["PROTOCOL", "RecordReader", "launch_environment", "not_ready", "nodejs_records", "nodejs_thread_context",
           "records"]


def launch_environment(enabled: Optional[str] = None, socket_dir: Optional[str] = None) -> Dict[str, str]:
    """Nothing of tracecorr's turns it on: the tracer does (dd-trace: DD_TRACE_OTEL_CTX_ENABLED=true)."""
    del enabled, socket_dir
    return {}


def nodejs_thread_context(target_or_pid, read_threads: bool = True) -> dict:
    """The ``tracecorr inspect --json`` member of this protocol: ``variable``, ``access``,
    ``process_context``, ``threads`` (each with its ``struct``, ``walk`` and ``record``) and ``findings``."""
    pid = target_or_pid if isinstance(target_or_pid, int) else target_or_pid.pid
    return _tracecorr.inspect_process(pid, read_threads, False, PROTOCOL)


def not_ready(document: dict) -> Optional[str]:
    if document.get("variable") is None:
        return "no module defines otel_thread_ctx_nodejs_v1 in its .dynsym yet"
    if not (document.get("process_context") or {}).get("known_schema"):
        return "the process context declares no nodejs_v1_dev or nodejs_v1 yet"
    return None


def records(document: dict) -> Dict[int, dict]:
    """tid -> the record its walk reached now (threads whose walk ended elsewhere left out)."""
    return {t["tid"]: t["record"] for t in document.get("threads") or [] if t.get("record") is not None}


def nodejs_records(target_or_pid) -> Dict[int, dict]:
    return records(nodejs_thread_context(target_or_pid))


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


_protocol.register(_protocol.ProtocolPackage(
    id=PROTOCOL,
    module=sys.modules[__name__],
    launch_environment=launch_environment,
    not_ready=not_ready,
    profiler=RecordReader,
    target_helpers={"nodejs_thread_context": nodejs_thread_context, "nodejs_records": nodejs_records},
))
