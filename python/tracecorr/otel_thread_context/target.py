"""What OTEP 4947 needs of a process under test: no environment turns it on, and it is ready once the
variable is found and the process context names the schema; :func:`thread_context` is its member of the
inspection and :func:`thread_records` one look at every thread.

:class:`tracecorr.Target` asks for these through the package's registration (``launch_environment``,
``not_ready``), and gains :func:`thread_context` and :func:`thread_records` as methods.
"""
from __future__ import annotations

from typing import Dict, Optional

from .. import _tracecorr
from .codecs import records

__all__ = ["PROTOCOL", "launch_environment", "not_ready", "thread_context", "thread_records"]

PROTOCOL = "otel-thread-context"


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


def thread_records(target_or_pid) -> Dict[int, dict]:
    """One look at every thread: tid -> its record (see :func:`records`)."""
    return records(thread_context(target_or_pid))
