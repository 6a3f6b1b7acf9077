"""What Elastic v1 needs of a process under test: the environment that turns the integration on, and what
the process published (its storage, its threads' records), read from its inspection.

:class:`tracecorr.Target` asks for these through the package's registration (``launch_environment``,
``not_ready``), and gains :func:`socket_path`, :func:`active_records` and :func:`wait_for_records` as
methods; each also takes a Target (or, for :func:`socket_path`, a pid) directly.
"""
from __future__ import annotations

import time
from typing import Dict, Optional

from .._tracecorr import elastic_v1 as _native
from .._tracecorr import inspect_process

__all__ = ["PROTOCOL", "launch_environment", "not_ready", "socket_path", "active_records", "wait_for_records"]

PROTOCOL = "elastic-v1"  # the ProtocolSpec id


def launch_environment(enabled: Optional[str] = "true", socket_dir: Optional[str] = None) -> Dict[str, str]:
    """The integration switch (``true``/``false``/``auto``; None: left unset) and the socket directory."""
    env: Dict[str, str] = {}
    if enabled is not None:
        env[_native.spec.kEnvEnabled] = enabled
    if socket_dir:
        env[_native.spec.kEnvSocketDir] = socket_dir
    return env


def not_ready(inspection: dict) -> Optional[str]:
    """None once the process storage is published and names a socket; else what is missing."""
    storage = inspection.get("storage") or {}
    if storage.get("published") and storage.get("socket_file_path"):
        return None
    return "no process storage with a socket path"


def _inspect(target, read_threads: bool, check_socket_reachable: bool = False) -> dict:
    if isinstance(target, int):
        return inspect_process(target, read_threads, check_socket_reachable, PROTOCOL)
    return target.inspect(read_threads=read_threads, check_socket_reachable=check_socket_reachable)


def socket_path(target) -> str:
    """socket_file_path from the published process storage (as the process sees it), of a Target or a pid."""
    path = (_inspect(target, read_threads=False).get("storage") or {}).get("socket_file_path")
    if not path:
        who = f"pid {target}" if isinstance(target, int) else target.description()
        raise RuntimeError(f"{who} has not published a socket path")
    return path


def active_records(target) -> list:
    """The records of threads that are inside a trace right now (valid and trace_present), as dicts
    with ``tid``, ``trace_id``, ``span_id``, ``transaction_id`` (hex)."""
    out = []
    for t in _inspect(target, read_threads=True).get("threads", []):
        r = t.get("record")
        if r and r.get("valid") and r.get("trace_present"):
            out.append(dict(r, tid=t["tid"]))
    return out


def wait_for_records(target, timeout: float = 10.0, poll: float = 0.02, exclude_transactions=()) -> list:
    """Waits until at least one thread is inside a trace (optionally: a transaction not in
    ``exclude_transactions``); returns :func:`active_records`. TimeoutError otherwise."""
    deadline = time.monotonic() + timeout
    excluded = set(exclude_transactions)
    while True:
        records = [r for r in active_records(target) if r["transaction_id"] not in excluded]
        if records:
            return records
        if not target.alive():
            raise RuntimeError(f"{target.description()} ended ({target.exit_description()})")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{target.description()}: no thread published an active trace within {timeout} s")
        time.sleep(poll)
