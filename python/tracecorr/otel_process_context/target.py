"""What OTEP 4719 needs of a process under test: no environment turns it on, and it is ready once a
consistent read of its context succeeded; :func:`process_context` is its member of the inspection.

:class:`tracecorr.Target` asks for these through the package's registration (``launch_environment``,
``not_ready``), and gains :func:`process_context` as a method.
"""
from __future__ import annotations

from typing import Dict, Optional

from .. import _tracecorr
from .codecs import consistent_mapping

__all__ = ["PROTOCOL", "launch_environment", "not_ready", "process_context"]

PROTOCOL = "otel-process-context"


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


def not_ready(document: dict) -> Optional[str]:
    if not document.get("mappings"):
        return "no OTEL_CTX mapping yet"
    if consistent_mapping(document) is None:
        return "no consistent read of the context yet"
    return None
