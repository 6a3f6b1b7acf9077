"""The OpenTelemetry thread context (OTEP 4947, spec/otel-thread-context.md) from Python:
``tracecorr.otel_thread_context``.

Each thread of a process points its thread-local ``otel_thread_ctx_v1`` at a record of its current trace
and span and a few attributes, whose key names the process context (OTEP 4719) publishes. tracecorr's
engine finds the variable in every TLS access model and reads each thread's record while the thread is
stopped. This package registers the protocol with the engine package (:mod:`tracecorr.protocol`):

* a :class:`tracecorr.Target` of this protocol (``protocol="otel-thread-context"``) needs no environment
  to turn it on, is ready once the variable is found and the process context names the schema, and
  gains ``thread_context()`` and ``thread_records()``;
* the pytest plugin's ``host_agent`` fixture is a :class:`RecordReader`, an out-of-process reader that
  looks at every thread's record the way a profiler does and keeps what it saw, and whose
  :meth:`RecordReader.sample` runs the host agent's sampler (BPF or ptrace, every TLS model) over it.

Its modules, as every protocol package's: :mod:`~tracecorr.otel_thread_context.target` (what a process
under test needs, its inspection), :mod:`~tracecorr.otel_thread_context.codecs` (records decoded) and
:mod:`~tracecorr.otel_thread_context.agent` (the profiler's side).
"""
from __future__ import annotations

import sys

from .. import protocol as _protocol
from . import agent, codecs, target
from .agent import RecordReader
from .codecs import attributes, records, sampled_records
from .target import PROTOCOL, launch_environment, not_ready, thread_context, thread_records

__all__ = ["PROTOCOL", "RecordReader", "agent", "attributes", "codecs", "launch_environment", "not_ready", "records",
           "sampled_records", "target", "thread_context", "thread_records"]


_protocol.register(_protocol.ProtocolPackage(
    id=PROTOCOL,
    module=sys.modules[__name__],
    launch_environment=launch_environment,
    not_ready=not_ready,
    profiler=RecordReader,
    target_helpers={"thread_context": thread_context, "thread_records": thread_records},
))
