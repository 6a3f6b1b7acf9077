"""What the Node.js thread context needs of a process under test: nothing of tracecorr's turns it on, and
it is ready once the struct's module is mapped and the process context declares the schema;
:func:`nodejs_thread_context` is its member of the inspection and :func:`nodejs_records` one look at every
JS thread.

:class:`tracecorr.Target` asks for these through the package's registration (``launch_environment``,
``not_ready``), and gains :func:`nodejs_thread_context` and :func:`nodejs_records` as methods.
"""
from __future__ import annotations

from typing import Dict, Optional

from .. import _tracecorr
from .codecs import records

__all__ = ["PROTOCOL", "launch_environment", "nodejs_records", "nodejs_thread_context", "not_ready"]

PROTOCOL = "otel-nodejs-thread-context"


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


def nodejs_records(target_or_pid) -> Dict[int, dict]:
    return records(nodejs_thread_context(target_or_pid))
