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

Its modules, as every protocol package's: :mod:`~tracecorr.otel_nodejs_thread_context.target` (what a
process under test needs, its inspection), :mod:`~tracecorr.otel_nodejs_thread_context.codecs` (records
decoded) and :mod:`~tracecorr.otel_nodejs_thread_context.agent` (the profiler's side).
"""
from __future__ import annotations

import sys

from .. import protocol as _protocol
from . import agent, codecs, target
from .agent import RecordReader
from .codecs import records
from .target import PROTOCOL, launch_environment, nodejs_records, nodejs_thread_context, not_ready

__all__ = ["PROTOCOL", "RecordReader", "agent", "codecs", "launch_environment", "not_ready", "nodejs_records",
           "nodejs_thread_context", "records", "target"]


_protocol.register(_protocol.ProtocolPackage(
    id=PROTOCOL,
    module=sys.modules[__name__],
    launch_environment=launch_environment,
    not_ready=not_ready,
    profiler=RecordReader,
    target_helpers={"nodejs_thread_context": nodejs_thread_context, "nodejs_records": nodejs_records},
))
