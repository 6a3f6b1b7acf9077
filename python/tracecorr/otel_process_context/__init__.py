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

Its modules, as every protocol package's: :mod:`~tracecorr.otel_process_context.target` (what a process
under test needs, its inspection), :mod:`~tracecorr.otel_process_context.codecs` (the published context
decoded) and :mod:`~tracecorr.otel_process_context.agent` (the profiler's side).
"""
from __future__ import annotations

import sys

from .. import protocol as _protocol
from . import agent, codecs, target
from .agent import ContextReader
from .codecs import attributes, resource
from .target import PROTOCOL, launch_environment, not_ready, process_context

__all__ = ["PROTOCOL", "ContextReader", "agent", "attributes", "codecs", "launch_environment", "not_ready",
           "process_context", "resource", "target"]


_protocol.register(_protocol.ProtocolPackage(
    id=PROTOCOL,
    module=sys.modules[__name__],
    launch_environment=launch_environment,
    not_ready=not_ready,
    profiler=ContextReader,
    target_helpers={"process_context": process_context},
))
