"""Elastic v1 (spec/elastic-v1.md) from Python: the protocol's package, beside its bindings
``tracecorr._tracecorr.elastic_v1`` (python/src/elastic_v1/).

* :mod:`~tracecorr.elastic_v1.messages` builds, truncates and mutates the datagrams a profiler sends;
* :class:`HostAgent` talks to a process's socket like a profiler would, and can run the reference
  host agent (BPF or ptrace sampler) against it;
* the codecs of the per-thread record (:class:`TlsRecord`) and the process storage
  (:class:`ProcessStorage`), the record's :func:`tls_record_layout` for the engine's samplers, and
  the registry's constants (:data:`spec`);
* :func:`registry`, :func:`attribute_name` and :func:`stack_trace_ids` (the span attribute).

It registers with the engine package (:mod:`tracecorr.protocol`): a :class:`tracecorr.Target` of
this protocol is launched with :func:`~tracecorr.elastic_v1.target.launch_environment` and gains
``socket_path()``, ``active_records()`` and ``wait_for_records()``; the pytest plugin's
``host_agent`` fixture is a :class:`HostAgent`. The names that lived in ``tracecorr`` before this
package existed (``tracecorr.TlsRecord``, ``tracecorr.messages``, ...) still resolve here.
"""
from __future__ import annotations

import sys
from typing import Optional

from .. import protocol as _protocol
from .._tracecorr import elastic_v1 as _native
from . import agent, messages, target
from .agent import BackgroundSampling, HostAgent
from .target import PROTOCOL, active_records, launch_environment, not_ready, socket_path, wait_for_records

# The bindings, under the names tracecorr exported them by.
spec = _native.spec
TlsRecord = _native.TlsRecord
ProcessStorage = _native.ProcessStorage
Registration = _native.Registration
Correlation = _native.Correlation
UnknownMessage = _native.UnknownMessage
encode = _native.encode
decode_message = _native.decode_message
minimum_size = _native.minimum_size
describe = _native.describe
encode_tls_record = _native.encode_tls_record
decode_tls_record = _native.decode_tls_record
encode_process_storage = _native.encode_process_storage
decode_process_storage = _native.decode_process_storage
tls_record_layout = _native.tls_record_layout
stack_trace_id = _native.stack_trace_id

__all__ = [
    "PROTOCOL", "BackgroundSampling", "Correlation", "HostAgent", "ProcessStorage", "Registration", "TlsRecord",
    "UnknownMessage", "active_records", "agent", "attribute_name", "decode_message", "decode_process_storage",
    "decode_tls_record", "describe", "encode", "encode_process_storage", "encode_tls_record", "launch_environment",
    "messages", "minimum_size", "not_ready", "registry", "socket_path", "spec", "stack_trace_id", "stack_trace_ids",
    "target", "tls_record_layout", "wait_for_records",
]


def registry() -> dict:
    """spec/elastic-v1.json as compiled into the library, parsed (a fresh dict each call)."""
    from .. import registry as registry_of

    return registry_of(PROTOCOL)


def attribute_name() -> str:
    """The span attribute carrying stack trace ids."""
    return spec.kAttributeName


def stack_trace_ids(span) -> Optional[list]:
    """The span's stack trace ids attribute (None when absent). Check ``span.attribute_type(name)`` for
    the OTLP type (ATTR-02)."""
    return span.attribute(spec.kAttributeName)


_protocol.register(_protocol.ProtocolPackage(
    id=PROTOCOL,
    module=sys.modules[__name__],
    launch_environment=launch_environment,
    not_ready=not_ready,
    profiler=HostAgent,
    target_helpers={"socket_path": socket_path, "active_records": active_records,
                    "wait_for_records": wait_for_records},
    # What tracecorr and tracecorr.otlp exported of Elastic v1 before it had a package.
    exports={
        "tracecorr": ("Correlation", "HostAgent", "ProcessStorage", "Registration", "TlsRecord", "UnknownMessage",
                      "attribute_name", "decode_message", "tls_record_layout"),
        "tracecorr.otlp": ("stack_trace_ids",),
    },
    legacy_modules={"messages": messages, "agent": agent},
))
