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
"""
from __future__ import annotations

import sys
import time
from typing import Dict, List, Optional

from .. import _tracecorr
from .. import protocol as _protocol
from ..sampling import make_sampler

PROTOCOL = "otel-thread-context"

__all__ = ["PROTOCOL", "RecordReader", "attributes", "launch_environment", "not_ready", "records", "sampled_records",
           "thread_context", "thread_records"]


def launch_environment(enabled: Optional[str] = None, socket_dir: Optional[str] = None) -> Dict[str, str]:
    """Nothing turns the thread context on: an SDK publishes it when it starts."""
    del enabled, socket_dir
    return {}


def thread_context(target_or_pid, read_threads: bool = True) -> dict:
    """The ``tracecorr inspect --json`` member of this protocol: ``variable`` (module, symbol, relocations),
    ``access`` (the TLS access model and how a thread's copy is reached), ``process_context`` (schema
    version and key map), ``threads`` (each with its ``record``: ids, valid, flags, entries and
    ``attributes`` named through the key map) and the ``findings`` one look judges."""
    pid = target_or_pid if isinstance(target_or_pid, int) else target_or_pid.pid
    return _tracecorr.inspect_process(pid, read_threads, False, PROTOCOL)


def not_ready(document: dict) -> Optional[str]:
    if document.get("variable") is None:
        return "no module defines otel_thread_ctx_v1 in its .dynsym yet"
    if not (document.get("process_context") or {}).get("known_schema"):
        return "the process context names no known threadlocal.schema_version yet"
    return None


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


def thread_records(target_or_pid) -> Dict[int, dict]:
    """One look at every thread: tid -> its record (see :func:`records`)."""
    return records(thread_context(target_or_pid))


class RecordReader:
    """A profiler's side of the protocol: looks at every thread's record from outside, each thread stopped
    while it is read, and keeps each distinct (tid, trace_id, span_id) it saw with the record."""

    def __init__(self, target_or_pid):
        self.pid = target_or_pid if isinstance(target_or_pid, int) else target_or_pid.pid
        self.seen: Dict[tuple, dict] = {}

    def __enter__(self) -> "RecordReader":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def read(self) -> Dict[int, dict]:
        """One look: tid -> record of the threads with one now; the valid ones are remembered."""
        now = thread_records(self.pid)
        for tid, record in now.items():
            if record["valid"] == 1:
                self.seen.setdefault((tid, record["trace_id"], record["span_id"]), record)
        return now

    def sample(self, duration: float, reader: str = "bpf", *, frequency_hz: int = 99) -> dict:
        """Runs the host agent's sampler (``"bpf"``: the BPF program walks the DTV itself for dynamic TLS;
        ``"ptrace"``) over the process for ``duration`` seconds. Returns its entry of ``tracecorr agent
        --json``: ``records_at`` (module, access model, key map), ``statuses``, and ``threads``, each with its
        sample count, ``statuses`` (``record``, ``record_pointer_null``, ``tls_block_not_allocated``, ...) and
        the distinct ``records`` read (``samples``, ``record``: ids, valid, flags, named ``attributes``);
        :func:`sampled_records` gives them per tid."""
        summary = _tracecorr.sample_records(make_sampler(reader, frequency_hz), [self.pid], duration)
        for process in summary["processes"]:
            if process["pid"] == self.pid and not process["exited"]:
                return process
        raise _tracecorr.TracecorrError(f"pid {self.pid} published no {PROTOCOL} while it was sampled")

    def read_for(self, seconds: float, pause: float = 0.01) -> List[dict]:
        """Looks for ``seconds``; returns every distinct valid record seen, in the order first seen."""
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
    target_helpers={"thread_context": thread_context, "thread_records": thread_records},
))
